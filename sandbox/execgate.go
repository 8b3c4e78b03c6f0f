package sandbox

import (
	"context"
	"sync"
	"time"
)

// execGate keeps the engine's pause away from an exec that is starting.
//
// Docker 20.10 wedges a container for good when it is paused while one of
// its execs is being started: the exec's process joins the frozen cgroup
// before it runs, the daemon waits for it while holding the container's
// lock, and every later call on the container (unpause, inspect, remove,
// even removing an image it uses) blocks until someone writes THAWED into
// the cgroup by hand. A pause racing `docker exec` reproduces it within a
// few tries on this project's CI machines. So, within one process, an exec
// holds its sandbox's gate shared from its create until the engine reports
// its process started, and Freeze holds it exclusively around the pause; an
// exec created after the pause is refused by the engine ("paused") instead.
// Execs of other processes (an `agent shell` beside a task) are not seen
// here; their window is the few milliseconds of an exec start.
type execGate struct {
	mu    sync.Mutex
	gates map[string]*sync.RWMutex
	off   bool // every caller gets a gate of its own: no gate at all
}

func (g *execGate) of(id string) *sync.RWMutex {
	if g.off {
		return &sync.RWMutex{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*sync.RWMutex{}
	}
	rw, ok := g.gates[id]
	if !ok {
		rw = &sync.RWMutex{}
		g.gates[id] = rw
	}
	return rw
}

// forget drops the gate of a sandbox that is gone.
func (g *execGate) forget(id string) {
	g.mu.Lock()
	delete(g.gates, id)
	g.mu.Unlock()
}

// execStartWait bounds how long an exec keeps a freeze waiting for the
// engine to report its process started.
const execStartWait = 5 * time.Second

// startingExec marks an exec of sandbox id as starting; the returned func
// ends that once its process runs (see waitExecStarted) and may be called
// more than once.
func (e *Engine) startingExec(id string) (done func()) {
	rw := e.execs.of(id)
	rw.RLock()
	var once sync.Once
	return func() { once.Do(rw.RUnlock) }
}

// waitExecStarted returns once the engine reports exec execID's process
// started (it has a pid), it failed, or execStartWait passed.
func (e *Engine) waitExecStarted(ctx context.Context, execID string) {
	deadline := time.Now().Add(execStartWait)
	for delay := 500 * time.Microsecond; ; delay *= 2 {
		ins, err := e.api.ContainerExecInspect(ctx, execID)
		if err != nil || ins.Pid != 0 || time.Now().After(deadline) {
			return
		}
		if delay > 20*time.Millisecond {
			delay = 20 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}
