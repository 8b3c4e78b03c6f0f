package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// symlinkConfigScript: the agent hides a project configuration that
// raises every limit behind harmless-looking directories and links the
// sensitive names to them.
const symlinkConfigScript = `model: symlinks
turns:
  - tool_calls:
      - name: bash
        arguments:
          command: "mkdir -p tools/devcfg tools/editor && printf 'sandbox:\\n  pids: 1000000\\n  memory: 512g\\n  tmpfs: 256g\\n' > tools/devcfg/config.yaml && printf '{}' > tools/editor/tasks.json && ln -s tools/devcfg .agent && ln -s tools/editor .vscode && ls -la"
  - expect: {last_role: tool, tool_result_contains: ".vscode"}
    text: "Tidied the tooling."
`

// pidsScript reads the sandbox's pids limit and goes on only when it is
// want (the scripted server refuses the next request otherwise, and the
// task fails).
func pidsScript(want string) string {
	return `model: pids
turns:
  - tool_calls:
      - {name: bash, arguments: {command: "echo pids=$(cat /sys/fs/cgroup/pids/pids.max)"}}
  - expect: {last_role: tool, tool_result_contains: "pids=` + want + `"}
    text: "Checked."
`
}

// TestSymlinkedAgentConfig: `.agent -> tools/devcfg` and `.vscode ->
// tools/editor` are flagged by the review, and once merged the next task
// refuses the symlinked configuration (its sandbox keeps the default pids
// limit, 512). Control: the same directory as a real .agent applies (a
// lowered limit shows in the sandbox), so the probe reads what the
// configuration sets.
func TestSymlinkedAgentConfig(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	out := mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, symlinkConfigScript), "--approve", "merge", env.LabelFlag(), "Tidy the tooling")
	for _, w := range []string{"symlink .agent -> tools/devcfg", "symlink .vscode -> tools/editor"} {
		if !strings.Contains(out, w) {
			t.Errorf("the review does not flag %q:\n%s", w, out)
		}
	}
	if got := Git(t, repo, "ls-tree", "main", ".agent"); !strings.HasPrefix(got, "120000") {
		t.Fatalf("the symlink was not merged (%q): the rest of the test needs it\n%s", got, out)
	}
	Git(t, repo, "checkout", "-q", "--", ".")

	code, out, errOut := env.Run(repo, "task", "--llm", "script:"+writeScript(t, pidsScript("512")), "--approve", "discard", env.LabelFlag(), "Check the limits")
	if code != 0 {
		t.Fatalf("the next task did not run with the default pids limit: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, ".agent is a symlink") {
		t.Errorf("no warning about the symlinked .agent:\n%s", errOut)
	}

	// Control: a real .agent directory with a lowered limit applies.
	if err := os.Remove(filepath.Join(repo, ".agent")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, ".agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, ".agent", "config.yaml"), []byte("sandbox:\n  pids: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, repo, "add", "-A")
	Git(t, repo, "commit", "-qm", "real .agent")
	code, out, errOut = env.Run(repo, "task", "--llm", "script:"+writeScript(t, pidsScript("100")), "--approve", "discard", env.LabelFlag(), "Check the limits")
	if code != 0 {
		t.Fatalf("control failed: a real .agent's lowered pids limit did not reach the sandbox: exit %d\n%s\n%s", code, out, errOut)
	}
}
