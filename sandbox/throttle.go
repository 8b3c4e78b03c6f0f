package sandbox

import (
	"context"
	"runtime"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// Many sandboxes at once (a task's sub-agents, several tasks): the engine
// serialises much of container creation, so sending it everything at once
// only makes each request wait inside the daemon, where a slow one can
// hit a timeout or fail with a transient error. Creations are instead
// bounded here, and the transient failures an engine under load gives
// (unavailable, internal, a dropped connection) are retried with backoff.

// createSlots bounds container creations (create + start) in flight
// toward one engine: enough to keep it busy, few enough that none waits
// long inside it.
func createSlots() int { return min(max(4, 2*runtime.NumCPU()), 16) }

// engineGate is the per-Engine bound. Its zero value is ready to use.
type engineGate struct {
	once  sync.Once
	slots chan struct{}
}

func (g *engineGate) acquire(ctx context.Context) (func(), error) {
	g.once.Do(func() { g.slots = make(chan struct{}, createSlots()) })
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// transientEngineError reports whether err is one an engine under load
// gives and a retry can clear. Classified by kind, never by message.
func transientEngineError(err error) bool {
	if err == nil {
		return false
	}
	return cerrdefs.IsUnavailable(err) || cerrdefs.IsInternal(err) ||
		cerrdefs.IsDeadlineExceeded(err) || client.IsErrConnectionFailed(err)
}

// engineRetries is how many times an engine call is tried in all.
const engineRetries = 3

// retryEngine runs call until it succeeds, fails with an error that is
// not transient, ctx ends or it was tried engineRetries times.
func retryEngine(ctx context.Context, call func() error) error {
	backoff := 100 * time.Millisecond
	var err error
	for try := 1; ; try++ {
		if err = call(); err == nil || !transientEngineError(err) || try == engineRetries || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff *= 3
	}
}

// createAndStart creates and starts the container within the engine's
// bound, retrying transient failures. A create retried after a failure
// that may have left a container behind (the engine can fail after
// making it) first removes that container by its name.
func (e *Engine) createAndStart(ctx context.Context, cfg *container.Config, hc *container.HostConfig, name string) (container.CreateResponse, error) {
	release, err := e.gate.acquire(ctx)
	if err != nil {
		return container.CreateResponse{}, err
	}
	defer release()
	var created container.CreateResponse
	first := true
	err = retryEngine(ctx, func() error {
		if !first {
			_ = e.api.ContainerRemove(ctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
		first = false
		var err error
		created, err = e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
		return err
	})
	if err != nil {
		return created, &createError{err: err}
	}
	err = retryEngine(ctx, func() error { return e.api.ContainerStart(ctx, created.ID, container.StartOptions{}) })
	return created, err
}

// createError marks a failure of the create step (as opposed to start).
type createError struct{ err error }

func (c *createError) Error() string { return c.err.Error() }
func (c *createError) Unwrap() error { return c.err }
