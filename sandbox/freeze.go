package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
)

// freezer is the part of the engine that stops and resumes every process
// of a container at once (the cgroup freezer behind `docker pause`). It is
// kept apart from engine so that an engine that cannot freeze is found out
// when a freeze is asked for, not when the engine is opened.
type freezer interface {
	ContainerPause(ctx context.Context, id string) error
	ContainerUnpause(ctx context.Context, id string) error
}

var _ freezer = (*client.Client)(nil)

// ErrCannotFreeze is returned by Freeze when the engine has no freezer.
var ErrCannotFreeze = errors.New("the container engine cannot freeze a sandbox")

// Freeze stops every process of the sandbox where it stands (the engine's
// pause: the cgroup freezer; on an engine without one, SIGSTOP sent from
// inside by the toolbox, see signalfreeze.go) and returns once every
// process is reported stopped, so that no process of the sandbox — the
// toolbox, a command it ran, anything that outlived one — can run until
// Thaw (the signal freeze leaves the idle init running, which runs
// nothing it is asked to and never touches the workspace). The host may
// then read and write the sandbox's workspace: nothing in the sandbox can
// change it meanwhile (swap a directory for a symlink, for one).
//
// Freezing a sandbox that is no longer running or gone is not an error (no
// process of it can run). Each Freeze is matched by one Thaw of the same
// holder, and holders do not share a freeze: a sandbox someone else froze
// (another agent process reading the same worktree) is waited for, up to
// FreezeWait, and then frozen anew, so that the other holder's Thaw can
// never release it under this one. Within one process, callers that may
// overlap count their freezes themselves. The caller must Thaw the sandbox
// when the run continues; a frozen sandbox can be removed as it is.
func (s *Sandbox) Freeze(ctx context.Context) error { return s.drv.Freeze(ctx, s.ID) }

// Thaw resumes a sandbox stopped by Freeze. Thawing one that is not frozen
// is not an error.
func (s *Sandbox) Thaw(ctx context.Context) error { return s.drv.Thaw(ctx, s.ID) }

// Freeze freezes the container id (see Sandbox.Freeze).
func (e *Engine) Freeze(ctx context.Context, id string) error {
	if e.useSignalFreeze() {
		return e.signalFreeze(ctx, id)
	}
	f, ok := e.api.(freezer)
	if !ok {
		return ErrCannotFreeze
	}
	deadline := time.Now().Add(FreezeWait)
	failures := 0
	for {
		paused, err := e.pauseGated(ctx, f, id)
		if paused {
			return err // waiting for the engine's record of the pause
		}
		if cerrdefs.IsNotFound(err) {
			return nil // gone: no process of it can run
		}
		if noFreezer(err) {
			// Found out only now (an engine whose info did not tell):
			// stop the processes from inside instead, from now on.
			e.signalFallback.Store(true)
			return e.signalFreeze(ctx, id)
		}
		if !cerrdefs.IsConflict(err) {
			// runc gives up ("unable to freeze") when the cgroup stays
			// FREEZING, which a busy machine or a process in the middle of
			// I/O can cause; it thaws the cgroup again, so trying anew is
			// safe.
			if failures++; failures >= freezeAttempts || ctx.Err() != nil {
				return e.wrap("freezing sandbox "+shortID(id), err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(failures) * 100 * time.Millisecond):
			}
			continue
		}
		// Paused already, or not running.
		ins, ierr := e.api.ContainerInspect(ctx, id)
		switch {
		case cerrdefs.IsNotFound(ierr):
			return nil
		case ierr != nil:
			return e.wrap("freezing sandbox "+shortID(id), ierr)
		case ins.State == nil || (!ins.State.Running && !ins.State.Restarting):
			return nil
		case !ins.State.Paused:
			// Thawed meanwhile (or restarting): pause it ourselves after
			// the short wait below, but not forever: a pause that keeps
			// conflicting on a container that is not paused would spin.
			if time.Now().After(deadline) {
				return e.wrap("freezing sandbox "+shortID(id), err)
			}
		case time.Now().After(deadline):
			return fmt.Errorf("freezing sandbox %s: it has been frozen by someone else for over %s (a `docker pause`?): unpause it", shortID(id), FreezeWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pauseGated pauses container id and waits for the engine to record it,
// with no exec of this engine starting meanwhile (execgate.go): an exec
// the engine accepts before its record says paused would start into the
// frozen cgroup and wedge the container. Waiting for someone else's
// freeze happens outside the gate, so that tools go on being refused
// rather than blocked.
func (e *Engine) pauseGated(ctx context.Context, f freezer, id string) (paused bool, err error) {
	gate := e.execs.of(id)
	gate.Lock()
	defer gate.Unlock()
	if err := f.ContainerPause(ctx, id); err != nil {
		return false, err
	}
	// The engine answers once runc saw the freezer reach FROZEN, but Docker
	// 20.10 records the container as paused only when containerd's event
	// arrives, a moment later. Wait for that record: a Thaw that came
	// before it would be refused as "not paused" and leave the sandbox
	// frozen for good, and a host step must not trust a freeze the engine
	// does not report. A container that is gone or not running has no
	// process that could run.
	return true, e.waitFrozen(ctx, id)
}

// stateWait bounds how long Freeze waits for the engine to record the
// freeze it brought about.
const stateWait = 5 * time.Second

// waitFrozen waits until the engine records the container as paused, or
// as gone or stopped.
func (e *Engine) waitFrozen(ctx context.Context, id string) error {
	deadline := time.Now().Add(stateWait)
	for {
		ins, err := e.api.ContainerInspect(ctx, id)
		switch {
		case cerrdefs.IsNotFound(err):
			return nil
		case err != nil:
			return e.wrap("freezing sandbox "+shortID(id), err)
		case ins.State == nil:
			return fmt.Errorf("freezing sandbox %s: the engine reports no state", shortID(id))
		case ins.State.Paused:
			return nil
		case !ins.State.Running && !ins.State.Restarting:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("freezing sandbox %s: the engine did not record it frozen within %s", shortID(id), stateWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Thaw resumes the container id.
func (e *Engine) Thaw(ctx context.Context, id string) error {
	if e.useSignalFreeze() {
		return e.signalThaw(ctx, id)
	}
	f, ok := e.api.(freezer)
	if !ok {
		return ErrCannotFreeze
	}
	if err := f.ContainerUnpause(ctx, id); err != nil {
		// Engines answer "not paused" with different kinds of error:
		// ask the engine for the state instead.
		ins, ierr := e.api.ContainerInspect(ctx, id)
		if cerrdefs.IsNotFound(err) || cerrdefs.IsNotFound(ierr) || (ierr == nil && ins.State != nil && !ins.State.Paused) {
			return nil // gone, or not paused (any more)
		}
		return e.wrap("thawing sandbox "+shortID(id), err)
	}
	// Not waiting for the engine's record here: another holder may freeze
	// the sandbox the moment it is thawed, and a Freeze that finds the
	// record lagging waits for it.
	return nil
}

// noFreezer recognises an engine's answer that it has no freezer for the
// container, e.g. Podman 4's "can not pause containers on rootless
// containers with cgroup V1: this container does not have a cgroup".
func noFreezer(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "does not have a cgroup") ||
		(strings.Contains(msg, "pause") && strings.Contains(msg, "rootless"))
}

// freezeAttempts is how often Freeze asks the engine to pause a sandbox
// whose pause failed before it gives up.
const freezeAttempts = 5

// FreezeWait bounds how long Freeze waits for a sandbox that another
// holder froze.
const FreezeWait = 30 * time.Second

// FreezeCost is what one freeze and thaw of a sandbox took.
type FreezeCost struct {
	Freeze time.Duration
	Thaw   time.Duration
}

// MeasureFreeze freezes and thaws s once and times both steps.
func MeasureFreeze(ctx context.Context, s *Sandbox) (FreezeCost, error) {
	var c FreezeCost
	start := time.Now()
	if err := s.Freeze(ctx); err != nil {
		return c, err
	}
	c.Freeze = time.Since(start)
	start = time.Now()
	err := s.Thaw(ctx)
	c.Thaw = time.Since(start)
	return c, err
}
