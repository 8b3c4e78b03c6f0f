package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// FreezeEnv overrides how an Engine freezes sandboxes: "signal" stops
// their processes from inside (the toolbox's freeze mode), "cgroup" uses
// the engine's pause; unset, the engine's capabilities decide
// (Engine.SignalFreeze). The tests use it to run the signal freeze under
// Docker too.
const FreezeEnv = "AGENT_SANDBOX_FREEZE"

// signalFreezeTimeout bounds how long the toolbox waits for every process
// to stop before it gives up and continues them all.
const signalFreezeTimeout = 10 * time.Second

// A signal freeze leaves no state in the engine that other agent
// processes could see (as a paused container is), so holders are counted
// on the host: within this process by a one-slot semaphore per sandbox,
// across processes by an exclusive flock(2) on a file named after the
// container, held from Freeze to Thaw. A holder that dies releases its
// lock with it (the sandbox stays stopped until someone freezes and thaws
// it, or thaws it, as a paused one would).
type freezeHold struct {
	sem  chan struct{}
	lock *os.File // set while this process holds the freeze
}

var holds = struct {
	sync.Mutex
	m map[string]*freezeHold
}{m: map[string]*freezeHold{}}

func holdFor(id string) *freezeHold {
	holds.Lock()
	defer holds.Unlock()
	h := holds.m[id]
	if h == nil {
		h = &freezeHold{sem: make(chan struct{}, 1)}
		holds.m[id] = h
	}
	return h
}

// freezeLockDir is where the lock files live; a variable for tests.
var freezeLockDir = func() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("agent-%d", os.Getuid()))
	}
	return filepath.Join(dir, "agent", "freeze")
}

func freezeLockPath(id string) (string, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") {
		return "", fmt.Errorf("bad sandbox id %q", id)
	}
	return filepath.Join(freezeLockDir(), id+".lock"), nil
}

func openFreezeLock(id string) (*os.File, error) {
	p, err := freezeLockPath(id)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
}

// acquireFreeze takes this process's slot and the cross-process lock for
// sandbox id, waiting up to FreezeWait for another holder's Thaw.
func acquireFreeze(ctx context.Context, id string) (*freezeHold, error) {
	h := holdFor(id)
	deadline := time.Now().Add(FreezeWait)
	timer := time.NewTimer(FreezeWait)
	defer timer.Stop()
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, heldTooLong(id)
	}
	f, err := openFreezeLock(id)
	if err != nil {
		<-h.sem
		return nil, fmt.Errorf("freezing sandbox %s: lock: %w", shortID(id), err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			h.lock = f
			return h, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) || ctx.Err() != nil {
			f.Close()
			<-h.sem
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.Is(err, syscall.EWOULDBLOCK):
				return nil, heldTooLong(id)
			}
			return nil, fmt.Errorf("freezing sandbox %s: lock: %w", shortID(id), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func heldTooLong(id string) error {
	return fmt.Errorf("freezing sandbox %s: another holder has kept it frozen for over %s", shortID(id), FreezeWait)
}

// release gives up this process's hold.
func (h *freezeHold) release() {
	if h.lock != nil {
		h.lock.Close() // drops the flock
		h.lock = nil
	}
	<-h.sem
}

// heldHere returns this process's hold of id, or nil.
func heldHere(id string) *freezeHold {
	holds.Lock()
	h := holds.m[id]
	holds.Unlock()
	if h == nil || len(h.sem) == 0 {
		return nil
	}
	return h
}

// signalFrozen reports whether some process (this one or another) holds
// a signal freeze of id, or is taking one.
func signalFrozen(id string) bool {
	if heldHere(id) != nil {
		return true
	}
	p, err := freezeLockPath(id)
	if err != nil {
		return false
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// refuseIfFrozen is the signal freeze's stand-in for the engine refusing
// an exec into a paused container: a process started now would run
// inside a sandbox whose every other process is stopped.
func (e *Engine) refuseIfFrozen(id string) error {
	if e.useSignalFreeze() && signalFrozen(id) {
		return notRunning(id, "frozen", 0, false)
	}
	return nil
}

func (e *Engine) useSignalFreeze() bool { return e.SignalFreeze || e.signalFallback.Load() }

// signalFreeze is Freeze for an engine without a cgroup freezer.
func (e *Engine) signalFreeze(ctx context.Context, id string) error {
	h, err := acquireFreeze(ctx, id)
	if err != nil {
		return err
	}
	if err := e.toolboxSignal(ctx, id, "freeze", "-timeout", signalFreezeTimeout.String()); err != nil {
		if errors.Is(err, errNoProcess) {
			h.release()
			return nil // gone or stopped: nothing of it can run
		}
		// The freeze may have stopped some processes before it failed (or
		// was killed): continue them, so that none stays stopped with no
		// holder and no refusal of new execs.
		_ = e.toolboxSignal(context.WithoutCancel(ctx), id, "thaw")
		h.release()
		return fmt.Errorf("freezing sandbox %s: %w", shortID(id), err)
	}
	return nil
}

// signalThaw is Thaw for an engine without a cgroup freezer. A sandbox
// this process does not hold is continued only when no other process
// holds it either (a holder that died left it stopped): another holder's
// freeze is never released under it.
func (e *Engine) signalThaw(ctx context.Context, id string) error {
	h := heldHere(id)
	if h == nil {
		f, err := openFreezeLock(id)
		if err != nil {
			return fmt.Errorf("thawing sandbox %s: lock: %w", shortID(id), err)
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return nil // someone else's freeze
		}
	} else {
		defer h.release()
	}
	if err := e.toolboxSignal(ctx, id, "thaw"); err != nil && !errors.Is(err, errNoProcess) {
		return fmt.Errorf("thawing sandbox %s: %w", shortID(id), err)
	}
	return nil
}

// forgetFreeze drops this process's hold of a removed sandbox and its lock
// file.
func forgetFreeze(id string) {
	if h := heldHere(id); h != nil {
		h.release()
	}
	holds.Lock()
	delete(holds.m, id)
	holds.Unlock()
	if p, err := freezeLockPath(id); err == nil {
		_ = os.Remove(p)
	}
}

// errNoProcess says the sandbox has no process left to signal.
var errNoProcess = errors.New("sandbox not running")

// toolboxSignal runs the toolbox in mode (freeze or thaw) in sandbox id as
// its user, bypassing the refusal of execs into a frozen sandbox.
func (e *Engine) toolboxSignal(ctx context.Context, id, mode string, args ...string) error {
	if e.signalRun != nil {
		return e.signalRun(ctx, id, mode)
	}
	ins, err := e.api.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		return errNoProcess
	case err != nil:
		return e.wrap("inspecting sandbox "+shortID(id), err)
	case ins.State == nil || !ins.State.Running || ins.Config == nil:
		return errNoProcess
	}
	errOut := &boundedBuffer{max: 4096}
	code, err := e.exec(ctx, id, ExecOptions{
		Cmd:  append([]string{ToolboxPath, mode}, args...),
		User: ins.Config.User, WorkingDir: "/", Stderr: errOut,
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			return errNoProcess
		}
		return err
	}
	if code != 0 {
		return fmt.Errorf("toolbox %s exited %d: %s", mode, code, strings.TrimSpace(string(errOut.Bytes())))
	}
	return nil
}
