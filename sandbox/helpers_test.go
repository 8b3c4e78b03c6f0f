package sandbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// tool runs one tool call and fails the test on an infrastructure error.
func tool(t *testing.T, sb *sandbox.Sandbox, name string, args any) toolbox.Response {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := sb.Tool(ctx, name, b)
	if err != nil {
		t.Fatalf("%s %s: %v", name, b, err)
	}
	return r
}

// sh runs a shell command through the bash tool.
func sh(t *testing.T, sb *sandbox.Sandbox, command string) toolbox.Response {
	t.Helper()
	return tool(t, sb, toolbox.ToolBash, map[string]any{"command": command, "timeout": 30})
}

func exitCode(r toolbox.Response) int {
	if r.ExitCode == nil {
		return -1
	}
	return *r.ExitCode
}
