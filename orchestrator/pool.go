package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// The warm pool (sandbox.Pool, Options.Pool members per key): started,
// hardened sandboxes of this state directory waiting, with no workspace,
// in <state>/pool. A new task's sandbox, or a sub-agent's, is claimed from
// it when one made for the same settings waits; otherwise it is created
// as before. A claim is journalled in the pool directory before the
// worktree moves, and every lookup of this orchestrator goes through
// sandbox.WithPoolClaims (see engine), so freezes, gc, discard and resume
// find a claimed member as they find a fresh sandbox. A claimed member is
// removed with its task like any sandbox; the pool is refilled in the
// background once the claimer's sandbox is ready.
//
// Not pooled, and so created fresh: a sandbox with egress (the proxy's
// socket directory is the task's), extra cache mounts, GPUs or a
// non-default runtime; a resumed or continued task's sandbox and an
// `agent shell` one (their worktree already holds the agent's files).

// PoolDir is the pool directory of a state directory.
func PoolDir(stateDir string) string { return filepath.Join(stateDir, "pool") }

func (o *Orchestrator) poolDir() string { return PoolDir(o.opts.StateDir) }

// warmPool is this orchestrator's pool (size 0 when Options.Pool is 0:
// it then hands out nothing, and gc removes its members); nil without an
// engine.
func (o *Orchestrator) warmPool(ctx context.Context) *sandbox.Pool {
	if _, err := o.engine(ctx); err != nil || o.rawEng == nil {
		return nil
	}
	o.poolOnce.Do(func() {
		p, err := sandbox.NewPool(o.rawEng, o.poolDir(), o.opts.Pool)
		if err == nil {
			o.pool = p
		}
	})
	return o.pool
}

// claimWarm returns a pool member bound to spec's workspace, or nil when
// none can be had (the caller creates one).
func (o *Orchestrator) claimWarm(ctx context.Context, spec sandbox.Spec) *sandbox.Sandbox {
	if o.opts.Pool <= 0 {
		return nil
	}
	p := o.warmPool(ctx)
	if p == nil {
		return nil
	}
	// Bound to the worktree under its lock, as a create is (see
	// createSandbox): a freeze listing the worktree's sandboxes waits for
	// the claim, and a claim waits for a freeze's host step to end.
	if !o.opts.Unsafe.NoFreezeLock && spec.Workspace != "" {
		unlock, err := worktree.LockFileShared(ctx, o.worktreeLockPath(spec.Workspace))
		if err != nil {
			return nil
		}
		defer unlock()
	}
	sb, err := p.Claim(ctx, spec)
	if err != nil {
		if !errors.Is(err, sandbox.ErrNotPoolable) && !errors.Is(err, sandbox.ErrPoolEmpty) {
			slog.Warn("no warm sandbox", "workspace", spec.Workspace, "err", err)
		}
		return nil
	}
	return sb
}

// refillWarm tops the pool up in the background for the settings claimed
// so far.
func (o *Orchestrator) refillWarm() {
	if o.opts.Pool > 0 && o.pool != nil {
		o.pool.Refill()
	}
}

// WaitPool waits until the pool refills this process started are done (a
// command that exits at once would otherwise leave a half-made member for
// the next refill or gc to remove).
func (o *Orchestrator) WaitPool() {
	if o.pool != nil {
		o.pool.WaitRefills()
	}
}

// PoolMembers lists the pool's members, idle or claimed.
func (o *Orchestrator) PoolMembers(ctx context.Context) ([]*sandbox.Sandbox, error) {
	p := o.warmPool(ctx)
	if p == nil {
		_, err := o.engine(ctx)
		return nil, err
	}
	return p.Members(ctx)
}

// gcPool removes the idle members that should go (the pool is off, or
// they were made from an older image or toolbox, or are not running),
// claim records of containers that are gone and unused slots; and the
// idle members of state directories that no longer exist.
func (o *Orchestrator) gcPool(ctx context.Context) []string {
	p := o.warmPool(ctx)
	if p == nil {
		return nil
	}
	var out []string
	if _, err := os.Lstat(p.Dir()); err != nil {
		// Never used: nothing of it to sweep.
	} else if ids, err := p.Sweep(ctx); err == nil {
		for _, id := range ids {
			out = append(out, short(id))
		}
	}
	if ids, err := sandbox.SweepForeignPools(ctx, o.rawEng); err == nil {
		for _, id := range ids {
			out = append(out, short(id))
		}
	}
	return out
}
