package toolbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// session is a Serve running over io.Pipes, as the sandbox drives it over a
// docker exec's stdin and stdout.
type testSession struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *bufio.Scanner
	done chan error
}

func startSession(t *testing.T, s *Server) *testSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ts := &testSession{t: t, in: inW, out: bufio.NewScanner(outR), done: make(chan error, 1)}
	ts.out.Buffer(nil, MaxFrameBytes)
	go func() {
		err := s.Serve(context.Background(), inR, outW)
		outW.Close()
		ts.done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		go io.Copy(io.Discard, outR)
		select {
		case <-ts.done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after stdin closed")
		}
	})
	return ts
}

func (ts *testSession) send(id uint64, tool string, args any) {
	ts.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.sendRaw(fmt.Sprintf(`{"id":%d,"tool":%q,"args":%s}`, id, tool, raw))
}

func (ts *testSession) sendRaw(frame string) {
	ts.t.Helper()
	if _, err := io.WriteString(ts.in, frame+"\n"); err != nil {
		ts.t.Fatal(err)
	}
}

func (ts *testSession) recv() Response {
	ts.t.Helper()
	if !ts.out.Scan() {
		ts.t.Fatalf("session ended: %v", ts.out.Err())
	}
	var r Response
	if err := json.Unmarshal(ts.out.Bytes(), &r); err != nil {
		ts.t.Fatalf("bad frame %q: %v", ts.out.Bytes(), err)
	}
	return r
}

func TestServeConcurrentRequests(t *testing.T) {
	s := newTestServer(t)
	writeTestFile(t, s.Root, "a.txt", "hello\n")
	ts := startSession(t, s)

	ts.send(1, ToolBash, BashArgs{Command: "sleep 0.5; echo slow"})
	ts.send(2, ToolReadFile, ReadFileArgs{Path: "a.txt"})
	ts.send(3, OpPing, nil)
	ts.send(4, ToolGlob, GlobArgs{Pattern: "*.txt"})
	got := map[uint64]Response{}
	var order []uint64
	for range 4 {
		r := ts.recv()
		got[r.ID] = r
		order = append(order, r.ID)
	}
	if order[3] != 1 {
		t.Errorf("the slow command did not answer last: order %v", order)
	}
	if got[2].Output != "     1\thello\n" || got[3].Output != "pong" || got[4].Output != "a.txt\n" || got[1].Output != "slow\n" {
		t.Errorf("responses: %+v", got)
	}
	if got[1].DurationMS < 400 {
		t.Errorf("duration_ms = %d for a 0.5 s command", got[1].DurationMS)
	}
}

func TestServeCancel(t *testing.T) {
	s := newTestServer(t)
	ts := startSession(t, s)
	sleep, marker := uniqueSleep(t)
	ts.send(1, ToolBash, BashArgs{Command: sleep})
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	ts.send(2, OpCancel, CancelArgs{ID: 1})
	seen := map[uint64]Response{}
	for range 2 {
		r := ts.recv()
		seen[r.ID] = r
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("cancel took %v", d)
	}
	check(t, seen[2], false, "cancelled request 1")
	check(t, seen[1], true, "cancelled")
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("processes survived the cancel: %v", left)
	}
	ts.send(3, OpCancel, CancelArgs{ID: 99})
	check(t, ts.recv(), false, "request 99 is not running")
}

func TestServeBadFrames(t *testing.T) {
	s := newTestServer(t)
	ts := startSession(t, s)
	ts.sendRaw(`{"id":5,"tool":"read_file","args":{"path":`)
	r := ts.recv()
	check(t, r, true, "malformed request frame")
	ts.sendRaw(`not json`)
	check(t, ts.recv(), true, "malformed request frame")
	ts.sendRaw(``) // blank lines are ignored
	ts.send(6, "nope", nil)
	r = ts.recv()
	if r.ID != 6 {
		t.Errorf("ID = %d", r.ID)
	}
	check(t, r, true, `unknown tool "nope"`)

	// A second request with the id of a running one is refused.
	ts.send(7, ToolBash, BashArgs{Command: "sleep 0.3"})
	ts.send(7, ToolBash, BashArgs{Command: "true"})
	check(t, ts.recv(), true, "request id 7 is already running")
	check(t, ts.recv(), false)
}

func TestServeEOFCancelsEverything(t *testing.T) {
	s := newTestServer(t)
	inR, inW := io.Pipe()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), inR, &out) }()
	sleep, marker := uniqueSleep(t)
	io.WriteString(inW, fmt.Sprintf(`{"id":1,"tool":"bash","args":{"command":%q}}`+"\n", sleep))
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return after EOF")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	if !strings.Contains(out.String(), `"id":1`) || !strings.Contains(out.String(), "cancelled") {
		t.Errorf("running request not answered: %s", out.String())
	}
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("processes survived the end of the session: %v", left)
	}
}

func TestServeContextEnds(t *testing.T) {
	s := newTestServer(t)
	inR, inW := io.Pipe()
	defer inW.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, inR, io.Discard) }()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Serve = %v, want context.Canceled", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return when its context ended")
	}
}

func TestReadFrameTooLong(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\n{}\n"), 16)
	if line, err := readFrame(br, 50); line != nil || err != errFrameTooLong {
		t.Errorf("long frame: %q %v", line, err)
	}
	if line, err := readFrame(br, 50); string(line) != "{}\n" || err != nil {
		t.Errorf("next frame: %q %v", line, err)
	}
}

func TestCall(t *testing.T) {
	s := newTestServer(t)
	writeTestFile(t, s.Root, "a.txt", "x\n")
	var out bytes.Buffer
	if err := s.Call(context.Background(), strings.NewReader(`{"id":3,"tool":"read_file","args":{"path":"a.txt"}}`), &out); err != nil {
		t.Fatal(err)
	}
	var r Response
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.ID != 3 || r.Output != "     1\tx\n" {
		t.Errorf("response %q (%v)", out.String(), err)
	}
	out.Reset()
	if err := s.Call(context.Background(), strings.NewReader(`{"id":`), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "malformed request frame") {
		t.Errorf("response %q", out.String())
	}

	// One JSON value is read; the client need not close its end, and a
	// request split over lines is fine.
	pr, pw := io.Pipe()
	defer pw.Close()
	go io.WriteString(pw, "{\"id\": 4,\n \"tool\": \"ping\"}\n")
	out.Reset()
	if err := s.Call(context.Background(), pr, &out); err != nil || !strings.Contains(out.String(), `"id":4,"output":"pong"`) {
		t.Errorf("response %q (%v)", out.String(), err)
	}
	out.Reset()
	if err := s.Call(context.Background(), strings.NewReader(""), &out); err != nil || !strings.Contains(out.String(), "stdin was empty") {
		t.Errorf("response %q (%v)", out.String(), err)
	}
}

// BenchmarkServeReadFile measures one read_file round trip through a
// session, the path every file tool call takes.
func BenchmarkServeReadFile(b *testing.B) {
	s := &Server{Root: b.TempDir()}
	var content strings.Builder
	for i := range 100 {
		fmt.Fprintf(&content, "line %d of a small source file\n", i)
	}
	writeTestFile(b, s.Root, "f.go", content.String())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		_ = s.Serve(context.Background(), inR, outW)
		outW.Close()
	}()
	defer inW.Close()
	sc := bufio.NewScanner(outR)
	sc.Buffer(nil, 1<<20)
	b.ResetTimer()
	for i := range b.N {
		fmt.Fprintf(inW, `{"id":%d,"tool":"read_file","args":{"path":"f.go"}}`+"\n", i+1)
		if !sc.Scan() {
			b.Fatal("session ended")
		}
	}
}

func TestServeBoundsConcurrency(t *testing.T) {
	s := newTestServer(t)
	ts := startSession(t, s)
	const n = MaxConcurrent + 1
	for i := range n {
		// The slot holders run until cancelled below, so no slot frees up
		// before the queued request is cancelled, however slow the machine.
		ts.send(uint64(i+1), ToolBash, BashArgs{Command: fmt.Sprintf("touch started.%d; sleep 600", i+1)})
	}
	// Which request waits is up to the scheduler (no FIFO is promised):
	// it is the one that has not started.
	var queued uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		started, _ := filepath.Glob(filepath.Join(s.Root, "started.*"))
		if len(started) > MaxConcurrent {
			t.Fatalf("%d requests running, want at most %d", len(started), MaxConcurrent)
		}
		if len(started) == MaxConcurrent {
			for id := uint64(1); id <= n; id++ {
				if _, err := os.Stat(filepath.Join(s.Root, fmt.Sprintf("started.%d", id))); err != nil {
					queued = id
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests started", len(started))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ...and it stays queued: no ninth request starts.
	time.Sleep(300 * time.Millisecond)
	if started, _ := filepath.Glob(filepath.Join(s.Root, "started.*")); len(started) != MaxConcurrent {
		t.Errorf("%d requests running, want %d", len(started), MaxConcurrent)
	}
	// ping does not wait for a slot; a queued request can be cancelled.
	ts.send(100, OpPing, nil)
	check(t, ts.recv(), false, "pong")
	ts.send(101, OpCancel, CancelArgs{ID: queued})
	got := map[uint64]Response{}
	for range 2 {
		r := ts.recv()
		got[r.ID] = r
	}
	check(t, got[101], false, fmt.Sprintf("cancelled request %d", queued))
	check(t, got[queued], true, "bash was cancelled before it started")
	if _, err := os.Stat(filepath.Join(s.Root, fmt.Sprintf("started.%d", queued))); err == nil {
		t.Error("the cancelled request ran")
	}
	// Responses are read while the cancels are sent: the pipes do not
	// buffer, so a writer with no reader would block the session.
	go func() {
		for id := uint64(1); id <= n; id++ {
			if id == queued {
				continue
			}
			frame := fmt.Sprintf(`{"id":%d,"tool":%q,"args":{"id":%d}}`+"\n", 200+id, OpCancel, id)
			if _, err := io.WriteString(ts.in, frame); err != nil {
				return // the session ended; recv reports it
			}
		}
	}()
	for range 2 * MaxConcurrent {
		ts.recv()
	}
}

// A response whose frame would pass MaxResponseBytes (the host ends a
// session that sends one) is cut to fit and marked truncated, even when
// every byte of the output needs escaping. Control: the same response
// encoded as is is over the bound.
func TestResponseFrameStaysUnderBound(t *testing.T) {
	big := Response{ID: 7, Output: strings.Repeat("\x01é", MaxResponseBytes/2)}
	if n := encodeResponse(big).Len(); n <= MaxResponseBytes {
		t.Fatalf("control: the unbounded frame is only %d bytes", n)
	}
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf}
	fw.write(big)
	if buf.Len() > MaxResponseBytes {
		t.Fatalf("frame of %d bytes, bound %d", buf.Len(), MaxResponseBytes)
	}
	var got Response
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != 7 || !got.Truncated || !strings.Contains(got.Output, "more bytes cut") || !utf8.ValidString(got.Output) {
		t.Errorf("cut response: id %d truncated %v valid %v tail %q", got.ID, got.Truncated, utf8.ValidString(got.Output), got.Output[len(got.Output)-80:])
	}
}

// Protect leaves the process not dumpable: what keeps the commands it runs
// from attaching to it. Control: a process is dumpable before.
func TestProtectClearsDumpable(t *testing.T) {
	if insecureDumpable {
		t.Skip("built with agent_insecure_dumpable")
	}
	// In a child, so that this test binary stays debuggable.
	if os.Getenv("TOOLBOX_PROTECT_CHILD") == "1" {
		before, _ := Dumpable()
		if err := Protect(); err != nil {
			fmt.Println("error:", err)
			return
		}
		after, _ := Dumpable()
		fmt.Printf("before=%v after=%v\n", before, after)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestProtectClearsDumpable$")
	cmd.Env = append(os.Environ(), "TOOLBOX_PROTECT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "before=true after=false") {
		t.Errorf("%v: %s", err, out)
	}
}
