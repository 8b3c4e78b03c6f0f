package toolbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Background process tools: a dev server or a watcher that outlives one
// tool call but never the toolbox session that started it. They exist only
// in a serve session (Serve), whose process lives as long as the sandbox's
// tool channel; when the session ends every background process is killed,
// so nothing the model started survives the session, and the host's git
// steps (which follow the session's end) never race a running process.
const (
	ToolProcessStart  = "process_start"
	ToolProcessOutput = "process_output"
	ToolProcessStop   = "process_stop"
)

// ProcessStartArgs are the arguments of process_start.
type ProcessStartArgs struct {
	Command string `json:"command"`
}

// ProcessOutputArgs are the arguments of process_output. Since is the byte
// offset to read from (the previous answer names the next one); 0 reads
// everything still kept.
type ProcessOutputArgs struct {
	ID    string `json:"id"`
	Since int64  `json:"since,omitempty"`
}

// ProcessStopArgs are the arguments of process_stop. All stops every
// background process (the orchestrator uses it before teardown).
type ProcessStopArgs struct {
	ID  string `json:"id,omitempty"`
	All bool   `json:"all,omitempty"`
}

// MaxBackground caps the background processes one session keeps running.
const MaxBackground = 8

// bgOutputBytes is how much of a background process's output is kept: the
// last bytes, with absolute offsets so that a reader polling with since
// learns what it missed.
const bgOutputBytes = 1 << 20

// processTable is the session's background processes.
type processTable struct {
	mu    sync.Mutex
	next  int
	procs map[string]*bgProc
	// serving counts the Serve sessions running; processes may start only
	// while one is, and the last one to end stops them all.
	serving int
}

type bgProc struct {
	id      string
	command string
	pgid    int
	started time.Time
	out     *windowBuffer
	done    chan struct{} // closed once the shell was reaped
	code    int
	signal  syscall.Signal
	stopped atomic.Bool
}

// windowBuffer keeps the last max bytes written, and the absolute offset of
// its first byte.
type windowBuffer struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	start int64 // absolute offset of buf[0]
}

func (w *windowBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
		w.start += int64(over)
	}
	return len(p), nil
}

// since returns the bytes from offset on (at most limit of them), the bytes
// dropped before the window, and the offset after what was returned.
func (w *windowBuffer) since(off int64, limit int) (data []byte, dropped, next int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.start + int64(len(w.buf))
	if off < w.start {
		dropped = w.start - off
		off = w.start
	}
	if off > end {
		off = end
	}
	data = w.buf[off-w.start:]
	if len(data) > limit {
		data = data[:limit]
	}
	return append([]byte(nil), data...), dropped, off + int64(len(data))
}

func (s *Server) processStart(ctx context.Context, raw json.RawMessage) Response {
	var a ProcessStartArgs
	if r := decodeArgs(ToolProcessStart, raw, &a); r != nil {
		return *r
	}
	if strings.TrimSpace(a.Command) == "" {
		return errorf("invalid arguments for process_start: command is required")
	}
	shell, ok := s.shell()
	if !ok {
		return errorf("this image has no %s, so background processes cannot be started", shell)
	}
	t := &s.bg
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.serving == 0 {
		return errorf("process_start needs the sandbox's tool session, which is not available right now; run the command with bash instead (it ends with the call)")
	}
	running := 0
	for _, p := range t.procs {
		select {
		case <-p.done:
		default:
			running++
		}
	}
	if running >= MaxBackground {
		return errorf("%d background processes are already running; stop one with process_stop first", running)
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		return errorf("cannot start the process: %v", err)
	}
	cmd := exec.Command(shell, shellArgs(shell, a.Command)...)
	cmd.Dir = s.root()
	cmd.Stdout, cmd.Stderr = pw, pw
	// Its own process group: process_stop kills everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = s.startBackground(cmd)
	pw.Close()
	if err != nil {
		pr.Close()
		return errorf("cannot start %s: %v", shell, err)
	}
	t.next++
	p := &bgProc{
		id: "p" + strconv.Itoa(t.next), command: a.Command, pgid: cmd.Process.Pid,
		started: time.Now(), out: &windowBuffer{max: bgOutputBytes}, done: make(chan struct{}),
	}
	if t.procs == nil {
		t.procs = map[string]*bgProc{}
	}
	t.procs[p.id] = p
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(p.out, pr)
	}()
	go func() {
		_ = cmd.Wait()
		p.code, p.signal = exitStatus(cmd.ProcessState)
		// Whatever the shell left in its group goes with it.
		killGroup(p.pgid)
		_ = pr.SetReadDeadline(time.Now().Add(drainGrace))
		<-readDone
		pr.Close()
		s.backgroundDone(p.pgid)
		close(p.done)
	}()

	// A command that fails at once (not found, bad port) is worth saying
	// now rather than on the next poll.
	select {
	case <-p.done:
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
	}
	return Response{Output: fmt.Sprintf("started background process %s (pid %d)\n%s", p.id, p.pgid, describe(p, 0, 4<<10))}
}

// describe is a process's state and its output from since on.
func describe(p *bgProc, since int64, limit int) string {
	data, dropped, next := p.out.since(since, limit)
	var b strings.Builder
	select {
	case <-p.done:
		switch {
		case p.stopped.Load():
			b.WriteString("state: stopped\n")
		case p.signal != 0:
			fmt.Fprintf(&b, "state: killed by signal %s\n", p.signal)
		default:
			fmt.Fprintf(&b, "state: exited with code %d\n", p.code)
		}
	default:
		fmt.Fprintf(&b, "state: running for %s\n", time.Since(p.started).Round(time.Second))
	}
	if dropped > 0 {
		fmt.Fprintf(&b, "[%d earlier bytes are no longer kept]\n", dropped)
	}
	if len(data) == 0 {
		b.WriteString("(no new output)\n")
	} else {
		b.Write(data)
		if data[len(data)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "[next since: %d]", next)
	return b.String()
}

func (s *Server) lookupProcess(tool, id string) (*bgProc, *Response) {
	s.bg.mu.Lock()
	defer s.bg.mu.Unlock()
	if p, ok := s.bg.procs[id]; ok {
		return p, nil
	}
	var ids []string
	for k := range s.bg.procs {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	known := "none were started"
	if len(ids) > 0 {
		known = "known: " + strings.Join(ids, ", ")
	}
	r := errorf("%s: no background process %q (%s)", tool, id, known)
	return nil, &r
}

func (s *Server) processOutput(raw json.RawMessage) Response {
	var a ProcessOutputArgs
	if r := decodeArgs(ToolProcessOutput, raw, &a); r != nil {
		return *r
	}
	p, bad := s.lookupProcess(ToolProcessOutput, a.ID)
	if bad != nil {
		return *bad
	}
	if a.Since < 0 {
		a.Since = 0
	}
	return Response{Output: describe(p, a.Since, s.limits().OutputBytes)}
}

func (s *Server) processStop(raw json.RawMessage) Response {
	var a ProcessStopArgs
	if r := decodeArgs(ToolProcessStop, raw, &a); r != nil {
		return *r
	}
	if a.All {
		n := s.StopBackground()
		return Response{Output: fmt.Sprintf("stopped %d background processes", n)}
	}
	p, bad := s.lookupProcess(ToolProcessStop, a.ID)
	if bad != nil {
		return *bad
	}
	stop(p)
	return Response{Output: describe(p, p.out.tailOffset(4<<10), 4<<10)}
}

// tailOffset is the offset of the last n bytes kept.
func (w *windowBuffer) tailOffset(n int64) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.start + max(0, int64(len(w.buf))-n)
}

// stop kills p's process group and waits until it was reaped.
func stop(p *bgProc) {
	select {
	case <-p.done:
		return
	default:
	}
	p.stopped.Store(true)
	killGroup(p.pgid)
	<-p.done
}

// beginServing marks a Serve session as running.
func (s *Server) beginServing() {
	s.bg.mu.Lock()
	s.bg.serving++
	s.bg.mu.Unlock()
}

// endServing marks a Serve session as ended; the last one stops every
// background process.
func (s *Server) endServing() {
	s.bg.mu.Lock()
	s.bg.serving--
	last := s.bg.serving == 0
	s.bg.mu.Unlock()
	if last {
		s.StopBackground()
	}
}

// StopBackground kills every background process and returns how many were
// still running.
func (s *Server) StopBackground() int {
	s.bg.mu.Lock()
	procs := make([]*bgProc, 0, len(s.bg.procs))
	for _, p := range s.bg.procs {
		procs = append(procs, p)
	}
	s.bg.mu.Unlock()
	n := 0
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			n++
			stop(p)
		}
	}
	return n
}

// startBackground starts a background shell and records its pid, so that
// the orphan sweep after a bash call leaves it alone.
func (s *Server) startBackground(cmd *exec.Cmd) error {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EAGAIN) {
			return fmt.Errorf("the sandbox's process limit is reached (%w)", err)
		}
		return err
	}
	if s.background == nil {
		s.background = map[int]struct{}{}
	}
	// The shell leads its own group, so its pid is the group's id.
	s.background[cmd.Process.Pid] = struct{}{}
	preferForOOM(cmd.Process.Pid)
	return nil
}

func (s *Server) backgroundDone(pid int) {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	delete(s.background, pid)
}
