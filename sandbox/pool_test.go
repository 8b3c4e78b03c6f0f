package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// Environment of TestPoolClaimHelper, the other process of
// TestPoolClaimsNeverShared.
const (
	helperPoolEnv = "AGENT_TEST_POOL_HELPER"
	helperSpecEnv = "AGENT_TEST_POOL_SPEC"
)

// poolSpec is the spec a race test's members are made for.
func poolSpec(t *testing.T) sandbox.Spec {
	return sandbox.Spec{
		Workspace: t.TempDir(), Image: sandboxtest.BusyboxImage, Toolbox: sandboxtest.Toolbox(t),
		Labels: map[string]string{sandbox.LabelTest: sandboxtest.TestLabel(t)},
	}
}

// removeMembers removes every member of p when the test ends.
func removeMembers(t *testing.T, e *sandbox.Engine, p *sandbox.Pool) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.WaitRefills()
		members, err := p.Members(ctx)
		if err != nil {
			t.Errorf("listing pool members: %v", err)
		}
		for _, sb := range members {
			_ = e.Remove(ctx, sb.ID)
		}
	})
}

// claimMany claims n members at once for workspaces under root (named
// prefix-i) and returns "id workspace" for each claim that got one.
func claimMany(ctx context.Context, p *sandbox.Pool, spec sandbox.Spec, root, prefix string, n int) ([]string, error) {
	var (
		mu   sync.Mutex
		got  []string
		errs []error
		wg   sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws := filepath.Join(root, fmt.Sprintf("%s-%d", prefix, i))
			if err := os.Mkdir(ws, 0o755); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			s := spec
			s.Workspace = ws
			sb, err := p.Claim(ctx, s)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, sandbox.ErrPoolEmpty):
			case err != nil:
				errs = append(errs, err)
			default:
				got = append(got, sb.ID+" "+ws)
			}
		}()
	}
	wg.Wait()
	return got, errors.Join(errs...)
}

// TestPoolClaimHelper is the second process of TestPoolClaimsNeverShared;
// it does nothing in a normal run.
func TestPoolClaimHelper(t *testing.T) {
	dir := os.Getenv(helperPoolEnv)
	if dir == "" {
		t.Skip("helper process of TestPoolClaimsNeverShared")
	}
	e := sandboxtest.RequireDocker(t)
	var spec sandbox.Spec
	if err := json.Unmarshal([]byte(os.Getenv(helperSpecEnv)), &spec); err != nil {
		t.Fatal(err)
	}
	p, err := sandbox.NewPool(e, dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := claimMany(t.Context(), p, spec, filepath.Dir(dir), fmt.Sprintf("helper%d", os.Getpid()), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		fmt.Println("CLAIMED " + g)
	}
}

// Two processes and several goroutines claim at once from one pool of
// four members: exactly four claims succeed, each with a different
// member, and each member works on the workspace it was claimed for.
// Control: claimers without the exclusive claim record take a member
// another claimer holds.
func TestPoolClaimsNeverShared(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	root := t.TempDir()
	dir := filepath.Join(root, "pool")
	spec := poolSpec(t)
	p, err := sandbox.NewPool(e, dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	removeMembers(t, e, p)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := p.Fill(ctx, spec); err != nil {
		t.Fatal(err)
	}
	specJSON, _ := json.Marshal(sandbox.Spec{Image: spec.Image, Toolbox: spec.Toolbox, Labels: spec.Labels})
	var helpers []*exec.Cmd
	var outs []*bytes.Buffer
	for range 2 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPoolClaimHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperPoolEnv+"="+dir, helperSpecEnv+"="+string(specJSON))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		helpers = append(helpers, cmd)
		outs = append(outs, out)
	}
	// This process races them with a pool of its own over the same
	// directory, as another agent process would.
	mine, err := sandbox.NewPool(e, dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := claimMany(ctx, mine, spec, root, "main", 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, cmd := range helpers {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper process: %v\n%s", err, outs[i])
		}
		sc := bufio.NewScanner(outs[i])
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "CLAIMED "); ok {
				got = append(got, rest)
			}
		}
	}
	seen := map[string]string{}
	for _, g := range got {
		id, ws, _ := strings.Cut(g, " ")
		if other, dup := seen[id]; dup {
			t.Errorf("member %.12s claimed twice: for %s and %s", id, other, ws)
		}
		seen[id] = ws
	}
	if len(got) != 4 {
		t.Errorf("%d claims succeeded, want exactly the 4 members: %v", len(got), got)
	}
	lookup := sandbox.WithPoolClaims(e, dir)
	for id, ws := range seen {
		if err := os.WriteFile(filepath.Join(ws, "whoami"), []byte(ws), 0o644); err != nil {
			t.Fatal(err)
		}
		sb, err := lookup.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Workspace != ws || sb.Labels[sandbox.LabelWorkspace] != ws || sb.Pool != sandbox.PoolClaimed {
			t.Errorf("member %.12s is looked up as workspace %s (label %s, pool %q), claimed for %s", id, sb.Workspace, sb.Labels[sandbox.LabelWorkspace], sb.Pool, ws)
		}
		if r := sh(t, sb, "cat /workspace/whoami"); strings.TrimSpace(r.Output) != ws {
			t.Errorf("member %.12s sees %q in /workspace, claimed for %s", id, r.Output, ws)
		}
	}

	// Control: two claimers that trust their own listing and overwrite
	// each other's record both take the one member.
	cp, err := sandbox.NewPool(e, filepath.Join(root, "control"), 1)
	if err != nil {
		t.Fatal(err)
	}
	removeMembers(t, e, cp)
	if err := cp.Fill(ctx, spec); err != nil {
		t.Fatal(err)
	}
	first, err := cp.Claim(ctx, withWorkspace(spec, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	lax, err := sandbox.NewPool(e, cp.Dir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	sandbox.WithoutExclusiveClaims(lax)
	second, err := lax.Claim(ctx, withWorkspace(spec, t.TempDir()))
	stillThere := e.CheckRunning(ctx, first.ID) == nil
	if !(err == nil && second.ID == first.ID) && stillThere {
		t.Errorf("control: without the exclusive record the second claimer should take (or break) the first one's member: err %v, first running %v", err, stillThere)
	}
}

func withWorkspace(s sandbox.Spec, ws string) sandbox.Spec {
	s.Workspace = ws
	return s
}

// Claiming keeps nothing of the workspace behind: files already in it
// (a sub-agent's checkout) move into the member, with the directory's
// mode and owner; a spec the pool cannot serve is refused without
// touching anything; gc's sweep removes idle members once the pool is
// off and keeps claimed ones.
func TestPoolClaimMovesWorkspaceAndSweeps(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	root := t.TempDir()
	dir := filepath.Join(root, "pool")
	spec := poolSpec(t)
	p, err := sandbox.NewPool(e, dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	removeMembers(t, e, p)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := p.Fill(ctx, spec); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "checkout")
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "sub", "a.txt"), []byte("from the checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ws, 0o751); err != nil {
		t.Fatal(err)
	}
	sb, err := p.Claim(ctx, withWorkspace(spec, ws))
	if err != nil {
		t.Fatal(err)
	}
	if r := sh(t, sb, "cat /workspace/sub/a.txt && echo new > /workspace/b.txt"); !strings.Contains(r.Output, "from the checkout") {
		t.Errorf("the claimed sandbox does not see the checkout: %s", r.Output)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "b.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("the sandbox's write is not in the workspace: %q %v", b, err)
	}
	if fi, err := os.Stat(ws); err != nil || fi.Mode().Perm() != 0o751 {
		t.Errorf("workspace mode after the claim: %v %v, want 0751", fi.Mode(), err)
	}

	// Egress is never pooled, and the refusal changes nothing.
	other := t.TempDir()
	if _, err := p.Claim(ctx, sandbox.Spec{Workspace: other, Image: spec.Image, Toolbox: spec.Toolbox, Labels: spec.Labels, EgressDir: t.TempDir()}); !errors.Is(err, sandbox.ErrNotPoolable) {
		t.Errorf("claim with egress: %v, want ErrNotPoolable", err)
	}

	members, err := p.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idle, claimed := 0, 0
	for _, m := range members {
		switch m.Pool {
		case sandbox.PoolIdle:
			idle++
		case sandbox.PoolClaimed:
			claimed++
		}
	}
	if idle != 1 || claimed != 1 {
		t.Fatalf("members: %d idle, %d claimed, want 1 and 1", idle, claimed)
	}
	// The pool switched off: the idle member goes, the claimed one stays.
	off, err := sandbox.NewPool(e, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := off.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] == sb.ID {
		t.Errorf("sweep with the pool off removed %v (claimed %s)", removed, sb.ID)
	}
	if err := e.CheckRunning(ctx, sb.ID); err != nil {
		t.Errorf("the claimed sandbox was removed by the sweep: %v", err)
	}
}

// An idle member made with a toolbox binary that has changed since is
// removed by the sweep (gc, and every refill); control: before the
// change, the same sweep keeps it.
func TestPoolSweepsMembersOfAChangedToolbox(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	root := t.TempDir()
	tb := filepath.Join(root, "agent-toolbox")
	b, err := os.ReadFile(sandboxtest.Toolbox(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tb, b, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := poolSpec(t)
	spec.Toolbox = tb
	p, err := sandbox.NewPool(e, filepath.Join(root, "pool"), 1)
	if err != nil {
		t.Fatal(err)
	}
	removeMembers(t, e, p)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := p.Fill(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if removed, err := p.Sweep(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("control: sweep of a fresh member removed %v (%v)", removed, err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(tb, later, later); err != nil {
		t.Fatal(err)
	}
	removed, err := p.Sweep(ctx)
	if err != nil || len(removed) != 1 {
		t.Fatalf("sweep after the toolbox changed removed %v (%v), want its one member", removed, err)
	}
	if err := e.CheckRunning(ctx, removed[0]); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the stale member is still there: %v", err)
	}
}
