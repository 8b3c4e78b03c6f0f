package orchestrator

import (
	"context"
	"encoding/json"
	"time"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/orchestrator/environment"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// sandboxWorkspace is the agent's Workspace over a sandbox: every tool call
// goes through the Docker exec API into the container (invariant 1); the
// host never opens workspace files for the agent.
type sandboxWorkspace struct {
	sb *sandbox.Sandbox
}

var _ agent.Workspace = sandboxWorkspace{}

// NewWorkspace returns the agent's view of a sandbox: every call goes
// through the Docker exec API into the container. Commands that run one
// tool the way the agent does (`agent sandbox tool`) use it with
// agent.RunTool.
func NewWorkspace(sb *sandbox.Sandbox) agent.Workspace { return sandboxWorkspace{sb: sb} }

// Call runs one workspace tool in the sandbox.
func (w sandboxWorkspace) Call(ctx context.Context, tool string, args json.RawMessage) (agent.ToolResult, error) {
	resp, err := w.sb.Tool(ctx, tool, args)
	if err != nil {
		return agent.ToolResult{}, err
	}
	out := resp.Output
	if tool == toolbox.ToolBash && resp.ExitCode != nil && *resp.ExitCode == 127 {
		// The command (or a program it ran) is not in the image: say which
		// and how to add it, so the model does not guess and the user
		// knows what to change.
		out += "\n" + environment.MissingNote(resp.Output)
	}
	return agent.ToolResult{
		Output:    out,
		IsError:   resp.IsError,
		ExitCode:  resp.ExitCode,
		TimedOut:  resp.TimedOut,
		OOMKilled: resp.OOMKilled,
		Truncated: resp.Truncated,
		Duration:  time.Duration(resp.DurationMS) * time.Millisecond,
	}, nil
}
