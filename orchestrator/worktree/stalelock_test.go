package worktree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitFor polls cond until it holds; the test's own timeout bounds it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A git killed while it holds index.lock in the user's checkout (here a
// `git commit -a` killed while its editor runs) blocks every later git
// command there. While that git runs its lock is left alone, even though
// no process has the file open; once it is gone, taking the repository's
// lock clears it, and a merge goes through.
func TestKilledUserGitIndexLockCleared(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := committedTask(t, r, "k", "k.txt", "task\n")
	write(t, filepath.Join(dir, "a.txt"), "one\ntwo\nthree\nfour\n")
	mark := filepath.Join(t.TempDir(), "editing")
	cmd := exec.Command("git", "commit", "-a")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
		"GIT_EDITOR=touch "+mark+"; exec sleep 600 #")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	waitFor(t, "the editor of git commit", func() bool { _, err := os.Stat(mark); return err == nil })
	lock := filepath.Join(r.GitDir, "index.lock")
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("git commit -a holds no index.lock while its editor runs: %v", err)
	}
	// Control: the running git's lock is kept.
	if cleared, err := r.ClearStaleLocks(); err == nil || len(cleared) != 0 {
		t.Fatalf("locks of a running git: cleared %v, err %v", cleared, err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("the lock of a running git was removed: %v", err)
	}

	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	killed = true
	// The fault: the stale lock blocks git in the user's checkout.
	if out, err := exec.Command("git", "-C", dir, "add", "a.txt").CombinedOutput(); err == nil || !strings.Contains(string(out), "index.lock") {
		t.Fatalf("git add beside a stale index.lock: %v %s", err, out)
	}
	unlock, err := r.Lock(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	plainGit(t, dir, "checkout", "--", "a.txt")
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Fatalf("stale index.lock still there after Lock: %v", err)
	}
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); err != nil {
		t.Fatalf("merge after the stale lock was cleared: %v", err)
	}
}

// The ref locks a killed git leaves (HEAD.lock, packed-refs.lock, a
// branch's .lock) make a merge fail until they are cleared; Lock clears
// them, but never one a process still has open.
func TestStaleUserRefLocksCleared(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	w := committedTask(t, r, "r", "r.txt", "task\n")
	plainGit(t, dir, "branch", "other")
	stale := []string{
		filepath.Join(r.GitDir, "HEAD.lock"),
		filepath.Join(r.CommonDir, "packed-refs.lock"),
		filepath.Join(r.CommonDir, "refs", "heads", "main.lock"),
	}
	for _, l := range stale {
		write(t, l, "0000000000000000000000000000000000000000\n")
	}
	// A lock some process has open (a git still writing it) is live.
	held := filepath.Join(r.CommonDir, "refs", "heads", "other.lock")
	write(t, held, "")
	holder := exec.Command("sh", "-c", "exec 3<\"$1\"; echo ready; exec sleep 600", "sh", held)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	if _, err := out.Read(make([]byte, 6)); err != nil {
		t.Fatal(err)
	}

	// The fault: the merge cannot move main.
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); err == nil {
		t.Fatal("merge beside stale ref locks succeeded: the locks prove nothing")
	} else {
		t.Logf("merge beside stale ref locks: %v", err)
	}
	unlock, err := r.Lock(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for _, l := range stale {
		if _, err := os.Lstat(l); !os.IsNotExist(err) {
			t.Errorf("stale %s still there: %v", l, err)
		}
	}
	if _, err := os.Lstat(held); err != nil {
		t.Errorf("a lock a process holds open was removed: %v", err)
	}
	if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "m"}); err != nil {
		t.Fatalf("merge after the stale locks were cleared: %v", err)
	}
}
