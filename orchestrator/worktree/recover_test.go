package worktree

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMergeRefusesIgnoredFile: a task that un-ignores .env and creates it
// must not overwrite the user's ignored .env; the merge names it and
// changes nothing. Before the check, read-tree replaced the ignored file
// and the merge reported success.
func TestMergeRefusesIgnoredFile(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	write(t, filepath.Join(dir, ".gitignore"), ".env\nbuild\n")
	plainGit(t, dir, "add", ".gitignore")
	plainGit(t, dir, "commit", "-q", "-m", "ignore")
	write(t, filepath.Join(dir, ".env"), "SECRET=user\n")
	write(t, filepath.Join(dir, "build"), "an ignored file where the task makes a directory\n")
	r := openRepo(t, dir)
	w := addTask(t, r, "ign")
	write(t, filepath.Join(w.Path, ".gitignore"), "")
	write(t, filepath.Join(w.Path, ".env"), "SECRET=agent\n")
	write(t, filepath.Join(w.Path, "build", "out.txt"), "agent\n")
	if _, err := r.CommitAll(ctx, w, "un-ignore"); err != nil {
		t.Fatal(err)
	}
	before := plainGit(t, dir, "rev-parse", "main")
	journalled := false
	_, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m", Journal: func(MergePlan) error { journalled = true; return nil }})
	var ue *UntrackedError
	if !errors.As(err, &ue) || len(ue.Files) != 2 || ue.Files[0] != ".env" || ue.Files[1] != "build" {
		t.Fatalf("got %v, want UntrackedError naming .env and build", err)
	}
	if journalled {
		t.Error("a refused merge was journalled as starting")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".env")); string(b) != "SECRET=user\n" {
		t.Errorf("the user's ignored .env was overwritten: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(b) != ".env\nbuild\n" {
		t.Errorf(".gitignore changed: %q", b)
	}
	if after := plainGit(t, dir, "rev-parse", "main"); after != before {
		t.Error("main moved although the merge was refused")
	}
	// Once the files are moved away the merge goes through.
	_ = os.Remove(filepath.Join(dir, ".env"))
	_ = os.Remove(filepath.Join(dir, "build"))
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); err != nil {
		t.Fatal(err)
	}
}

// interruptedMerge runs a merge that stops (like a killed process) right
// after the user's checkout was updated, before the branch moved, and
// returns the journalled plan.
func interruptedMerge(t *testing.T, r *Repo, branch string) MergePlan {
	t.Helper()
	var plan MergePlan
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the merge did not stop")
			}
		}()
		_, _ = r.Merge(context.Background(), MergeOptions{Branch: branch, Into: "main", Message: "m",
			Journal:       func(p MergePlan) error { plan = p; return nil },
			AfterCheckout: func() { panic("killed") }})
	}()
	return plan
}

// TestRecoverMergeBetweenCheckoutAndRef: a kill between the checkout
// update and the ref update left the task's changes staged in the user's
// checkout with the branch unchanged (a later merge blamed "your
// uncommitted changes"); recovery moves the branch and leaves a clean
// checkout.
func TestRecoverMergeBetweenCheckoutAndRef(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := committedTask(t, r, "half", "a.txt", "agent\n", "new.txt", "new\n")
	before := plainGit(t, dir, "rev-parse", "main")
	plan := interruptedMerge(t, r, w.Branch)
	if plainGit(t, dir, "rev-parse", "main") != before || plainGit(t, dir, "status", "--porcelain") == "" {
		t.Fatal("the simulated kill did not leave the checkout between the two steps")
	}
	// What the old code did next: a second merge refuses, blaming the user.
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); err == nil {
		t.Fatal("merging over a half-applied merge succeeded without recovery")
	}
	got, err := r.RecoverMerge(ctx, plan)
	if err != nil || got != RecoveredFinished {
		t.Fatalf("RecoverMerge = %v, %v; want finished", got, err)
	}
	if plainGit(t, dir, "rev-parse", "main") != plan.To {
		t.Error("main is not at the merge commit")
	}
	if st := plainGit(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("checkout not clean after recovery:\n%s", st)
	}
	// Recovering again is a no-op.
	if got, err := r.RecoverMerge(ctx, plan); err != nil || got != RecoveredFinished {
		t.Fatalf("second RecoverMerge = %v, %v", got, err)
	}
}

// TestRecoverMergeUndoesPartialCheckout: a kill while read-tree was writing
// files (index still old) leaves some files at the merge's content; recovery
// puts exactly those back, leaves the user's own edits alone, and the merge
// can run again.
func TestRecoverMergeUndoesPartialCheckout(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := committedTask(t, r, "part", "a.txt", "agent\n", "new.txt", "new\n")
	before := plainGit(t, dir, "rev-parse", "main")
	var plan MergePlan
	_, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m",
		Journal: func(p MergePlan) error { plan = p; return errors.New("stop before changing anything") }})
	if err == nil {
		t.Fatal("the journal error did not stop the merge")
	}
	// As if read-tree had written two files and then died.
	write(t, filepath.Join(dir, "a.txt"), "agent\n")
	write(t, filepath.Join(dir, "new.txt"), "new\n")
	got, err := r.RecoverMerge(ctx, plan)
	if err != nil || got != RecoveredUndone {
		t.Fatalf("RecoverMerge = %v, %v; want undone", got, err)
	}
	if st := plainGit(t, dir, "status", "--porcelain"); st != "" || plainGit(t, dir, "rev-parse", "main") != before {
		t.Fatalf("checkout not back to before: %q", st)
	}
	// A file the user edited afterwards is never touched.
	write(t, filepath.Join(dir, "new.txt"), "the user's own\n")
	if _, err := r.RecoverMerge(ctx, plan); err == nil {
		t.Error("recovery over a user's file gave no error")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); string(b) != "the user's own\n" {
		t.Errorf("the user's file was touched: %q", b)
	}
	_ = os.Remove(filepath.Join(dir, "new.txt"))
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); err != nil {
		t.Fatalf("merge after recovery: %v", err)
	}
}

// TestFailedAddLeavesNoBranch: when git cannot create the worktree (here
// its admin directory cannot be written, as on a full disk) it has already
// created the branch; Add removes it again.
func TestFailedAddLeavesNoBranch(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	write(t, filepath.Join(dir, ".git", "worktrees"), "not a directory\n")
	base, err := r.ResolveBase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "w"), Branch: "agent/full-disk", Start: base.Commit, NoCheckout: true}); err == nil {
		t.Fatal("Add succeeded without an admin directory")
	}
	if tip, _ := r.BranchTip(ctx, "agent/full-disk"); tip != "" {
		t.Errorf("the branch of a failed Add is left at %s", tip)
	}
}

// TestPruneLost: deleting the state directory left locked admin
// directories that `git worktree prune` skips; PruneLost removes those of
// worktrees gone from under the given directory, and nothing else.
func TestPruneLost(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	state := t.TempDir()
	base, _ := r.ResolveBase(ctx, "")
	lost, err := r.Add(ctx, AddOptions{Path: filepath.Join(state, "worktrees", "lost"), Branch: "agent/lost", Start: base.Commit, Reason: "agent task lost"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := r.Add(ctx, AddOptions{Path: filepath.Join(state, "worktrees", "live"), Branch: "agent/live", Start: base.Commit, Reason: "agent task live"})
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "users")
	plainGit(t, dir, "worktree", "add", "-q", "--lock", other, "-b", "users")
	if err := os.RemoveAll(lost.Path); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(other)
	plainGit(t, dir, "worktree", "prune")
	if _, err := os.Stat(lost.GitDir); err != nil {
		t.Fatal("git prune removed a locked admin directory: the test shows nothing")
	}
	got, err := r.PruneLost(state, func(string) bool { return false })
	if err != nil || len(got) != 1 || got[0] != lost.Path {
		t.Fatalf("PruneLost = %v, %v", got, err)
	}
	if _, err := os.Stat(lost.GitDir); err == nil {
		t.Error("the lost worktree's admin directory is still there")
	}
	if _, err := os.Stat(live.GitDir); err != nil {
		t.Error("a live worktree's admin directory was removed")
	}
	if !strings.Contains(plainGit(t, dir, "worktree", "list"), other) {
		t.Error("the user's own locked worktree was pruned")
	}
	if tip, _ := r.BranchTip(ctx, "agent/lost"); tip == "" {
		t.Error("the branch was deleted")
	}
}

// A merge interrupted beside the user's own staged change converges:
// killed after the checkout update it is finished, killed before it it is
// left undone and runs again, and the user's staged change stays staged
// and untouched either way. The control shows the state such a kill
// leaves: the whole index matches neither the tree before the merge nor
// the one after it, which is all recovery used to look at.
func TestRecoverMergeBesideStagedChange(t *testing.T) {
	ctx := context.Background()
	staged := func(t *testing.T, dir string) {
		t.Helper()
		write(t, filepath.Join(dir, "README.md"), "the user's staged line\n")
		plainGit(t, dir, "add", "README.md")
	}
	keptStaged := func(t *testing.T, dir string) {
		t.Helper()
		if st := plainGit(t, dir, "status", "--porcelain"); st != "M  README.md" {
			t.Errorf("the user's staged change is not as it was: %q", st)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(b) != "the user's staged line\n" {
			t.Errorf("README.md = %q", b)
		}
	}
	wholeIndexIs := func(dir, rev string) bool {
		return exec.Command("git", "-C", dir, "diff-index", "--cached", "--quiet", rev, "--").Run() == nil
	}

	t.Run("after-checkout", func(t *testing.T) {
		dir := newRepo(t)
		r := openRepo(t, dir)
		w := committedTask(t, r, "s1", "a.txt", "agent\n", "new.txt", "new\n")
		staged(t, dir)
		plan := interruptedMerge(t, r, w.Branch)
		if wholeIndexIs(dir, plan.To) || wholeIndexIs(dir, plan.From) {
			t.Fatal("control: the whole index matches one side; the staged change proves nothing")
		}
		got, err := r.RecoverMerge(ctx, plan)
		if err != nil || got != RecoveredFinished {
			t.Fatalf("RecoverMerge = %v, %v; want finished", got, err)
		}
		if plainGit(t, dir, "rev-parse", "main") != plan.To {
			t.Error("main is not at the merge commit")
		}
		keptStaged(t, dir)
		if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); string(b) != "new\n" {
			t.Errorf("new.txt = %q", b)
		}
	})
	t.Run("before-checkout", func(t *testing.T) {
		dir := newRepo(t)
		r := openRepo(t, dir)
		w := committedTask(t, r, "s2", "a.txt", "agent\n", "new.txt", "new\n")
		staged(t, dir)
		before := plainGit(t, dir, "rev-parse", "main")
		var plan MergePlan
		if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m",
			Journal: func(p MergePlan) error { plan = p; return errors.New("killed") }}); err == nil {
			t.Fatal("the journal error did not stop the merge")
		}
		if wholeIndexIs(dir, plan.From) {
			t.Fatal("control: the whole index matches the tree before the merge; the staged change proves nothing")
		}
		if got, err := r.RecoverMerge(ctx, plan); err != nil || got != RecoveredNothing {
			t.Fatalf("RecoverMerge = %v, %v; want nothing to do", got, err)
		}
		if plainGit(t, dir, "rev-parse", "main") != before {
			t.Error("main moved")
		}
		keptStaged(t, dir)
		if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); err != nil {
			t.Fatalf("merge after recovery: %v", err)
		}
		keptStaged(t, dir)
	})
	t.Run("checkout-half-written", func(t *testing.T) {
		dir := newRepo(t)
		r := openRepo(t, dir)
		w := committedTask(t, r, "s3", "a.txt", "agent\n", "new.txt", "new\n")
		staged(t, dir)
		var plan MergePlan
		_, _ = r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m",
			Journal: func(p MergePlan) error { plan = p; return errors.New("killed") }})
		write(t, filepath.Join(dir, "new.txt"), "new\n") // as if read-tree died after one file
		if got, err := r.RecoverMerge(ctx, plan); err != nil || got != RecoveredUndone {
			t.Fatalf("RecoverMerge = %v, %v; want undone", got, err)
		}
		keptStaged(t, dir)
	})
}
