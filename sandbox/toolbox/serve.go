package toolbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"unicode/utf8"
)

// MaxFrameBytes caps one request frame (a write_file of a large file is the
// biggest legitimate one). A longer line is refused and skipped, so one bad
// frame cannot exhaust the sandbox's memory.
const MaxFrameBytes = 64 << 20

// MaxConcurrent is how many requests of one session run at once; more
// wait their turn (ping and cancel never wait). It bounds the OS threads
// the session needs, which Serve reserves up front.
const MaxConcurrent = 8

// Serve runs a session: newline-delimited Request frames from r, Response
// frames to w. Requests run concurrently and are answered as they finish,
// matched by ID; the client orders calls that write. OpPing is answered at
// once; OpCancel stops a running request (a bash command's whole process
// group is killed). Nothing but frames is written to w.
//
// When r ends (the client went away) or ctx is done, every running request
// is cancelled and Serve returns once they have answered. It returns nil on
// a clean end of input, ctx's error when ctx ended the session, and an
// error when reading r or writing w failed.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	// Start the OS threads the session can need now, while that is still
	// possible: a fork bomb inside the sandbox can use up the pids limit
	// later, and a Go program that cannot create a thread it needs dies.
	// Idle threads are kept by the runtime and reused. A request blocked in
	// a system call (a file read, a command's wait) holds one thread, and at
	// most MaxConcurrent requests run at once; add the threads that run Go
	// code and the runtime's own (sysmon, signals, a template thread).
	reserveThreads(MaxConcurrent + runtime.GOMAXPROCS(0) + 6)
	// Background processes live as long as the session (process.go).
	s.beginServing()
	defer s.endServing()

	ctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	sess := &session{
		srv: s, out: &frameWriter{w: w, onError: cancelAll},
		running: map[uint64]context.CancelFunc{},
		slots:   make(chan struct{}, MaxConcurrent),
	}

	frames := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, err := readFrame(br, MaxFrameBytes)
			if len(bytes.TrimSpace(line)) > 0 || errors.Is(err, errFrameTooLong) {
				select {
				case frames <- line:
				case <-ctx.Done():
					readErr <- ctx.Err()
					return
				}
			}
			if err != nil && !errors.Is(err, errFrameTooLong) {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readErr <- err
				return
			}
		}
	}()

	var err error
loop:
	for {
		select {
		case line := <-frames:
			sess.dispatch(ctx, line)
		case err = <-readErr:
			if err != nil {
				err = fmt.Errorf("reading requests: %w", err)
			}
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
	}
	cancelAll()
	sess.wg.Wait()
	if werr := sess.out.failure(); werr != nil && err == nil {
		err = fmt.Errorf("writing responses: %w", werr)
	}
	return err
}

type session struct {
	srv   *Server
	out   *frameWriter
	wg    sync.WaitGroup
	slots chan struct{} // one per running request; bounds threads in use

	mu      sync.Mutex
	running map[uint64]context.CancelFunc
}

func (ss *session) dispatch(ctx context.Context, line []byte) {
	if line == nil {
		ss.out.write(Response{IsError: true, Output: fmt.Sprintf("request frame longer than %d bytes was skipped", MaxFrameBytes)})
		return
	}
	req, bad := parseRequest(line)
	if bad != nil {
		ss.out.write(*bad)
		return
	}
	switch req.Tool {
	case OpPing:
		ss.out.write(ss.srv.Handle(ctx, req))
		return
	case OpCancel:
		ss.out.write(ss.cancel(req))
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	ss.mu.Lock()
	if _, dup := ss.running[req.ID]; dup {
		ss.mu.Unlock()
		cancel()
		ss.out.write(Response{ID: req.ID, IsError: true, Output: fmt.Sprintf("request id %d is already running; use a new id for each request", req.ID)})
		return
	}
	ss.running[req.ID] = cancel
	ss.mu.Unlock()
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		var resp Response
		select {
		case ss.slots <- struct{}{}:
			resp = ss.srv.Handle(rctx, req)
			<-ss.slots
		case <-rctx.Done():
			resp = Response{ID: req.ID, IsError: true, Output: fmt.Sprintf("%s was cancelled before it started", req.Tool)}
		}
		ss.mu.Lock()
		delete(ss.running, req.ID)
		ss.mu.Unlock()
		cancel()
		ss.out.write(resp)
	}()
}

func (ss *session) cancel(req Request) Response {
	var a CancelArgs
	if r := decodeArgs(OpCancel, req.Args, &a); r != nil {
		r.ID = req.ID
		return *r
	}
	ss.mu.Lock()
	stop, ok := ss.running[a.ID]
	ss.mu.Unlock()
	if !ok {
		// Not an error: the request most likely finished while the cancel
		// was on its way.
		return Response{ID: req.ID, Output: fmt.Sprintf("request %d is not running", a.ID)}
	}
	stop()
	return Response{ID: req.ID, Output: fmt.Sprintf("cancelled request %d", a.ID)}
}

// parseRequest decodes one frame; a malformed frame gets an error response
// carrying its id when the id at least could be read.
func parseRequest(line []byte) (Request, *Response) {
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		var idOnly struct {
			ID uint64 `json:"id"`
		}
		_ = json.Unmarshal(line, &idOnly)
		return req, &Response{ID: idOnly.ID, IsError: true, Output: fmt.Sprintf("malformed request frame: %v", err)}
	}
	return req, nil
}

var errFrameTooLong = errors.New("frame too long")

// readFrame reads one line of at most limit bytes. A longer line is
// consumed and dropped: it returns nil with errFrameTooLong.
func readFrame(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit {
				tooLong = true
				line = nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			if err == nil {
				err = errFrameTooLong
			}
			return nil, err
		}
		return line, err
	}
}

// frameWriter writes whole frames, one at a time.
type frameWriter struct {
	mu      sync.Mutex
	w       io.Writer
	err     error
	onError func()
}

func (fw *frameWriter) write(resp Response) {
	buf := encodeResponse(resp)
	if buf.Len() > MaxResponseBytes {
		// The host ends a session that sends a longer frame. Even escaped
		// as \u00XX throughout, this much output stays well under the bound.
		keep := min(MaxResponseBytes/8, len(resp.Output))
		cut := len(resp.Output) - keep
		for keep > 0 && keep < len(resp.Output) && !utf8.RuneStart(resp.Output[keep]) {
			keep--
		}
		resp.Output = resp.Output[:keep] + fmt.Sprintf("\n[... %d more bytes cut: a response is at most %d bytes]\n", cut, MaxResponseBytes)
		resp.Truncated = true
		buf = encodeResponse(resp)
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err != nil {
		return
	}
	if _, err := fw.w.Write(buf.Bytes()); err != nil {
		fw.err = err
		if fw.onError != nil {
			fw.onError()
		}
	}
}

func encodeResponse(resp Response) *bytes.Buffer {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resp); err != nil {
		// Cannot happen for this type; answer anyway so the client does not
		// wait forever.
		buf.Reset()
		fmt.Fprintf(&buf, `{"id":%d,"output":"cannot encode response","is_error":true,"duration_ms":0}`+"\n", resp.ID)
	}
	return &buf
}

func (fw *frameWriter) failure() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.err
}

// Call runs one request read from r and writes its Response to w: the
// one-exec-per-call fallback when no session is open. It reads one JSON
// value, so the client need not close its end first. A malformed request
// still gets a Response; only IO failures are errors.
func (s *Server) Call(ctx context.Context, r io.Reader, w io.Writer) error {
	lr := &io.LimitedReader{R: r, N: MaxFrameBytes + 1}
	var req Request
	err := json.NewDecoder(lr).Decode(&req)
	var resp Response
	switch {
	case lr.N <= 0:
		resp = Response{IsError: true, Output: fmt.Sprintf("request longer than %d bytes", MaxFrameBytes)}
	case errors.Is(err, io.EOF):
		resp = Response{IsError: true, Output: "no request: stdin was empty"}
	case err != nil:
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		if !errors.As(err, &syn) && !errors.As(err, &typ) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("reading the request: %w", err)
		}
		resp = Response{ID: req.ID, IsError: true, Output: fmt.Sprintf("malformed request frame: %v", err)}
	default:
		resp = s.Handle(ctx, req)
	}
	fw := &frameWriter{w: w}
	fw.write(resp)
	if err := fw.failure(); err != nil {
		return fmt.Errorf("writing the response: %w", err)
	}
	return nil
}

// reserveThreads makes the runtime start n OS threads: n goroutines locked
// to their threads block at once, then unlock, and the runtime keeps the
// idle threads for later use.
func reserveThreads(n int) {
	var ready, done sync.WaitGroup
	ready.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			<-release
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}
