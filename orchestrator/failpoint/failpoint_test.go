package failpoint

import (
	"os"
	"os/exec"
	"testing"
)

// TestHitKills: with the variable set, the process dies at the point (in a
// child process); without it, Hit does nothing.
func TestHitKills(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Hit("task-before-commit")
		os.Exit(0)
	}
	Hit("task-before-commit") // not armed here: returns
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitKills$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", Env+"=task-before-commit")
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != -1 {
		t.Fatalf("child was not killed: %v", err)
	}
	cmd = exec.Command(os.Args[0], "-test.run=^TestHitKills$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", Env+"=merge-before-cleanup")
	if err := cmd.Run(); err != nil {
		t.Fatalf("an unarmed point killed the child: %v", err)
	}
}

func TestUnknownPointPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for an unknown point")
		}
	}()
	Hit("no-such-point")
}
