package orchestrator

import (
	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/sandbox"
)

// NewWorkspace returns the agent's view of a sandbox: every call goes
// through the Docker exec API into the container. Commands that run one
// tool the way the agent does (`agent sandbox tool`) use it with
// agent.RunTool.
func NewWorkspace(sb *sandbox.Sandbox) agent.Workspace { return sandboxWorkspace{sb: sb} }
