package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Hooks are shell commands from configuration run at points of the loop.
// They run INSIDE the sandbox through Workspace.Call("bash", ...), never on
// the host: hooks can come from a repository's own config file, and a
// repository must not be able to run commands on the user's machine.
//
// Each hook sees AGENT_HOOK (session_start, pre_tool, post_tool) and, for
// tool hooks, AGENT_TOOL_NAME and AGENT_TOOL_ARGS (the JSON arguments, cut
// at 64 KiB); post_tool hooks also see AGENT_TOOL_IS_ERROR (0/1) and
// AGENT_TOOL_EXIT_CODE (bash only).
type Hooks struct {
	// SessionStart runs once when a session starts or resumes; its output
	// is shown to the model in the system prompt.
	SessionStart []string
	// PreTool runs before every workspace tool call and spawn_agents. A
	// non-zero exit blocks the call and its output becomes the tool result.
	PreTool []string
	// PostTool runs after those calls; its output is reported as an event.
	PostTool []string
	// Timeout of one hook; default 60 s.
	Timeout time.Duration
}

const (
	hookArgsMax      = 64 << 10
	hookOutputMax    = 4 << 10
	hookSessionStart = "session_start"
	hookPreTool      = "pre_tool"
	hookPostTool     = "post_tool"
)

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runHook runs one hook command with the given environment.
func (r *toolRunner) runHook(ctx context.Context, hook, command string, env [][2]string) (ToolResult, error) {
	var b strings.Builder
	b.WriteString("export AGENT_HOOK=")
	b.WriteString(shellQuote(hook))
	for _, kv := range env {
		b.WriteString(" ")
		b.WriteString(kv[0])
		b.WriteString("=")
		b.WriteString(shellQuote(kv[1]))
	}
	b.WriteString("\n")
	b.WriteString(command)
	timeout := r.hooks.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	secs := int((timeout + time.Second - 1) / time.Second)
	args, err := json.Marshal(struct {
		Command string `json:"command"`
		Timeout int    `json:"timeout"`
	}{b.String(), secs})
	if err != nil {
		return ToolResult{}, fmt.Errorf("hook: %w", err)
	}
	res, err := r.ws.Call(ctx, ToolBash, args)
	if err != nil {
		return res, fmt.Errorf("%s hook %q: %w", hook, command, err)
	}
	if r.hookSink != nil {
		r.hookSink(hook+": "+command, res)
	}
	return res, nil
}

func hookFailed(res ToolResult) bool {
	return res.IsError || (res.ExitCode != nil && *res.ExitCode != 0)
}

func toolEnv(name string, args []byte) [][2]string {
	return [][2]string{
		{"AGENT_TOOL_NAME", name},
		{"AGENT_TOOL_ARGS", cutUTF8(string(args), hookArgsMax)},
	}
}

// preTool runs the pre_tool hooks in order; the first that fails blocks
// the call.
func (r *toolRunner) preTool(ctx context.Context, name string, args []byte) (bool, ToolResult, error) {
	for _, cmd := range r.hooks.PreTool {
		res, err := r.runHook(ctx, hookPreTool, cmd, toolEnv(name, args))
		if err != nil {
			return true, ToolResult{}, err
		}
		if hookFailed(res) {
			code := "failed"
			if res.ExitCode != nil {
				code = "exit " + strconv.Itoa(*res.ExitCode)
			}
			out := strings.TrimSpace(shorten(res.Output, hookOutputMax, "hook output cut"))
			return true, ToolResult{
				Output:   fmt.Sprintf("blocked by pre_tool hook (%s): %s", code, out),
				IsError:  true,
				Duration: res.Duration,
			}, nil
		}
	}
	return false, ToolResult{}, nil
}

// postTool runs the post_tool hooks; they cannot change the result.
func (r *toolRunner) postTool(ctx context.Context, name string, args []byte, res ToolResult) error {
	env := toolEnv(name, args)
	isErr := "0"
	if res.IsError {
		isErr = "1"
	}
	env = append(env, [2]string{"AGENT_TOOL_IS_ERROR", isErr})
	if res.ExitCode != nil {
		env = append(env, [2]string{"AGENT_TOOL_EXIT_CODE", strconv.Itoa(*res.ExitCode)})
	}
	for _, cmd := range r.hooks.PostTool {
		if _, err := r.runHook(ctx, hookPostTool, cmd, env); err != nil {
			return err
		}
	}
	return nil
}

// sessionStart runs the session_start hooks and returns their combined
// output for the system prompt.
func (r *toolRunner) sessionStart(ctx context.Context) (string, error) {
	var b strings.Builder
	for _, cmd := range r.hooks.SessionStart {
		res, err := r.runHook(ctx, hookSessionStart, cmd, nil)
		if err != nil {
			return "", err
		}
		out := strings.TrimSpace(shorten(res.Output, hookOutputMax, "hook output cut"))
		if out != "" {
			fmt.Fprintf(&b, "$ %s\n%s\n", cmd, out)
		}
	}
	return b.String(), nil
}
