package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/localagent/agent/sandbox/toolbox"
)

// StopProcesses kills every background process the model started with
// process_start (they live in the toolbox's serve session). The
// orchestrator calls it when the agent is done, before any host step on the
// workspace, so that no process it started is still writing there. A
// sandbox with no session has no background process: that is not an error.
// It returns how many were still running. Stdio commands (StartStdio) are
// stopped too.
func (s *Sandbox) StopProcesses(ctx context.Context) (int, error) {
	// Both run even when one fails: a stdio command that could not be
	// stopped is no reason to leave the background processes running.
	m, err1 := s.stopStdio(ctx)
	n, err2 := s.stopBackground(ctx)
	return m + n, errors.Join(err1, err2)
}

func (s *Sandbox) stopBackground(ctx context.Context) (int, error) {
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess == nil || !sess.alive() {
		return 0, nil
	}
	resp, _, err := sess.call(ctx, toolbox.ToolProcessStop, json.RawMessage(`{"all":true}`))
	if err != nil {
		return 0, fmt.Errorf("stopping background processes in sandbox %s: %w", shortID(s.ID), err)
	}
	if resp.IsError {
		return 0, fmt.Errorf("stopping background processes in sandbox %s: %s", shortID(s.ID), resp.Output)
	}
	var n int
	_, _ = fmt.Sscanf(resp.Output, "stopped %d ", &n)
	return n, nil
}
