package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// A freeze must cover every sandbox over a worktree, including one being
// created while the freeze lists them: whileFrozen lists the running
// sandboxes over the worktree and freezes those, so a sandbox (a task's,
// a sub-agent's, an `agent shell` one) created between the list and the
// host step would run through it. Each worktree therefore has a lock, an
// flock on a file under the state directory's lock directory named after
// the worktree's path, so it holds across processes (an `agent shell` and
// `agent diff` are processes of their own): creating a sandbox over the
// worktree holds it shared until the sandbox is running (and so listed),
// a freeze holds it exclusive from the list until the thaw. Overlapping
// freezes of one worktree in one process (the disk guard's measurement and
// a sub-agent's apply, or a step nested in another) share one exclusive
// hold, as freezeCounts shares the freeze itself; freezes from two
// processes take turns, so one's thaw never lands inside the other's step.

// worktreeLockPath is the lock file of the worktree dir.
func (o *Orchestrator) worktreeLockPath(dir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return filepath.Join(o.lockDir(), "worktree-"+hex.EncodeToString(sum[:8])+".lock")
}

// createSandbox creates a sandbox over spec.Workspace holding the
// worktree's lock shared: it waits while a host step on the worktree has
// its sandboxes frozen, and a freeze that starts meanwhile waits for the
// new sandbox to be running, so that it is listed and frozen too. A host
// step on the same worktree must never call it (it would wait for itself).
func (o *Orchestrator) createSandbox(ctx context.Context, e sandbox.Backend, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	if o.opts.Unsafe.NoFreezeLock || spec.Workspace == "" {
		return e.Create(ctx, spec)
	}
	unlock, err := worktree.LockFileShared(ctx, o.worktreeLockPath(spec.Workspace))
	if err != nil {
		return nil, fmt.Errorf("waiting for host steps on %s to finish: %w", spec.Workspace, err)
	}
	defer unlock()
	return e.Create(ctx, spec)
}

// holdFrozen takes the worktree's lock exclusive for a freeze (see
// createSandbox), or joins this process's hold of it.
func (o *Orchestrator) holdFrozen(ctx context.Context, dir string) (release func(), err error) {
	if o.opts.Unsafe.NoFreezeLock {
		return func() {}, nil
	}
	return frozenHolds.hold(ctx, o.worktreeLockPath(dir))
}

// frozenHolds are this process's exclusive holds of worktree locks, by
// lock file: the first freeze of a worktree takes the flock, later ones
// overlapping it join, and the last to end lets it go.
var frozenHolds = exclusiveHolds{m: map[string]*exclusiveHold{}}

type exclusiveHolds struct {
	mu sync.Mutex
	m  map[string]*exclusiveHold
}

type exclusiveHold struct {
	refs   int        // callers using this entry (under exclusiveHolds.mu)
	mu     sync.Mutex // taken while the flock is acquired or released
	n      int        // freezes holding it (under mu)
	unlock func()
}

func (h *exclusiveHolds) hold(ctx context.Context, path string) (func(), error) {
	h.mu.Lock()
	x := h.m[path]
	if x == nil {
		x = &exclusiveHold{}
		h.m[path] = x
	}
	x.refs++
	h.mu.Unlock()
	drop := func() {
		h.mu.Lock()
		if x.refs--; x.refs == 0 {
			delete(h.m, path)
		}
		h.mu.Unlock()
	}
	x.mu.Lock()
	if x.n == 0 {
		unlock, err := worktree.LockFile(ctx, path)
		if err != nil {
			x.mu.Unlock()
			drop()
			return nil, fmt.Errorf("waiting for sandboxes being created over the worktree: %w", err)
		}
		x.unlock = unlock
	}
	x.n++
	x.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			x.mu.Lock()
			if x.n--; x.n == 0 {
				x.unlock()
				x.unlock = nil
			}
			x.mu.Unlock()
			drop()
		})
	}, nil
}
