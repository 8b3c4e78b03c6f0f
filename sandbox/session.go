package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/localagent/agent/sandbox/toolbox"
)

// errSessionLost is wrapped when the long-lived toolbox exec ends.
var errSessionLost = errors.New("toolbox session ended")

// sessionOpenTimeout bounds opening a session; it is independent of any one
// call's context because the session outlives the call that opened it.
const sessionOpenTimeout = 30 * time.Second

// reopenBackoff is how long after a failed open Tool calls go straight to
// one exec per call before trying to open a session again.
const reopenBackoff = 2 * time.Second

// errForeignFrame is wrapped when the session carried a response that no
// pending request asked for.
var errForeignFrame = errors.New("a response frame the host did not ask for")

// session is one long-lived `toolbox serve` exec carrying NDJSON frames:
// requests on its stdin, responses (matched by id, possibly out of order) on
// its stdout.
//
// Everything on stdout comes from inside the sandbox and is checked as
// such: a frame is at most maxFrame bytes, and each request id (random, so
// not guessable) is answered exactly once. A frame that breaks either rule
// ends the session, and the calls waiting on it get an error, never the
// frame's content.
type session struct {
	stream Stream

	wmu sync.Mutex // serialises frames on stdin

	maxFrame int  // bytes; <= 0 means no limit (tests only)
	lenient  bool // tests only: sequential ids, unknown frames ignored
	next     atomic.Uint64

	mu sync.Mutex
	// pending holds every request sent and not yet answered; a nil
	// channel marks one whose caller stopped waiting (a cancelled call, a
	// cancel request): its answer is still due and is dropped.
	pending map[uint64]chan toolbox.Response
	err     error // why the session ended; set once
	done    chan struct{}

	stderr tailBuffer
}

func openSession(ctx context.Context, d Driver, id, user, shell string) (*session, error) {
	s := &session{
		maxFrame: frameLimit(d), lenient: lenientFrames(d),
		pending: map[uint64]chan toolbox.Response{},
		done:    make(chan struct{}),
		stderr:  tailBuffer{max: 4 << 10},
	}
	st, err := d.OpenStream(ctx, id, user, toolboxCmd("serve", shell), &s.stderr)
	if err != nil {
		return nil, err
	}
	s.stream = st
	go s.readLoop()
	return s, nil
}

// frameLimit is the largest response frame a session over d accepts: the
// Engine's (which tests can change), else toolbox.MaxResponseBytes.
func frameLimit(d Driver) int {
	if e, ok := d.(*Engine); ok {
		return e.maxFrame()
	}
	return toolbox.MaxResponseBytes
}

// lenientFrames is the Engine's test-only switch; false for other drivers.
func lenientFrames(d Driver) bool {
	e, ok := d.(*Engine)
	return ok && e.lenientFrames
}

// OpenStream implements Driver: one exec with its streams attached, its
// output demultiplexed into Stdout and errOut.
func (e *Engine) OpenStream(ctx context.Context, id, user string, cmd []string, errOut io.Writer) (Stream, error) {
	if err := e.refuseIfFrozen(id); err != nil {
		return nil, err
	}
	started := e.startingExec(id)
	defer started()
	created, err := e.api.ContainerExecCreate(ctx, id, container.ExecOptions{
		User:         user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   toolbox.WorkspaceRoot,
		Cmd:          cmd,
	})
	if err != nil {
		return nil, e.wrapExec(id, err)
	}
	att, err := e.api.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, e.wrapExec(id, err)
	}
	e.waitExecStarted(ctx, created.ID)
	started()
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, errOut, att.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	return &execStream{att: att, out: pr}, nil
}

// execStream is an attached exec as a Stream.
type execStream struct {
	att types.HijackedResponse
	out *io.PipeReader
}

func (x *execStream) Write(p []byte) (int, error) { return x.att.Conn.Write(p) }
func (x *execStream) Stdout() io.Reader           { return x.out }
func (x *execStream) Close() error {
	x.att.Close()
	// Unblocks the copier should nobody read Stdout any more.
	x.out.CloseWithError(io.ErrClosedPipe)
	return nil
}

// toolboxCmd is the toolbox command line for mode, with the bash tool's
// shell when one was chosen; otherwise the toolbox picks /bin/bash where the
// image has it, else /bin/sh.
func toolboxCmd(mode, shell string) []string {
	cmd := []string{ToolboxPath, mode}
	if shell != "" {
		cmd = append(cmd, "-shell", shell)
	}
	return cmd
}

func (s *session) readLoop() {
	br := bufio.NewReaderSize(s.stream.Stdout(), 64<<10)
	for {
		line, err := readLine(br, s.maxFrame)
		var r toolbox.Response
		if err == nil {
			if jerr := json.Unmarshal(line, &r); jerr != nil {
				err = fmt.Errorf("malformed response frame: %w", jerr)
			}
		}
		if err == nil {
			err = s.deliver(r)
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
}

// deliver hands r to the call waiting for it. A response to a request that
// was never sent, or was already answered, did not come from the toolbox.
func (s *session) deliver(r toolbox.Response) error {
	s.mu.Lock()
	ch, ok := s.pending[r.ID]
	delete(s.pending, r.ID)
	s.mu.Unlock()
	switch {
	case !ok && s.lenient:
		return nil
	case !ok:
		return fmt.Errorf("%w (id %d): another process in the sandbox wrote to the session channel", errForeignFrame, r.ID)
	case ch != nil:
		ch <- r
	}
	return nil
}

// readLine reads one newline-terminated frame of at most limit bytes
// (limit <= 0: no limit). A longer frame is an error at once: nothing more
// of it is read or kept.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if limit > 0 && len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("a response frame longer than %d bytes", limit)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(bytes.TrimSpace(line)) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			line = line[:0]
			continue
		}
		return line, nil
	}
}

// newID returns an id for a request: random and unused, so that nothing
// but the toolbox, which reads the request, can answer it.
func (s *session) newID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newIDLocked()
}

// newIDLocked is newID with s.mu held.
func (s *session) newIDLocked() uint64 {
	if s.lenient {
		return s.next.Add(1)
	}
	for {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
		id := binary.LittleEndian.Uint64(b[:]) & (1<<53 - 1)
		if _, used := s.pending[id]; id != 0 && !used {
			return id
		}
	}
}

// fail ends the session: pending calls see their channel closed.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if msg := bytes.TrimSpace(s.stderr.Bytes()); len(msg) > 0 {
		err = fmt.Errorf("%w (toolbox stderr: %s)", err, msg)
	}
	s.err = fmt.Errorf("%w: %w", errSessionLost, err)
	for id, ch := range s.pending {
		if ch != nil {
			close(ch)
		}
		delete(s.pending, id)
	}
	close(s.done)
	s.mu.Unlock()
	_ = s.stream.Close()
}

func (s *session) close() { s.fail(errors.New("closed")) }

func (s *session) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *session) lostErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// call sends one request and waits for its response. sent reports whether
// the request reached the toolbox (so a lost session may have run it).
func (s *session) call(ctx context.Context, tool string, args json.RawMessage) (resp toolbox.Response, sent bool, err error) {
	id := s.newID()
	frame, err := json.Marshal(toolbox.Request{ID: id, Tool: tool, Args: args})
	if err != nil {
		return resp, false, fmt.Errorf("encoding %s request: %w", tool, err)
	}
	frame = append(frame, '\n')
	ch := make(chan toolbox.Response, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return resp, false, err
	}
	s.pending[id] = ch
	s.mu.Unlock()

	if err := s.write(frame); err != nil {
		s.fail(err)
		return resp, false, s.lostErr()
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return resp, true, s.lostErr()
		}
		return r, true, nil
	case <-ctx.Done():
		s.mu.Lock()
		if _, waiting := s.pending[id]; !waiting {
			// The answer came (or the session ended) as ctx ended.
			s.mu.Unlock()
			if r, ok := <-ch; ok {
				return r, true, nil
			}
			return resp, true, s.lostErr()
		}
		// Its late answer is still due; it is dropped when it comes.
		s.pending[id] = nil
		cancelID := s.newIDLocked()
		s.pending[cancelID] = nil
		s.mu.Unlock()
		// Ask the toolbox to stop the call (it kills a command's whole
		// process group).
		cancel, _ := json.Marshal(toolbox.Request{ID: cancelID, Tool: toolbox.OpCancel, Args: mustJSON(toolbox.CancelArgs{ID: id})})
		_ = s.write(append(cancel, '\n'))
		return resp, true, ctx.Err()
	}
}

func (s *session) write(frame []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.stream.Write(frame)
	return err
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}
