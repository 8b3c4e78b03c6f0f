package worktree

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// A task's worktree holds the whole tree even when the user's checkout is
// sparse, and the agent's commit can hold a file outside the user's cone.
// The control: a plain `git worktree add` of the same repository inherits
// the sparsity (the file outside the cone is missing).
func TestSparseCheckoutGetsFullWorktree(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	write(t, filepath.Join(dir, "in", "a.txt"), "in\n")
	write(t, filepath.Join(dir, "out", "x.txt"), "out\n")
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "dirs")
	plainGit(t, dir, "sparse-checkout", "set", "in")
	if _, err := os.Stat(filepath.Join(dir, "out", "x.txt")); !os.IsNotExist(err) {
		t.Fatalf("the user's checkout is not sparse: %v", err)
	}
	ctrl := filepath.Join(t.TempDir(), "plain")
	plainGit(t, dir, "worktree", "add", "-q", "-b", "plain", ctrl)
	if _, err := os.Stat(filepath.Join(ctrl, "out", "x.txt")); !os.IsNotExist(err) {
		t.Fatalf("control: a plain worktree is not sparse (%v), so the test proves nothing", err)
	}

	r := openRepo(t, dir)
	w := addTask(t, r, "sparse")
	if b, err := os.ReadFile(filepath.Join(w.Path, "out", "x.txt")); err != nil || string(b) != "out\n" {
		t.Fatalf("the task's worktree lacks a file outside the user's cone: %q %v", b, err)
	}
	write(t, filepath.Join(w.Path, "out", "y.txt"), "the agent's\n")
	write(t, filepath.Join(w.Path, "out", "x.txt"), "changed\n")
	if _, err := r.CommitAll(ctx, w, "task"); err != nil {
		t.Fatalf("committing outside the user's cone: %v", err)
	}
	if got := plainGit(t, dir, "show", w.Branch+":out/y.txt"); got != "the agent's" {
		t.Errorf("out/y.txt on the task branch: %q", got)
	}
	if got := plainGit(t, dir, "show", w.Branch+":out/x.txt"); got != "changed" {
		t.Errorf("out/x.txt on the task branch: %q", got)
	}
	// A worktree made without a checkout and filled afterwards (as a task
	// start does) is full too.
	base, _ := r.ResolveBase(ctx, "")
	w2, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "nc"), Branch: "agent/test-nc", Start: base.Commit, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Populate(ctx, w2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w2.Path, "out", "x.txt")); err != nil {
		t.Errorf("a populated task worktree lacks a file outside the user's cone: %v", err)
	}
	// The user's checkout stays sparse.
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Errorf("the user's checkout lost its sparsity: %v", err)
	}
}
