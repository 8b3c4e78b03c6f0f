package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/sandbox"
)

// TestGCOnlyTouchesItsStateDir: gc removes an orphaned sandbox of its own
// state directory and leaves one that belongs to another state directory
// alone. Control: the other state directory's gc removes it (so it was an
// orphan too, and only the state label protected it).
func TestGCOnlyTouchesItsStateDir(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	other := NewAgentEnv(t, c)
	other.Label = env.Label // one cleanup label for both
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eng, err := sandbox.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	toolbox := filepath.Join(Binaries(t), "agent-toolbox")
	mk := func(stateDir string) string {
		sb, err := eng.Create(ctx, sandbox.Spec{
			Workspace: t.TempDir(), Image: "agent/busybox:latest", Toolbox: toolbox,
			Task: "dead00", StateID: orchestrator.StateID(stateDir),
			Labels: map[string]string{sandbox.LabelTest: env.Label},
		})
		if err != nil {
			t.Fatal(err)
		}
		sb.Close()
		return sb.ID
	}
	mine, theirs := mk(env.StateDir), mk(other.StateDir)
	if err := os.MkdirAll(env.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, env, t.TempDir(), "gc")
	if !strings.Contains(out, "removed sandbox container "+mine[:10]) {
		t.Errorf("gc did not remove its orphan:\n%s", out)
	}
	if strings.Contains(out, theirs[:10]) {
		t.Errorf("gc touched another state directory's container:\n%s", out)
	}
	alive := map[string]bool{}
	cs, err := LabelledContainers(ctx, c, env.Label)
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range cs {
		alive[ct.ID] = true
	}
	if alive[mine] || !alive[theirs] {
		t.Fatalf("after gc: mine alive %v, theirs alive %v", alive[mine], alive[theirs])
	}

	// Control.
	out = mustRun(t, other, t.TempDir(), "gc")
	if !strings.Contains(out, "removed sandbox container "+theirs[:10]) {
		t.Errorf("control: the other state directory's gc did not remove its orphan:\n%s", out)
	}
}
