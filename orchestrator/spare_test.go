package orchestrator

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

func spareTestRepo(t *testing.T) *worktree.Repo {
	t.Helper()
	if testing.Short() {
		t.Skip("runs real git")
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	for _, f := range []string{"a.txt", "d/b.txt", "d/e/c.txt"} {
		p := filepath.Join(dir, f)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	r, err := worktree.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The second worktree at a commit takes over the spare checkout the first
// one left behind (owned by the sandbox user already), and a spare serves
// one worktree only.
func TestPopulateUsesSpareCheckout(t *testing.T) {
	ctx := context.Background()
	repo := spareTestRepo(t)
	state := t.TempDir()
	o, err := New(Options{StateDir: state, SpareCheckouts: 1})
	if err != nil {
		t.Fatal(err)
	}
	base, err := repo.ResolveBase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	task := &store.Task{ID: "t", StartCommit: base.Commit}
	u := sandbox.UserChoice{UID: os.Getuid(), GID: os.Getgid()}
	if os.Geteuid() == 0 {
		u = sandbox.UserChoice{UID: 65534, GID: 65534, Chown: true}
	}
	add := func(name string) *worktree.Worktree {
		w, err := repo.Add(ctx, worktree.AddOptions{Path: filepath.Join(state, "worktrees", name), Branch: "agent/" + name, Start: base.Commit, NoCheckout: true})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w1 := add("one")
	if err := o.populateFast(ctx, repo, w1, task, u); err != nil {
		t.Fatal(err)
	}
	o.WaitSpares()
	ents, _ := os.ReadDir(o.sparesDir())
	if len(ents) != 1 {
		t.Fatalf("%d spares after the first worktree, want 1", len(ents))
	}
	// Mark the spare, to see where its files go.
	marker := filepath.Join(o.sparesDir(), ents[0].Name(), "files", "from-spare")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w2, w3 := add("two"), add("three")
	if err := o.populateFast(ctx, repo, w2, task, u); err != nil {
		t.Fatal(err)
	}
	if err := o.populateFast(ctx, repo, w3, task, u); err != nil {
		t.Fatal(err)
	}
	o.WaitSpares()
	if _, err := os.Lstat(filepath.Join(w2.Path, "from-spare")); err != nil {
		t.Fatalf("the second worktree was not made from the spare: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(w3.Path, "from-spare")); err == nil {
		t.Fatal("the third worktree got the same spare as the second")
	}
	for _, w := range []*worktree.Worktree{w1, w2, w3} {
		for _, f := range []string{"", "a.txt", "d", "d/e/c.txt"} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(w.Path, f), &st); err != nil {
				t.Fatal(err)
			}
			if int(st.Uid) != u.UID || int(st.Gid) != u.GID {
				t.Errorf("%s/%s owned by %d:%d, want %d:%d", w.Path, f, st.Uid, st.Gid, u.UID, u.GID)
			}
		}
	}
	// Without the marker the spare-made worktree is exactly the commit.
	_ = os.Remove(filepath.Join(w2.Path, "from-spare"))
	for _, w := range []*worktree.Worktree{w1, w2, w3} {
		if ch, err := repo.Changes(ctx, w); err != nil || len(ch) != 0 {
			t.Fatalf("%s not clean: %v %v", w.Path, ch, err)
		}
	}
	if rem := o.gcSpares(); len(rem) != 1 {
		t.Fatalf("gc removed %v, want the one spare", rem)
	}
}

// With spare checkouts off, nothing is made ahead of time.
func TestNoSpareWhenDisabled(t *testing.T) {
	ctx := context.Background()
	repo := spareTestRepo(t)
	state := t.TempDir()
	o, err := New(Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := repo.ResolveBase(ctx, "")
	w, err := repo.Add(ctx, worktree.AddOptions{Path: filepath.Join(state, "worktrees", "w"), Branch: "agent/w", Start: base.Commit, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.populateFast(ctx, repo, w, &store.Task{ID: "t", StartCommit: base.Commit}, sandbox.UserChoice{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	o.WaitSpares()
	if _, err := os.Stat(o.sparesDir()); !os.IsNotExist(err) {
		t.Fatalf("spares directory exists with spare checkouts off: %v", err)
	}
}

// A worktree made from a spare is walked to hand files over only when the
// extras (submodules, LFS, approved untracked files) may have written
// into it as this process's user.
func TestExtrasMayWrite(t *testing.T) {
	ctx := context.Background()
	repo := spareTestRepo(t)
	state := t.TempDir()
	base, _ := repo.ResolveBase(ctx, "")
	w, err := repo.Add(ctx, worktree.AddOptions{Path: filepath.Join(state, "worktrees", "w"), Branch: "agent/w", Start: base.Commit, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Populate(ctx, w); err != nil {
		t.Fatal(err)
	}
	task := &store.Task{ID: "t", StartCommit: base.Commit}
	plain, _ := New(Options{StateDir: state})
	if plain.extrasMayWrite(ctx, repo, w, task) {
		t.Fatal("a repository without submodules, LFS or includes may be written by the extras?")
	}
	withInclude, _ := New(Options{StateDir: state, Environment: EnvironmentOptions{Include: []string{".env"}}})
	if !withInclude.extrasMayWrite(ctx, repo, w, task) {
		t.Fatal("approved includes are copied in, yet the spare's tree would not be handed over")
	}
}
