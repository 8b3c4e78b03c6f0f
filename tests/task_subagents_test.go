package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// subAgentScript: the parent splits the task between two sub-agents (one
// slot, so they run one after the other and the script's order holds),
// then checks their work in its own workspace.
const subAgentScript = `model: subagents
slots: 1
turns:
  - tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: alpha, prompt: "Write a.txt saying from a."}
            - {name: beta, prompt: "Write b.txt saying from b."}
  - expect: {last_contains: "Write a.txt"}
    tool_calls:
      - {name: write_file, arguments: {path: a.txt, content: "from a\n"}}
  - expect: {last_role: tool}
    text: "Wrote a.txt."
  - expect: {last_contains: "Write b.txt"}
    tool_calls:
      - {name: bash, arguments: {command: "echo 'from b' > b.txt && cat b.txt"}}
  - expect: {last_role: tool}
    text: "Wrote b.txt."
  - expect: {last_role: tool, tool_result_contains: "Wrote a.txt."}
    tool_calls:
      - {name: bash, arguments: {command: "cat a.txt b.txt && echo edited by the parent >> a.txt"}}
  - expect: {last_role: tool, tool_result_contains: "from b"}
    text: "Both sub-agents finished; their files are in the workspace."
`

// TestSubAgents: spawn_agents runs each sub-agent in its own worktree and
// sandbox, brings their files into the parent's workspace, and the task's
// commit holds them; nothing of the sub-agents is left behind.
func TestSubAgents(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	code, out, errOut := env.Run(repo, "task", "--llm", "script:"+writeScript(t, subAgentScript), "--approve", "keep", env.LabelFlag(), "Write two files")
	if code != 0 {
		t.Fatalf("agent task: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "kept branch") || !strings.Contains(out, "[beta] echo 'from b'") {
		t.Fatalf("task:\n%s", out)
	}
	// One slot: beta waits for alpha's, and the stream says so.
	if !strings.Contains(errOut, "sub-agent beta: queued") || strings.Contains(errOut, "sub-agent alpha: queued") {
		t.Errorf("the queued sub-agent is not shown (or the first one is):\n%s", errOut)
	}
	rec := onlyTask(t, env.StateDir)
	files := Git(t, repo, "ls-tree", "-r", "--name-only", rec.Branch)
	for _, f := range []string{"a.txt", "b.txt"} {
		if !strings.Contains(files, f) {
			t.Errorf("task branch lacks %s:\n%s", f, files)
		}
	}
	if got := Git(t, repo, "show", rec.Branch+":a.txt"); got != "from a\nedited by the parent" {
		t.Errorf("a.txt = %q (the parent could not edit a sub-agent's file?)", got)
	}
	if got := Git(t, repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/agent/"); got != rec.Branch {
		t.Errorf("branches left: %q", got)
	}
	ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees"))
	if len(ents) != 1 {
		t.Errorf("worktrees left: %v", ents)
	}
	cs, err := LabelledContainers(t.Context(), c, env.Label)
	if err != nil || len(cs) != 0 {
		t.Errorf("containers left: %d %v", len(cs), err)
	}
}
