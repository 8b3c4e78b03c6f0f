package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/localagent/agent/sandbox"
)

// UnsafeOptions switch off host-side defences. They exist only so that the
// security tests can show, in a control run, that the attack they make
// succeeds without the defence; nothing else sets them.
type UnsafeOptions struct {
	// NoFreeze runs host steps on a worktree while its sandbox runs.
	NoFreeze bool
	// FollowSymlinks hands files to the sandbox user by path (os.Lchown),
	// following symlinks in leading components, as before the no-follow
	// walk.
	FollowSymlinks bool
	// NoFreezeLock lets a sandbox be created over a worktree while a host
	// step has its sandboxes frozen (see createSandbox).
	NoFreezeLock bool
	// NoHold lets a new task's sandbox run tool calls while its worktree's
	// files are still being written.
	NoHold bool
	// AddSpecial stages FIFOs, sockets and devices in a worktree like
	// files, as before they were left out of commits.
	AddSpecial bool
	// KeepNotes writes a task's remembered notes straight into its
	// repository's memory, as before they were proposals.
	KeepNotes bool
}

// Any reports whether any defence is off.
func (u UnsafeOptions) Any() bool {
	return u.NoFreeze || u.FollowSymlinks || u.NoFreezeLock || u.NoHold || u.AddSpecial || u.KeepNotes
}

// whileFrozen runs step, a host step that reads or writes the worktree
// dir (git add, git apply, handing files over), while no process of a
// sandbox that can write dir can run: sbs (the sandboxes the caller holds
// over dir) and every other running sandbox mounting dir (an `agent shell`
// one) are frozen first and thawed after. A process that outlived its
// tool call could otherwise swap a directory for a symlink between two of
// host git's system calls and make it, running as the user (or root),
// read a host file into the branch or write, chown or delete one.
//
// No sandbox over dir is created from the list to the thaw: the
// worktree's lock is held exclusive meanwhile (see createSandbox).
//
// When a sandbox cannot be frozen the step does not run.
func (o *Orchestrator) whileFrozen(ctx context.Context, dir string, sbs []*sandbox.Sandbox, step func() error) error {
	if o.opts.Unsafe.NoFreeze {
		return step()
	}
	e, err := o.engine(ctx)
	if err != nil {
		return err
	}
	release, err := o.holdFrozen(ctx, dir)
	if err != nil {
		return err
	}
	defer release()
	ids := map[string]bool{}
	var order []string
	add := func(id string) {
		if id != "" && !ids[id] {
			ids[id] = true
			order = append(order, id)
		}
	}
	for _, sb := range sbs {
		if sb != nil {
			add(sb.ID)
		}
	}
	others, err := e.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelWorkspace + "=" + dir}, Running: true})
	if err != nil {
		return fmt.Errorf("finding the sandboxes over %s: %w", dir, err)
	}
	for _, sb := range others {
		add(sb.ID)
	}
	var frozen []string
	thaw := func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		var errs []error
		for _, id := range frozen {
			errs = append(errs, freezes.thaw(cctx, e, id))
		}
		return errors.Join(errs...)
	}
	for _, id := range order {
		if err := freezes.freeze(ctx, e, id); err != nil {
			return errors.Join(fmt.Errorf("the worktree %s is left alone while its sandbox can run: %w", dir, err), thaw())
		}
		frozen = append(frozen, id)
	}
	serr := step()
	return errors.Join(serr, thaw())
}

// onWorktree runs step, a host read of the worktree dir outside a task run
// (the review's git status, `agent diff`), with every running sandbox over
// dir frozen: a task still running in another process, or an `agent
// shell`. Without a Docker engine no sandbox can be running, and the step
// runs as it is, so reviews and diffs keep working without a daemon.
func (o *Orchestrator) onWorktree(ctx context.Context, dir string, step func() error) error {
	if _, err := o.engine(ctx); err != nil {
		return step()
	}
	return o.whileFrozen(ctx, dir, nil, step)
}

// freezes counts the host steps that hold each sandbox frozen, so that
// steps overlapping on one sandbox (the disk guard's measurement and a
// sub-agent's apply, both on the parent) never thaw it under another: the
// first freezes it, the last thaws it.
var freezes = freezeCounts{n: map[string]int{}}

type freezeCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *freezeCounts) freeze(ctx context.Context, e sandbox.Backend, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[id] == 0 {
		if err := e.Freeze(ctx, id); err != nil {
			return err
		}
	}
	f.n[id]++
	return nil
}

func (f *freezeCounts) thaw(ctx context.Context, e sandbox.Backend, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[id]--
	if f.n[id] > 0 {
		return nil
	}
	delete(f.n, id)
	return e.Thaw(ctx, id)
}
