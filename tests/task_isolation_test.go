package tests

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const dmesgScript = `model: scripted
turns:
  - tool_calls:
      - {name: bash, arguments: {command: "dmesg 2>&1 | head -n 1; echo probe-done"}}
  - text: "Probed."
`

// A task run with --isolation records it, and its follow-up (agent
// continue, with the configuration left at its default) makes its sandbox
// the same way: under runsc both sandboxes show gVisor's kernel log; under
// runc (the control, in the ordinary suite) neither does. The suite runs
// under runsc through scripts/podman-runsc-tests.sh.
func TestTaskKeepsIsolationEndToEnd(t *testing.T) {
	iso := os.Getenv("AGENT_TEST_ISOLATION")
	if iso == "" {
		iso = "runc"
	}
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	script := writeScript(t, dmesgScript)
	code, out, errOut := env.Run(repo, "task", "--isolation", iso, "--llm", "script:"+script, "--approve", "keep", env.LabelFlag(), "--json", "probe the kernel")
	if code != 0 {
		t.Fatalf("task: exit %d\n%s\n%s", code, out, errOut)
	}
	tk := onlyTask(t, env.StateDir)
	if tk.Isolation != iso {
		t.Fatalf("task record isolation %q, want %q", tk.Isolation, iso)
	}
	code, out, errOut = env.Run(repo, "continue", tk.ID, "--llm", "script:"+script, "--approve", "keep", env.LabelFlag(), "--json", "again")
	if code != 0 {
		t.Fatalf("continue: exit %d\n%s\n%s", code, out, errOut)
	}
	_, log, _ := env.Run(repo, "log", tk.ID, "--no-pager")
	// Each tool result ends in the line probe-done (the command lines
	// show it too, quoted).
	if n := len(regexp.MustCompile(`(?m)^probe-done$`).FindAllString(log, -1)); n != 2 {
		t.Fatalf("%d probes in the log, want 2:\n%s", n, log)
	}
	gvisor := strings.Count(log, "Starting gVisor")
	if want := map[bool]int{true: 2, false: 0}[iso == "runsc"]; gvisor != want {
		t.Errorf("isolation %s: %d of 2 sandboxes ran under gVisor, want %d:\n%s", iso, gvisor, want, log)
	}
	if got := loadRecord(t, env, tk.ID).Isolation; got != iso {
		t.Errorf("record after continue: isolation %q", got)
	}
}
