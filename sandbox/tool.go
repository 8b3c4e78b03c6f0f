package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/localagent/agent/sandbox/toolbox"
)

// readOnlyTools may be re-run safely when a session died with the call in
// flight.
var readOnlyTools = map[string]bool{
	toolbox.ToolReadFile: true, toolbox.ToolListDir: true, toolbox.ToolGlob: true,
	toolbox.ToolGrep: true, toolbox.OpPing: true,
}

// Tool runs one toolbox tool inside the sandbox and returns its response.
// A tool that fails (bad arguments, unknown tool, non-zero exit) is a
// Response with IsError set and a nil error; an error means the sandbox
// itself failed (container stopped or removed, engine unreachable, protocol
// broken).
//
// Calls go over one long-lived exec per sandbox (about a millisecond each);
// concurrent calls share it. If that session dies, calls fall back to one
// exec per call and a new session is opened later. Cancelling ctx asks the
// toolbox to stop the call (a command's process group is killed).
func (s *Sandbox) Tool(ctx context.Context, name string, args json.RawMessage) (toolbox.Response, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) {
		// A bad argument is a result for the model, not a failure.
		return toolbox.Response{Output: fmt.Sprintf("invalid arguments for %s: not valid JSON", name), IsError: true}, nil
	}
	if name != toolbox.OpPing {
		if err := s.waitHold(ctx); err != nil {
			return toolbox.Response{}, err
		}
	}
	bound, on := hostBound(name, args)
	if !on {
		return s.tool(ctx, name, args)
	}
	bctx, cancel := context.WithTimeoutCause(ctx, bound, errHostBound)
	defer cancel()
	resp, err := s.tool(bctx, name, args)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(bctx), errHostBound) {
		// The toolbox enforces the call's timeout inside the sandbox;
		// a sandbox that cannot run (paused from outside, its processes
		// stopped) never answers, so the host gives up too.
		ictx, icancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer icancel()
		if rerr := s.checkRunning(ictx); rerr != nil {
			return resp, fmt.Errorf("%s got no answer within %s: %w", name, bound, rerr)
		}
		return resp, fmt.Errorf("%s in sandbox %s got no answer within %s (the call's timeout and %s more): the sandbox does not respond; remove it with `agent sandbox rm %s` and resume the task", name, shortID(s.ID), bound, hostGrace.Load(), shortID(s.ID))
	}
	return resp, err
}

// errHostBound is the cause of a call's context ending at its host-side
// bound.
var errHostBound = errors.New("host-side bound of the tool call")

// The host-side bound of a tool call is the longest the toolbox lets it
// run (the bash tool's timeout, else its maximum) and hostGrace more for
// the engine and the answer (generous: a loaded machine is slow to start
// an exec). Tests lower them; hostGrace below zero switches the bound off.
var (
	toolDefaultTimeout = toolbox.DefaultLimits().DefaultTimeout
	toolMaxTimeout     atomic.Int64
	hostGrace          atomicDuration
)

type atomicDuration struct{ atomic.Int64 }

func (d *atomicDuration) Load() time.Duration   { return time.Duration(d.Int64.Load()) }
func (d *atomicDuration) Store(v time.Duration) { d.Int64.Store(int64(v)) }

func init() {
	toolMaxTimeout.Store(int64(toolbox.DefaultLimits().MaxTimeout))
	hostGrace.Store(2 * time.Minute)
}

// hostBound returns the host-side bound of a call of tool name with args,
// and whether there is one.
func hostBound(name string, args json.RawMessage) (time.Duration, bool) {
	grace := hostGrace.Load()
	if grace < 0 {
		return 0, false
	}
	max := time.Duration(toolMaxTimeout.Load())
	timeout := max
	if name == toolbox.ToolBash {
		var a struct {
			Timeout float64 `json:"timeout"`
		}
		_ = json.Unmarshal(args, &a)
		timeout = toolDefaultTimeout
		if a.Timeout > 0 {
			timeout = max
			if a.Timeout < max.Seconds() {
				timeout = time.Duration(a.Timeout * float64(time.Second))
			}
		}
		timeout = min(timeout, max)
	}
	return timeout + grace, true
}

// tool is Tool without the host-side bound.
func (s *Sandbox) tool(ctx context.Context, name string, args json.RawMessage) (toolbox.Response, error) {
	if sess := s.session(ctx); sess != nil {
		resp, sent, err := sess.call(ctx, name, args)
		if err == nil || !errors.Is(err, errSessionLost) {
			return resp, err
		}
		s.dropSession(sess)
		if rerr := s.checkRunning(context.WithoutCancel(ctx)); rerr != nil {
			return resp, rerr
		}
		if sent && !readOnlyTools[name] {
			return resp, fmt.Errorf("%s in sandbox %s: the toolbox session ended during the call, so it may or may not have taken effect: %w", name, shortID(s.ID), err)
		}
	}
	return s.callExec(ctx, name, args)
}

// callExec runs one request through `toolbox call`, one exec for the call.
func (s *Sandbox) callExec(ctx context.Context, name string, args json.RawMessage) (toolbox.Response, error) {
	var resp toolbox.Response
	req, err := json.Marshal(toolbox.Request{ID: 1, Tool: name, Args: args})
	if err != nil {
		return resp, fmt.Errorf("encoding %s request: %w", name, err)
	}
	// The sandbox writes both streams: each is bounded like a session's
	// frame, so that nothing it prints makes the host grow.
	out := &boundedBuffer{max: frameLimit(s.drv)}
	errOut := &tailBuffer{max: 4 << 10}
	res, err := s.exec(ctx, ExecOptions{
		Cmd:   toolboxCmd("call", s.shell),
		Stdin: bytes.NewReader(append(req, '\n')), Stdout: out, Stderr: errOut,
	})
	if err != nil {
		return resp, err
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		if res.ExitCode != 0 {
			// The toolbox itself died (it never fails a call with a
			// non-zero exit): report the container's state if that is why.
			if rerr := s.checkRunning(context.WithoutCancel(ctx)); rerr != nil {
				return resp, rerr
			}
		}
		return resp, fmt.Errorf("%s in sandbox %s: toolbox call exited %d without a response (stderr: %q): %w", name, shortID(s.ID), res.ExitCode, bytes.TrimSpace(errOut.Bytes()), err)
	}
	return resp, nil
}

// session returns a live session, opening one if needed; nil means "use
// one exec per call" (closed sandbox, or a recent open failed).
func (s *Sandbox) session(ctx context.Context) *session {
	s.mu.Lock()
	if s.sess != nil && s.sess.alive() {
		sess := s.sess
		s.mu.Unlock()
		return sess
	}
	if s.closed || (s.opening == nil && time.Since(s.lastTry) < reopenBackoff) {
		s.mu.Unlock()
		return nil
	}
	ch := s.opening
	if ch == nil {
		ch = s.startOpenLocked()
	}
	s.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess
}

// openAsync starts opening the session without waiting for it.
func (s *Sandbox) openAsync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opening == nil && !s.closed {
		s.startOpenLocked()
	}
}

// startOpenLocked opens a session in the background; the returned channel
// closes when the attempt ends. s.mu must be held.
func (s *Sandbox) startOpenLocked() chan struct{} {
	ch := make(chan struct{})
	s.opening = ch
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), sessionOpenTimeout)
		defer cancel()
		sess, err := openSession(ctx, s.drv, s.ID, s.User, s.shell)
		s.mu.Lock()
		s.opening = nil
		switch {
		case err != nil:
			s.lastTry = time.Now()
		case s.closed:
			sess.close()
		default:
			s.sess = sess
		}
		s.mu.Unlock()
		close(ch)
	}()
	return ch
}

func (s *Sandbox) dropSession(sess *session) {
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
		s.lastTry = time.Now()
	}
	s.mu.Unlock()
	sess.close()
}

// errTooLong is wrapped when a sandbox's output to the host exceeds its
// bound.
var errTooLong = errors.New("output over its size bound")

// boundedBuffer keeps what is written to it up to max bytes (<= 0: no
// bound) and fails the write that would cross it, which stops the copy
// from the engine.
type boundedBuffer struct {
	bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if b.max > 0 && b.Len()+len(p) > b.max {
		return 0, fmt.Errorf("%w (%d bytes)", errTooLong, b.max)
	}
	return b.Buffer.Write(p)
}
