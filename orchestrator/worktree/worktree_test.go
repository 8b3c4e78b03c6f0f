package worktree

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// plainGit runs git the way a user would, in dir, with no hardening. Tests
// use it to build fixtures and for the controls of the security tests.
func plainGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// integration skips tests that run real git under -short.
func integration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test with real git; skipped with -short")
	}
}

// newRepo makes a repository with one commit on main.
func newRepo(t *testing.T) string {
	t.Helper()
	integration(t)
	dir := t.TempDir()
	plainGit(t, dir, "init", "-q", "-b", "main")
	write(t, filepath.Join(dir, "README.md"), "hello\n")
	write(t, filepath.Join(dir, "a.txt"), "one\ntwo\nthree\n")
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "init")
	return dir
}

func openRepo(t *testing.T, dir string) *Repo {
	t.Helper()
	r, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func addTask(t *testing.T, r *Repo, id string) *Worktree {
	t.Helper()
	ctx := context.Background()
	base, err := r.ResolveBase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), id), Branch: "agent/test-" + id, Start: base.Commit})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// committedTask is addTask with files (path, content pairs) written into
// the worktree and committed on the task branch.
func committedTask(t *testing.T, r *Repo, id string, files ...string) *Worktree {
	t.Helper()
	w := addTask(t, r, id)
	for i := 0; i+1 < len(files); i += 2 {
		write(t, filepath.Join(w.Path, files[i]), files[i+1])
	}
	if _, err := r.CommitAll(context.Background(), w, "task "+id); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestOpenErrors(t *testing.T) {
	integration(t)
	ctx := context.Background()
	if _, err := Open(ctx, t.TempDir()); !errors.Is(err, ErrNotRepository) {
		t.Errorf("plain directory: got %v, want ErrNotRepository", err)
	}
	empty := t.TempDir()
	plainGit(t, empty, "init", "-q")
	if _, err := Open(ctx, empty); !errors.Is(err, ErrNoCommits) {
		t.Errorf("repository without commits: got %v, want ErrNoCommits", err)
	}
	if _, err := Open(ctx, filepath.Join(empty, "missing")); err == nil {
		t.Error("missing directory: no error")
	}
	r := openRepo(t, newRepo(t))
	for _, ref := range []string{"nope", "--output=/tmp/x", "main\nHEAD"} {
		if _, err := r.ResolveBase(ctx, ref); !errors.Is(err, ErrUnknownRef) {
			t.Errorf("base %q: got %v, want ErrUnknownRef", ref, err)
		}
	}
	b, err := r.ResolveBase(ctx, "")
	if err != nil || b.Branch != "main" || len(b.Commit) != 40 {
		t.Errorf("HEAD: got %+v, %v", b, err)
	}
	if err := r.CheckBranchName(ctx, "agent/bad..name"); err == nil {
		t.Error("invalid branch name accepted")
	}
}

func TestSubdirectoryOpensRepository(t *testing.T) {
	dir := newRepo(t)
	write(t, filepath.Join(dir, "sub", "x"), "x")
	r := openRepo(t, filepath.Join(dir, "sub"))
	if r.Root != dir {
		t.Errorf("root = %s, want %s", r.Root, dir)
	}
}

func TestAddCommitReviewMerge(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	base, _ := r.ResolveBase(ctx, "")
	w := addTask(t, r, "t1")

	if _, err := os.Lstat(filepath.Join(w.Path, ".git")); !os.IsNotExist(err) {
		t.Fatalf("worktree still has a .git pointer: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(w.Path, "a.txt")); string(b) != "one\ntwo\nthree\n" {
		t.Fatalf("worktree not checked out: %q", b)
	}
	// The locked worktree survives the user's prune even though its .git
	// pointer is gone.
	plainGit(t, dir, "worktree", "prune")
	if _, err := r.Attach(*w); err != nil {
		t.Fatalf("after git worktree prune: %v", err)
	}

	if c, err := r.CommitAll(ctx, w, "nothing"); err != nil || c != "" {
		t.Fatalf("empty commit: %q %v", c, err)
	}
	write(t, filepath.Join(w.Path, "a.txt"), "one\n2\nthree\n")
	write(t, filepath.Join(w.Path, "new.txt"), "new\n")
	if ch, _ := r.Changes(ctx, w); len(ch) != 2 {
		t.Errorf("changes = %v", ch)
	}
	commit, err := r.CommitAll(ctx, w, "Change a\n\nAgent-Task: t1\nAgent-Model: m\n")
	if err != nil || commit == "" {
		t.Fatalf("commit: %q %v", commit, err)
	}
	if got := plainGit(t, dir, "log", "-1", "--format=%an|%(trailers:key=Agent-Task,valueonly)", w.Branch); got != "agent|t1" {
		t.Errorf("commit author/trailer = %q", got)
	}
	log, err := r.Log(ctx, base.Commit, w.Branch)
	if err != nil || len(log) != 1 || log[0].Subject != "Change a" {
		t.Fatalf("log = %+v %v", log, err)
	}
	st, err := r.DiffStat(ctx, base.Commit, w.Branch)
	if err != nil || len(st.Files) != 2 || st.Added != 2 || st.Deleted != 1 {
		t.Fatalf("stat = %+v %v", st, err)
	}
	for _, f := range st.Files {
		if want := map[string]string{"a.txt": "M", "new.txt": "A"}[f.Path]; f.Status != want || f.Mode != "100644" {
			t.Errorf("stat of %s = %+v, want status %s, mode 100644", f.Path, f, want)
		}
	}
	var diff bytes.Buffer
	if err := r.Diff(ctx, base.Commit, w.Branch, &diff); err != nil || !strings.Contains(diff.String(), "+2") {
		t.Fatalf("diff = %q %v", diff.String(), err)
	}
	// The user's checkout and branch are untouched so far.
	if got := plainGit(t, dir, "rev-parse", "HEAD"); got != base.Commit {
		t.Fatal("user's HEAD moved before the merge")
	}

	// An unrelated uncommitted change in the user's checkout survives.
	write(t, filepath.Join(dir, "README.md"), "user's work\n")
	res, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "Merge task t1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkout != dir {
		t.Errorf("checkout = %q", res.Checkout)
	}
	if got := plainGit(t, dir, "rev-list", "--parents", "-n1", "main"); len(strings.Fields(got)) != 3 {
		t.Errorf("not a --no-ff merge commit: %s", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); string(b) != "new\n" {
		t.Errorf("merged file missing in checkout: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(b) != "user's work\n" {
		t.Errorf("user's uncommitted change lost: %q", b)
	}
	if got := plainGit(t, dir, "status", "--porcelain"); got != "M README.md" {
		t.Errorf("user's status after merge = %q", got)
	}
	if res, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "again"}); err != nil || !res.UpToDate {
		t.Errorf("second merge: %+v %v", res, err)
	}

	if err := r.Remove(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Callers skip a worktree that is already gone, but never one whose
	// admin directory is not this repository's.
	if _, err := r.Attach(*w); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("attach after remove: %v, want fs.ErrNotExist", err)
	}
	if _, err := r.Attach(Worktree{Path: w.Path, GitDir: t.TempDir()}); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("attach of a foreign admin directory: %v", err)
	}
	if err := r.DeleteBranch(ctx, w.Branch, commit); err != nil {
		t.Fatal(err)
	}
	if out := plainGit(t, dir, "worktree", "list"); strings.Contains(out, w.Path) {
		t.Errorf("worktree still listed: %s", out)
	}
}

func TestMergeRefusesDirtyFiles(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := committedTask(t, r, "t2", "a.txt", "agent\n", "fresh.txt", "agent\n")
	before := plainGit(t, dir, "rev-parse", "main")
	write(t, filepath.Join(dir, "a.txt"), "user\n")
	_, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"})
	var de *DirtyError
	if !errors.As(err, &de) || len(de.Files) != 1 || de.Files[0] != "a.txt" {
		t.Fatalf("got %v, want DirtyError on a.txt", err)
	}
	// Untracked file in the way.
	plainGit(t, dir, "checkout", "-q", "--", "a.txt")
	write(t, filepath.Join(dir, "fresh.txt"), "user\n")
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); !errors.As(err, &de) {
		t.Fatalf("untracked in the way: got %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "fresh.txt")); string(b) != "user\n" {
		t.Error("user's untracked file clobbered")
	}
	if after := plainGit(t, dir, "rev-parse", "main"); after != before {
		t.Error("main moved although the merge was refused")
	}
	if tip, _ := r.BranchTip(ctx, w.Branch); tip == "" {
		t.Error("task branch lost")
	}
}

func TestMergeConflictAndBaseMoved(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := committedTask(t, r, "t3", "a.txt", "agent\n", "b.txt", "b\n")
	// The base moves with a conflicting change.
	write(t, filepath.Join(dir, "a.txt"), "user\n")
	plainGit(t, dir, "commit", "-q", "-am", "user change")
	before := plainGit(t, dir, "rev-parse", "main")
	taskTip, _ := r.BranchTip(ctx, w.Branch)
	_, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"})
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Files) != 1 || ce.Files[0] != "a.txt" {
		t.Fatalf("got %v, want a conflict on a.txt", err)
	}
	if plainGit(t, dir, "rev-parse", "main") != before || plainGit(t, dir, "status", "--porcelain") != "" {
		t.Error("conflicting merge changed the user's branch or checkout")
	}
	if tip, _ := r.BranchTip(ctx, w.Branch); tip != taskTip {
		t.Error("task branch changed")
	}
	// A non-conflicting move of the base merges fine (squash this time).
	plainGit(t, dir, "reset", "-q", "--hard", "HEAD~1")
	write(t, filepath.Join(dir, "README.md"), "moved\n")
	plainGit(t, dir, "commit", "-q", "-am", "user change 2")
	res, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Squash: true, Message: "Squashed task"})
	if err != nil {
		t.Fatal(err)
	}
	if got := plainGit(t, dir, "rev-list", "--parents", "-n1", "main"); len(strings.Fields(got)) != 2 {
		t.Errorf("squash made a merge commit: %s", got)
	}
	if got := plainGit(t, dir, "show", "-s", "--format=%s", res.Commit); got != "Squashed task" {
		t.Errorf("message = %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "b.txt")); string(b) != "b\n" {
		t.Error("squashed change not in checkout")
	}
}

func TestMergeIntoBranchNotCheckedOut(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	plainGit(t, dir, "branch", "release")
	r := openRepo(t, dir)
	w := committedTask(t, r, "t4", "c.txt", "c\n")
	res, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "release", Message: "m"})
	if err != nil || res.Checkout != "" {
		t.Fatalf("%+v %v", res, err)
	}
	if plainGit(t, dir, "rev-parse", "release") != res.Commit {
		t.Error("release did not move")
	}
	if _, err := os.Stat(filepath.Join(dir, "c.txt")); !os.IsNotExist(err) {
		t.Error("the user's checkout (on main) was changed")
	}
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "", Message: "m"}); !errors.Is(err, ErrNotBranch) {
		t.Errorf("detached base: %v", err)
	}
}

func TestSnapshotLeavesUserCheckoutAlone(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	write(t, filepath.Join(dir, "a.txt"), "dirty\n")
	write(t, filepath.Join(dir, "untracked.txt"), "u\n")
	plainGit(t, dir, "add", "a.txt")
	write(t, filepath.Join(dir, "a.txt"), "dirtier\n")
	statusBefore := plainGit(t, dir, "status", "--porcelain")
	r := openRepo(t, dir)
	if d, _ := r.Dirty(ctx); len(d) != 2 {
		t.Errorf("dirty = %v", d)
	}
	base, _ := r.ResolveBase(ctx, "")
	snap, err := r.Snapshot(ctx, base, "snapshot")
	if err != nil {
		t.Fatal(err)
	}
	if got := plainGit(t, dir, "show", snap+":a.txt"); got != "dirtier" {
		t.Errorf("snapshot a.txt = %q", got)
	}
	if got := plainGit(t, dir, "show", snap+":untracked.txt"); got != "u" {
		t.Errorf("snapshot untracked = %q", got)
	}
	if got := plainGit(t, dir, "status", "--porcelain"); got != statusBefore {
		t.Errorf("status changed: %q -> %q", statusBefore, got)
	}
	if got := plainGit(t, dir, "rev-parse", "HEAD"); got != base.Commit {
		t.Error("HEAD moved")
	}
}

func TestLockSerialises(t *testing.T) {
	ctx := context.Background()
	r := openRepo(t, newRepo(t))
	locks := t.TempDir()
	unlock, err := r.Lock(ctx, locks)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := r.Lock(short, locks); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v", err)
	}
	var wg sync.WaitGroup
	got := make(chan time.Time, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(got) // a failed Lock must not leave the test blocked on got
		u, err := r.Lock(ctx, locks)
		if err != nil {
			t.Error(err)
			return
		}
		got <- time.Now()
		u()
	}()
	// Give the waiter a moment to start waiting; if it has not yet, the
	// test still holds (it only proves less).
	time.Sleep(30 * time.Millisecond)
	released := time.Now()
	unlock()
	wg.Wait()
	if at, ok := <-got; ok && at.Before(released) {
		t.Error("lock acquired while held")
	}
}

func TestTwoWorktreesAtOnce(t *testing.T) {
	ctx := context.Background()
	r := openRepo(t, newRepo(t))
	base, _ := r.ResolveBase(ctx, "")
	locks := t.TempDir()
	parent := t.TempDir()
	var wg sync.WaitGroup
	for _, id := range []string{"p1", "p2", "p3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := r.Lock(ctx, locks)
			if err != nil {
				t.Error(err)
				return
			}
			defer unlock()
			if _, err := r.Add(ctx, AddOptions{Path: filepath.Join(parent, id), Branch: "agent/x-" + id, Start: base.Commit}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

func TestEnvironmentCannotRedirectGit(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := addTask(t, r, "env")
	other := newRepo(t)
	t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
	t.Setenv("GIT_WORK_TREE", other)
	t.Setenv("GIT_INDEX_FILE", filepath.Join(other, "idx"))
	write(t, filepath.Join(w.Path, "z.txt"), "z\n")
	c, err := r.CommitAll(ctx, w, "z")
	if err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("GIT_DIR")
	os.Unsetenv("GIT_WORK_TREE")
	os.Unsetenv("GIT_INDEX_FILE")
	if got := plainGit(t, dir, "rev-parse", w.Branch); got != c {
		t.Error("commit did not land on the task branch")
	}
	if got := plainGit(t, other, "log", "--oneline"); strings.Count(got, "\n") != 0 {
		t.Errorf("other repository was written: %s", got)
	}

	// Control: the same environment sends a plain git commit, run in the
	// worktree, to the other repository.
	cmd := exec.Command("git", "commit", "-q", "--allow-empty", "-m", "control")
	cmd.Dir = w.Path
	cmd.Env = append(os.Environ(), "GIT_DIR="+filepath.Join(other, ".git"), "GIT_WORK_TREE="+other)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("control: %v\n%s", err, out)
	}
	if got := plainGit(t, other, "log", "-1", "--format=%s"); got != "control" {
		t.Fatalf("control failed: GIT_DIR did not redirect plain git (last commit of the other repository: %q), so this test proves nothing", got)
	}
}

// TestForeignOwnedWorktree: files the sandbox wrote as another uid do not
// stop host git (explicit --git-dir skips git's ownership check, which only
// applies to discovery).
func TestForeignOwnedWorktree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	ctx := context.Background()
	r := openRepo(t, newRepo(t))
	w := addTask(t, r, "own")
	write(t, filepath.Join(w.Path, "sandbox.txt"), "s\n")
	for _, p := range []string{w.Path, filepath.Join(w.Path, "sandbox.txt"), filepath.Join(w.Path, "a.txt")} {
		if err := os.Chown(p, 12345, 12345); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := r.CommitAll(ctx, w, "foreign"); err != nil || c == "" {
		t.Fatalf("commit of foreign-owned files: %q %v", c, err)
	}
}

func TestNoCheckoutThenPopulate(t *testing.T) {
	ctx := context.Background()
	r := openRepo(t, newRepo(t))
	base, _ := r.ResolveBase(ctx, "")
	w, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "nc"), Branch: "agent/nc", Start: base.Commit, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(w.Path); len(ents) != 0 {
		t.Fatalf("no-checkout worktree has files: %v", ents)
	}
	if err := r.Populate(ctx, w); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(w.Path, "a.txt")); string(b) != "one\ntwo\nthree\n" {
		t.Fatalf("a.txt = %q", b)
	}
	if ch, err := r.Changes(ctx, w); err != nil || len(ch) != 0 {
		t.Fatalf("populated worktree not clean: %v %v", ch, err)
	}
}

func TestMergeRefusesOperationInProgress(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := committedTask(t, r, "inprog", "n.txt", "n\n")
	// A merge of the user's own, stopped on a conflict.
	plainGit(t, dir, "checkout", "-q", "-b", "side")
	write(t, filepath.Join(dir, "a.txt"), "side\n")
	plainGit(t, dir, "commit", "-q", "-am", "side")
	plainGit(t, dir, "checkout", "-q", "main")
	write(t, filepath.Join(dir, "a.txt"), "main\n")
	plainGit(t, dir, "commit", "-q", "-am", "main")
	cmd := exec.Command("git", "merge", "side")
	cmd.Dir = dir
	_ = cmd.Run()
	before := plainGit(t, dir, "rev-parse", "main")
	_, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"})
	if err == nil || !strings.Contains(err.Error(), "in the middle of a merge") {
		t.Fatalf("got %v", err)
	}
	if plainGit(t, dir, "rev-parse", "main") != before {
		t.Error("main moved under the user's merge")
	}
}

func TestSnapshotFilesAndApplyDiff(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	parent := addTask(t, r, "parent")
	write(t, filepath.Join(parent.Path, "a.txt"), "parent edit\n")
	write(t, filepath.Join(parent.Path, "p.txt"), "new in parent\n")
	snap, err := r.SnapshotFiles(ctx, parent, "snapshot")
	if err != nil {
		t.Fatal(err)
	}
	if ch, _ := r.Changes(ctx, parent); len(ch) != 2 {
		t.Fatalf("snapshot touched the parent's index: %v", ch)
	}
	child, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "child"), Branch: "agent/child", Start: snap})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(child.Path, "p.txt")); string(b) != "new in parent\n" {
		t.Fatalf("child does not start from the parent's files: %q", b)
	}
	write(t, filepath.Join(child.Path, "c/new.txt"), "from child\n")
	write(t, filepath.Join(child.Path, "README.md"), "child readme\n")
	tip, err := r.CommitAll(ctx, child, "child work")
	if err != nil {
		t.Fatal(err)
	}
	paths, err := r.ApplyDiff(ctx, parent, snap, tip)
	if err != nil || len(paths) != 2 {
		t.Fatalf("apply: %v %v", paths, err)
	}
	if b, _ := os.ReadFile(filepath.Join(parent.Path, "c/new.txt")); string(b) != "from child\n" {
		t.Errorf("child's file not in the parent: %q", b)
	}
	// A second child that edited the same file cannot be applied, and
	// nothing of it is written.
	child2, _ := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "child2"), Branch: "agent/child2", Start: snap})
	write(t, filepath.Join(child2.Path, "README.md"), "other readme\n")
	write(t, filepath.Join(child2.Path, "x.txt"), "x\n")
	tip2, _ := r.CommitAll(ctx, child2, "child2 work")
	if _, err := r.ApplyDiff(ctx, parent, snap, tip2); err == nil {
		t.Fatal("conflicting change applied")
	}
	if _, err := os.Stat(filepath.Join(parent.Path, "x.txt")); err == nil {
		t.Error("a failed apply wrote part of its change")
	}
}

func TestDiffStatSymlinkAndDelete(t *testing.T) {
	ctx := context.Background()
	r := openRepo(t, newRepo(t))
	base, _ := r.ResolveBase(ctx, "")
	w := addTask(t, r, "link")
	if err := os.Symlink("/etc/passwd", filepath.Join(w.Path, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.Path, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAll(ctx, w, "link"); err != nil {
		t.Fatal(err)
	}
	st, err := r.DiffStat(ctx, base.Commit, w.Branch)
	if err != nil || len(st.Files) != 2 {
		t.Fatalf("stat = %+v %v", st, err)
	}
	want := map[string]FileStat{
		"a.txt": {Path: "a.txt", Status: "D", Deleted: 3},
		"link":  {Path: "link", Status: "A", Added: 1, Mode: "120000", LinkTarget: "/etc/passwd"},
	}
	for _, f := range st.Files {
		if f != want[f.Path] {
			t.Errorf("stat of %s = %+v, want %+v", f.Path, f, want[f.Path])
		}
	}
}
