package sandbox

import (
	"context"
	"fmt"
)

// hold is a condition every call that runs something in a sandbox waits
// for (see Hold).
type hold struct {
	ready <-chan struct{}
	err   func() error
}

// Hold makes every call that runs something in the sandbox (Exec,
// StartStdio, Tool but its ping) wait until ready is closed, and fail with
// err() when that is not nil. The orchestrator creates a task's sandbox
// while the worktree's files are still being written: no process in the
// sandbox may see them before they are all there.
func (s *Sandbox) Hold(ready <-chan struct{}, err func() error) {
	s.held.Store(&hold{ready: ready, err: err})
}

// waitHold waits for the condition set by Hold, if any.
func (s *Sandbox) waitHold(ctx context.Context) error {
	h := s.held.Load()
	if h == nil {
		return nil
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := h.err(); err != nil {
		return fmt.Errorf("sandbox %s: its workspace could not be prepared: %w", shortID(s.ID), err)
	}
	return nil
}
