package worktree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Lock takes a cross-process lock on the repository (an flock on a file
// under lockDir named after the repository's common directory), waiting
// until it is free or ctx ends. Creating branches and worktrees, committing,
// merging and deleting branches of one repository happen under it, so two
// tasks started at once never race on refs or the worktree list. The lock
// goes away with the process (flock), so a killed agent never leaves it
// held.
//
// Once it holds the lock, it clears the stale git locks a killed git left
// in the repository (ClearStaleLocks), so that every command working on
// the repository (merge, discard, resume, checkout, gc) gets past them.
// Locks it cannot tell to be stale are left, and git's own error names them.
func (r *Repo) Lock(ctx context.Context, lockDir string) (unlock func(), err error) {
	sum := sha256.Sum256([]byte(r.CommonDir))
	unlock, err = LockFile(ctx, filepath.Join(lockDir, "repo-"+hex.EncodeToString(sum[:8])+".lock"))
	if err != nil {
		return nil, err
	}
	_, _ = r.ClearStaleLocks()
	return unlock, nil
}

// LockFile takes an exclusive flock on path (created if needed), waiting
// until it is free or ctx ends.
func LockFile(ctx context.Context, path string) (unlock func(), err error) {
	return lockFile(ctx, path, syscall.LOCK_EX)
}

// LockFileShared takes a shared flock on path (created if needed): any
// number of holders at once, none while LockFile holds it. It waits until
// it can or ctx ends.
func LockFileShared(ctx context.Context, path string) (unlock func(), err error) {
	return lockFile(ctx, path, syscall.LOCK_SH)
}

func lockFile(ctx context.Context, path string, how int) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	delay := 5 * time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(delay):
		}
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
}

// ClearStaleLock removes the index.lock of a task's git directory that a
// git killed halfway left behind (it blocks every later git command
// there), but only when no process has the file open: a git that is still
// running holds its lock file open until it renames it.
func ClearStaleLock(gitDir string) error {
	lock := filepath.Join(gitDir, "index.lock")
	if _, err := os.Lstat(lock); err != nil {
		return nil
	}
	if held, err := openByAnyProcess(lock); err != nil || held {
		if err == nil {
			err = fmt.Errorf("%s is held by a running git; wait for it to finish", lock)
		}
		return err
	}
	if err := os.Remove(lock); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the stale lock %s: %w", lock, err)
	}
	return nil
}

// openByAnyProcess reports whether any process this user can see has path
// open (through /proc/*/fd).
func openByAnyProcess(path string) (bool, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false, fmt.Errorf("cannot tell whether %s is in use: %w", path, err)
	}
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && target == path {
				return true, nil
			}
		}
	}
	return false, nil
}

// ClearStaleLocks removes the lock files that a git killed halfway leaves
// in the user's repository and that make every later git command there
// fail: index.lock and HEAD.lock of each checkout (the main one and the
// linked ones), packed-refs.lock, and the .lock files of loose refs. A
// lock is stale only when no process has it open and no git is running on
// the repository at all: git closes a ref's lock file before it renames it
// into place, and `git commit` keeps index.lock closed while the user's
// editor runs, so an unopened lock alone does not prove its git is gone.
// It returns the locks it removed. Callers hold Lock, so no git of this
// tool is working on the repository meanwhile.
func (r *Repo) ClearStaleLocks() ([]string, error) {
	dirs := []string{r.CommonDir}
	if r.GitDir != r.CommonDir {
		dirs = append(dirs, r.GitDir)
	}
	roots := []string{r.Root, r.CommonDir}
	if admins, err := os.ReadDir(filepath.Join(r.CommonDir, "worktrees")); err == nil {
		for _, a := range admins {
			dir := filepath.Join(r.CommonDir, "worktrees", a.Name())
			if !a.IsDir() || dir == r.GitDir {
				continue
			}
			dirs = append(dirs, dir)
			if b, err := os.ReadFile(filepath.Join(dir, "gitdir")); err == nil {
				roots = append(roots, filepath.Dir(strings.TrimSpace(string(b))))
			}
		}
	}
	var locks []string
	for _, d := range dirs {
		for _, name := range []string{"index.lock", "HEAD.lock"} {
			if st, err := os.Lstat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
				locks = append(locks, filepath.Join(d, name))
			}
		}
	}
	if st, err := os.Lstat(filepath.Join(r.CommonDir, "packed-refs.lock")); err == nil && st.Mode().IsRegular() {
		locks = append(locks, filepath.Join(r.CommonDir, "packed-refs.lock"))
	}
	// WalkDir does not follow symbolic links.
	_ = filepath.WalkDir(filepath.Join(r.CommonDir, "refs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".lock") {
			locks = append(locks, p)
		}
		return nil
	})
	if len(locks) == 0 {
		return nil, nil
	}
	common := r.CommonDir
	if real, err := filepath.EvalSymlinks(common); err == nil {
		common = real
	}
	open, running, err := gitActivity(common, roots)
	if err != nil {
		return nil, err
	}
	if running != "" {
		return nil, fmt.Errorf("git is running on the repository (process %s): its locks are left to it", running)
	}
	var cleared []string
	for _, l := range locks {
		real := l
		if d, err := filepath.EvalSymlinks(filepath.Dir(l)); err == nil {
			real = filepath.Join(d, filepath.Base(l))
		}
		if open[real] {
			continue
		}
		if err := os.Remove(l); err != nil && !os.IsNotExist(err) {
			return cleared, fmt.Errorf("removing the stale lock %s: %w", l, err)
		}
		cleared = append(cleared, l)
	}
	return cleared, nil
}

// gitActivity scans the processes this user can see: the files under
// commonDir any of them has open, and the first git process (its pid)
// working on the repository — its working directory inside one of roots
// (a checkout or the git directory), or its --git-dir, GIT_DIR or
// GIT_COMMON_DIR inside commonDir.
func gitActivity(commonDir string, roots []string) (open map[string]bool, running string, err error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, "", fmt.Errorf("cannot tell whether git is running on the repository: %w", err)
	}
	inside := func(p, root string) bool {
		return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
	}
	open = map[string]bool{}
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		pid := p.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		base := filepath.Join("/proc", pid)
		if fds, err := os.ReadDir(filepath.Join(base, "fd")); err == nil {
			for _, fd := range fds {
				if target, err := os.Readlink(filepath.Join(base, "fd", fd.Name())); err == nil && inside(target, commonDir) {
					open[target] = true
				}
			}
		}
		if running != "" || pid == self {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(base, "comm"))
		if err != nil || !strings.HasPrefix(string(comm), "git") {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join(base, "cwd")); err == nil {
			for _, root := range roots {
				if inside(cwd, root) {
					running = pid
				}
			}
		}
		var words []string
		if b, err := os.ReadFile(filepath.Join(base, "cmdline")); err == nil {
			words = append(words, strings.Split(string(b), "\x00")...)
		}
		if b, err := os.ReadFile(filepath.Join(base, "environ")); err == nil {
			words = append(words, strings.Split(string(b), "\x00")...)
		}
		for _, w := range words {
			for _, key := range []string{"--git-dir=", "GIT_DIR=", "GIT_COMMON_DIR="} {
				if v, ok := strings.CutPrefix(w, key); ok && (inside(filepath.Clean(v), commonDir) || inside(filepath.Clean(v), roots[1])) {
					running = pid
				}
			}
		}
	}
	return open, running, nil
}
