package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A command that hits its timeout is recorded as such, and the review
// shows it (TIME), not as a plain failure.
func TestTaskRecordsTimedOutCommands(t *testing.T) {
	c := RequireEngine(t)
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(`model: timeout
turns:
  - tool_calls:
      - {name: bash, arguments: {command: "sleep 30", timeout: 1}}
  - tool_calls:
      - {name: bash, arguments: {command: "false"}}
  - text: "done"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	code, stdout, stderr := env.Run(repo, "task", "--repo", repo, "--llm", "script:"+script, "--approve", "keep", env.LabelFlag(), "wait")
	if code != 0 {
		t.Fatalf("agent task exited %d:\n%s", code, stderr)
	}
	task := onlyTask(t, env.StateDir)
	if len(task.Commands) != 2 {
		t.Fatalf("commands recorded: %+v", task.Commands)
	}
	// Control: the plain failure is not marked as a timeout.
	if !task.Commands[0].TimedOut || task.Commands[1].TimedOut {
		t.Errorf("timed_out = %v, %v; want true, false", task.Commands[0].TimedOut, task.Commands[1].TimedOut)
	}
	out := stdout + stderr
	if !strings.Contains(out, "TIME exit") || !strings.Contains(out, "FAIL exit 1") {
		t.Errorf("review does not mark the timeout and the failure apart:\n%s", out)
	}
}
