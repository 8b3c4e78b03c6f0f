package worktree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
func (r *Repo) Lock(ctx context.Context, lockDir string) (unlock func(), err error) {
	sum := sha256.Sum256([]byte(r.CommonDir))
	return LockFile(ctx, filepath.Join(lockDir, "repo-"+hex.EncodeToString(sum[:8])+".lock"))
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
