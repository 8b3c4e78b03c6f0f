package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// The claim journal, without an engine: a claimed member is found by the
// lookups of "the sandboxes over this worktree" and "of this task" only
// through WithPoolClaims (control: the backend alone, which sees the
// container's labels, misses it); its old slot no longer finds it; the
// member is handed out once; and a spec with egress is refused untouched.
func TestPoolClaimJournalLookups(t *testing.T) {
	b := sandboxtest.NewLocal()
	root := t.TempDir()
	dir := filepath.Join(root, "pool")
	p, err := sandbox.NewPool(b, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	tb := filepath.Join(root, "toolbox")
	if err := os.WriteFile(tb, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := sandbox.Spec{Workspace: filepath.Join(root, "wt"), Toolbox: tb, Task: "t1", StateID: "s1",
		Labels: map[string]string{sandbox.LabelUse: "task"}}
	if err := os.Mkdir(spec.Workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.Fill(ctx, spec); err != nil {
		t.Fatal(err)
	}
	members, err := p.Members(ctx)
	if err != nil || len(members) != 1 || members[0].Pool != sandbox.PoolIdle {
		t.Fatalf("members after fill: %v %v", members, err)
	}
	slot := members[0].Workspace
	if members[0].Labels[sandbox.LabelTask] != "" {
		t.Fatalf("an idle member carries a task label: %v", members[0].Labels)
	}
	sb, err := p.Claim(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != members[0].ID {
		t.Fatalf("claimed %s, the member is %s", sb.ID, members[0].ID)
	}
	lookup := sandbox.WithPoolClaims(b, dir)
	find := func(be sandbox.Backend, label string) int {
		t.Helper()
		l, err := be.List(ctx, sandbox.ListOptions{Labels: []string{label}, Running: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	for _, l := range []string{sandbox.LabelWorkspace + "=" + spec.Workspace, sandbox.LabelTask + "=t1", sandbox.LabelUse + "=task"} {
		if find(lookup, l) != 1 {
			t.Errorf("lookup %s does not find the claimed member", l)
		}
		if find(b, l) != 0 {
			t.Errorf("control: the backend alone finds the member by %s (the test shows nothing)", l)
		}
	}
	if find(lookup, sandbox.LabelWorkspace+"="+slot) != 0 {
		t.Error("the claimed member is still found over its old slot")
	}
	if got, err := lookup.Get(ctx, sb.ID); err != nil || got.Workspace != spec.Workspace || got.Pool != sandbox.PoolClaimed {
		t.Errorf("Get: %+v %v", got, err)
	}
	if _, err := os.Lstat(slot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the slot is still there after the claim: %v", err)
	}
	// Handed out once.
	ws2 := filepath.Join(root, "wt2")
	if err := os.Mkdir(ws2, 0o755); err != nil {
		t.Fatal(err)
	}
	s2 := spec
	s2.Workspace = ws2
	if _, err := p.Claim(ctx, s2); !errors.Is(err, sandbox.ErrPoolEmpty) {
		t.Errorf("second claim of a pool of one: %v, want ErrPoolEmpty", err)
	}
	// Egress: refused, nothing moved.
	if err := os.WriteFile(filepath.Join(ws2, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2.EgressDir = t.TempDir()
	if _, err := p.Claim(ctx, s2); !errors.Is(err, sandbox.ErrNotPoolable) {
		t.Errorf("claim with egress: %v, want ErrNotPoolable", err)
	}
	if _, err := os.Stat(filepath.Join(ws2, "f")); err != nil {
		t.Errorf("a refused claim touched the workspace: %v", err)
	}
}
