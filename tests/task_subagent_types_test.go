package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// typedScript: the parent starts three typed sub-agents, one at a time:
// an explore agent whose write is refused as a result, a configured
// read-only shell agent whose write fails on the read-only mount, and a
// configured agent with a budget of two requests that is stopped by it.
const typedScript = `model: typed
slots: 1
turns:
  - tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: scout, type: explore, prompt: "Look around."}
            - {name: ro, type: ro-shell, prompt: "Try writing."}
            - {name: tiny, type: tiny, prompt: "Keep reading."}
  - expect: {last_contains: "Look around."}
    tool_calls:
      - {name: write_file, arguments: {path: scout.txt, content: "should not exist\n"}}
  - expect: {last_role: tool, tool_result_contains: "write_file is not available to this agent"}
    text: "I cannot write."
  - expect: {last_contains: "Try writing."}
    tool_calls:
      - {name: bash, arguments: {command: "echo x > ro.txt"}}
  - expect: {last_role: tool, tool_result_contains: "Read-only file system"}
    text: "The workspace is read-only."
  - expect: {last_contains: "Keep reading."}
    tool_calls:
      - {name: read_file, arguments: {path: greet.sh}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: read_file, arguments: {path: greet.sh}}
  - expect: {last_role: tool, tool_result_contains: "used its whole budget of 2 model requests"}
    text: "All three reported."
`

const typedConfig = `agent:
  types:
    ro-shell:
      description: read-only shell
      tools: [bash, read_*]
      read_only: true
    tiny:
      tools: ["read_*", "g*"]
      max_turns: 2
`

func TestTypedSubAgents(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	cfgDir := filepath.Join(filepath.Dir(env.StateDir), "config", "agent")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(typedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	repo := NewSampleRepo(t)
	out := mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, typedScript), "--approve", "keep", env.LabelFlag(), "Use typed sub-agents")
	if !strings.Contains(out, "All three reported.") {
		t.Fatalf("task:\n%s", out)
	}
	rec := onlyTask(t, env.StateDir)
	files := Git(t, repo, "ls-tree", "-r", "--name-only", rec.Branch)
	for _, f := range []string{"scout.txt", "ro.txt"} {
		if strings.Contains(files, f) {
			t.Errorf("a read-only sub-agent's file %s reached the branch:\n%s", f, files)
		}
	}
	cs, err := LabelledContainers(t.Context(), c, env.Label)
	if err != nil || len(cs) != 0 {
		t.Errorf("containers left: %d %v", len(cs), err)
	}
}
