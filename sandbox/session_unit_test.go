package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/localagent/agent/sandbox/toolbox"
)

// fakeEngine answers exec calls with an in-process toolbox stand-in over a
// net.Pipe, framed the way the engine frames a non-TTY exec (stdcopy). It
// embeds the interface so that calls the tests do not expect panic.
type fakeEngine struct {
	engine

	mu       sync.Mutex
	execs    map[string][]string // exec id -> Cmd
	n        int
	serves   int
	calls    int
	cancels  []uint64
	running  bool
	paused   bool
	conns    []net.Conn
	failOpen bool
}

func newFake() *fakeEngine { return &fakeEngine{execs: map[string][]string{}, running: true} }

func (f *fakeEngine) ContainerExecCreate(_ context.Context, _ string, o container.ExecOptions) (container.ExecCreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return container.ExecCreateResponse{}, errors.New("not running")
	}
	f.n++
	id := string(rune('a' + f.n))
	f.execs[id] = o.Cmd
	return container.ExecCreateResponse{ID: id}, nil
}

func (f *fakeEngine) ContainerExecAttach(_ context.Context, id string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
	f.mu.Lock()
	cmd := f.execs[id]
	fail := f.failOpen && len(cmd) > 1 && cmd[1] == "serve"
	f.mu.Unlock()
	if fail {
		return types.HijackedResponse{}, errors.New("attach refused")
	}
	client, server := net.Pipe()
	f.mu.Lock()
	f.conns = append(f.conns, server)
	f.mu.Unlock()
	out := stdcopy.NewStdWriter(server, stdcopy.Stdout)
	switch cmd[1] {
	case "serve":
		f.mu.Lock()
		f.serves++
		f.mu.Unlock()
		go f.serve(server, out)
	case "call":
		f.mu.Lock()
		f.calls++
		f.mu.Unlock()
		go func() {
			var req toolbox.Request
			_ = json.NewDecoder(server).Decode(&req)
			b, _ := json.Marshal(toolbox.Response{ID: req.ID, Output: "via call: " + req.Tool})
			_, _ = out.Write(b)
			server.Close()
		}()
	default:
		server.Close() // a plain command with no output
	}
	return types.NewHijackedResponse(client, ""), nil
}

// serve answers "slow" after 50ms and everything else at once, so that
// responses come back out of order; "die" closes the session.
func (f *fakeEngine) serve(conn net.Conn, out io.Writer) {
	var wmu sync.Mutex
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		var req toolbox.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			continue
		}
		switch req.Tool {
		case toolbox.OpCancel:
			var a toolbox.CancelArgs
			_ = json.Unmarshal(req.Args, &a)
			f.mu.Lock()
			f.cancels = append(f.cancels, a.ID)
			f.mu.Unlock()
			continue
		case "die":
			conn.Close()
			return
		case "hang":
			continue
		case "spray", "dup", "huge":
			// What another process writing into the session channel
			// would send: answers to the ids it guesses (the request
			// itself stays unanswered), a second answer, or a frame over
			// the bound.
			wmu.Lock()
			r := toolbox.Response{ID: req.ID, Output: "forged"}
			if req.Tool == "huge" {
				r.Output = strings.Repeat("x", toolbox.MaxResponseBytes)
			}
			n := 1
			switch req.Tool {
			case "spray":
				n = 64
			case "dup":
				n = 2
			}
			for i := range n {
				if req.Tool == "spray" {
					r.ID = uint64(i + 1)
				}
				b, _ := json.Marshal(r)
				_, _ = out.Write(append(b, '\n'))
			}
			wmu.Unlock()
			continue
		case "late":
			// Answer only after the caller gave up.
			go func() {
				time.Sleep(100 * time.Millisecond)
				b, _ := json.Marshal(toolbox.Response{ID: req.ID, Output: "late"})
				wmu.Lock()
				_, _ = out.Write(append(b, '\n'))
				wmu.Unlock()
			}()
			continue
		}
		go func() {
			if req.Tool == "slow" {
				time.Sleep(50 * time.Millisecond)
			}
			b, _ := json.Marshal(toolbox.Response{ID: req.ID, Output: req.Tool + ":" + string(req.Args)})
			wmu.Lock()
			_, _ = out.Write(append(b, '\n'))
			wmu.Unlock()
		}()
	}
}

func (f *fakeEngine) ContainerExecInspect(context.Context, string) (container.ExecInspect, error) {
	return container.ExecInspect{Running: false, ExitCode: 0, Pid: 1}, nil
}

func (f *fakeEngine) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &container.State{Running: f.running, Status: "running", Paused: f.paused}
	if f.paused {
		st.Status = "paused"
	}
	if !f.running {
		st.Status, st.ExitCode = "exited", 137
	}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: st}}, nil
}

func (f *fakeEngine) counts() (serves, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.serves, f.calls
}

func (f *fakeEngine) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

func fakeSandbox(t *testing.T, f *fakeEngine) *Sandbox {
	sb := &Sandbox{ID: "c0ffee", User: "1000:1000", drv: &Engine{api: f}}
	t.Cleanup(func() { sb.Close(); f.closeAll() })
	return sb
}

func TestSessionMatchesOutOfOrderResponses(t *testing.T) {
	f := newFake()
	sb := fakeSandbox(t, f)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "fast"
			if i%2 == 0 {
				name = "slow"
			}
			args := json.RawMessage(`{"i":` + strings.Repeat("1", i+1) + `}`)
			r, err := sb.Tool(ctx, name, args)
			if err != nil || r.Output != name+":"+string(args) {
				t.Errorf("call %d: %+v %v", i, r, err)
			}
		}()
	}
	wg.Wait()
	if serves, calls := f.counts(); serves != 1 || calls != 0 {
		t.Errorf("serves %d calls %d: want every call over one session", serves, calls)
	}
}

func TestSessionCancelSendsCancelFrame(t *testing.T) {
	f := newFake()
	sb := fakeSandbox(t, f)
	// Open the session first, so that the short deadline below cannot
	// expire while it opens and send the call through the fallback.
	if _, err := sb.Tool(context.Background(), "fast", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sb.Tool(ctx, "hang", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung call: %v", err)
	}
	// The fake reads the cancel frame on its own goroutine.
	var cancels []uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		f.mu.Lock()
		cancels = append(cancels[:0], f.cancels...)
		f.mu.Unlock()
		if len(cancels) > 0 {
			break
		}
	}
	if len(cancels) != 1 || cancels[0] == 0 {
		t.Errorf("cancel frames %v", cancels)
	}
}

func TestSessionLossFallsBackToCall(t *testing.T) {
	f := newFake()
	sb := fakeSandbox(t, f)
	ctx := context.Background()
	if r, err := sb.Tool(ctx, toolbox.ToolReadFile, nil); err != nil || !strings.HasPrefix(r.Output, "read_file:") {
		t.Fatalf("first call: %+v %v", r, err)
	}
	// A read-only tool in flight when the session dies is re-run by exec.
	if r, err := sb.Tool(ctx, "die", nil); err == nil || !strings.Contains(err.Error(), "may or may not") {
		t.Errorf("a writing call lost with the session: %+v %v", r, err)
	}
	r, err := sb.Tool(ctx, toolbox.ToolReadFile, nil)
	if err != nil || r.Output != "via call: read_file" {
		t.Errorf("after the session died: %+v %v", r, err)
	}
	// After the back-off a new session is opened.
	sb.mu.Lock()
	sb.lastTry = time.Now().Add(-reopenBackoff)
	sb.mu.Unlock()
	if r, err := sb.Tool(ctx, toolbox.ToolReadFile, nil); err != nil || !strings.HasPrefix(r.Output, "read_file:") {
		t.Errorf("after the back-off: %+v %v", r, err)
	}
	if serves, _ := f.counts(); serves != 2 {
		t.Errorf("sessions opened: %d, want 2", serves)
	}
}

func TestSessionOpenFailureUsesCall(t *testing.T) {
	f := newFake()
	f.failOpen = true
	sb := fakeSandbox(t, f)
	r, err := sb.Tool(context.Background(), toolbox.ToolGlob, []byte(`{"pattern":"*"}`))
	if err != nil || r.Output != "via call: glob" {
		t.Errorf("%+v %v", r, err)
	}
}

func TestToolOnStoppedContainer(t *testing.T) {
	f := newFake()
	sb := fakeSandbox(t, f)
	if _, err := sb.Tool(context.Background(), "fast", nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.running = false
	f.mu.Unlock()
	f.closeAll()
	time.Sleep(10 * time.Millisecond)
	_, err := sb.Tool(context.Background(), toolbox.ToolReadFile, nil)
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "exited with code 137") {
		t.Errorf("want a not-running error, got %v", err)
	}
}

func TestToolRejectsMalformedArgsAsResult(t *testing.T) {
	sb := fakeSandbox(t, newFake())
	r, err := sb.Tool(context.Background(), toolbox.ToolReadFile, []byte(`{"path":`))
	if err != nil || !r.IsError || !strings.Contains(r.Output, "not valid JSON") {
		t.Errorf("%+v %v", r, err)
	}
}

// A response the host did not ask for (an unknown id, a second answer) or
// a frame over the bound ends the session with an error: the caller never
// sees the frame's content. Control: with the checks off (sequential ids,
// unknown answers ignored, as sessions once were), answers sprayed over
// likely ids are taken as the result.
func TestSessionRejectsForeignFrames(t *testing.T) {
	for _, tool := range []string{"spray", "dup", "huge"} {
		t.Run(tool, func(t *testing.T) {
			sb := fakeSandbox(t, newFake())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := sb.Tool(ctx, "fast", nil); err != nil {
				t.Fatal(err)
			}
			r, err := sb.Tool(ctx, tool, nil)
			if tool == "dup" && err == nil {
				// The first of the two answers is the real one; the second
				// ends the session.
				if r.Output != "forged" {
					t.Fatalf("first answer: %+v", r)
				}
				// The second answer must end the session that carried it
				// (whatever a later call then goes through: a new session
				// or one exec).
				sb.mu.Lock()
				old := sb.sess
				sb.mu.Unlock()
				if old == nil {
					t.Fatal("no session carried the call")
				}
				select {
				case <-old.done:
				case <-time.After(5 * time.Second):
					t.Fatal("the duplicate answer did not end the session")
				}
				r, err = toolbox.Response{}, old.lostErr()
			}
			if err == nil || !errors.Is(err, errSessionLost) || strings.Contains(r.Output, "forged") {
				t.Fatalf("want the session ended with an error, got %+v %v", r, err)
			}
			want := "did not ask for"
			if tool == "huge" {
				want = "longer than"
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		sb := fakeSandbox(t, newFake())
		sb.drv.(*Engine).lenientFrames = true
		sb.drv.(*Engine).frameLimit = -1
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := sb.Tool(ctx, "fast", nil); err != nil {
			t.Fatal(err)
		}
		if r, err := sb.Tool(ctx, "spray", nil); err != nil || r.Output != "forged" {
			t.Fatalf("control: without the checks the sprayed answer should be the result, got %+v %v", r, err)
		}
		// A fresh session: answers sprayed above may still be in flight.
		sb = fakeSandbox(t, newFake())
		sb.drv.(*Engine).lenientFrames = true
		sb.drv.(*Engine).frameLimit = -1
		if r, err := sb.Tool(ctx, "huge", nil); err != nil || len(r.Output) != toolbox.MaxResponseBytes {
			t.Fatalf("control: without the bound the huge frame should be read whole, got %d bytes, %v", len(r.Output), err)
		}
	})
}

// A call the caller gave up on is still answered later; that answer was
// asked for and must not end the session.
func TestSessionLateAnswerIsNotForeign(t *testing.T) {
	f := newFake()
	sb := fakeSandbox(t, f)
	if _, err := sb.Tool(context.Background(), "fast", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sb.Tool(ctx, "late", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late call: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if r, err := sb.Tool(context.Background(), "fast", nil); err != nil || !strings.HasPrefix(r.Output, "fast:") {
		t.Errorf("after a late answer: %+v %v", r, err)
	}
	if serves, _ := f.counts(); serves != 1 {
		t.Errorf("sessions opened: %d, want the first one still alive", serves)
	}
}

// withBound sets the host-side bound of every call to grace beyond a
// timeout of zero (grace < 0: no bound) for one test.
func withBound(t *testing.T, grace time.Duration) {
	t.Helper()
	oldMax, oldGrace, oldDefault := toolMaxTimeout.Load(), hostGrace.Load(), toolDefaultTimeout
	toolMaxTimeout.Store(0)
	toolDefaultTimeout = 0
	hostGrace.Store(grace)
	t.Cleanup(func() { toolMaxTimeout.Store(oldMax); hostGrace.Store(oldGrace); toolDefaultTimeout = oldDefault })
}

// A sandbox that never answers (paused from outside: its toolbox cannot
// run) does not hang the caller: the call ends at its host-side bound with
// an error that says the sandbox is paused and what to run. The control is
// the same call made with the bound off, still waiting when the bounded
// one has returned.
func TestToolHostBoundOnPausedSandbox(t *testing.T) {
	f := newFake()
	sb := fakeSandbox(t, f)
	if _, err := sb.Tool(context.Background(), "fast", nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.paused = true
	f.mu.Unlock()

	withBound(t, -1)
	ctrlCtx, stopCtrl := context.WithCancel(context.Background())
	defer stopCtrl()
	ctrl := make(chan error, 1)
	go func() {
		_, err := sb.Tool(ctrlCtx, "hang", nil)
		ctrl <- err
	}()
	// The control's bound was read when its call started; wait until it
	// is in flight (the fake has seen its request) before turning the
	// bound on.
	for sb.inFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	hostGrace.Store(200 * time.Millisecond)

	_, err := sb.Tool(context.Background(), "hang", nil)
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "paused") || !strings.Contains(err.Error(), "docker unpause") {
		t.Fatalf("a call into a paused sandbox: %v", err)
	}
	select {
	case err := <-ctrl:
		t.Fatalf("control: the unbounded call returned (%v), so the bound proves nothing", err)
	default:
	}
	stopCtrl()
	<-ctrl
}

// inFlight counts the calls of the sandbox's session awaiting an answer.
func (s *Sandbox) inFlight() int {
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess == nil {
		return 0
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return len(sess.pending)
}

// The bound follows the bash tool's own timeout (its default when none is
// given, never above the maximum) and the maximum for other tools.
func TestHostBoundFollowsToolTimeout(t *testing.T) {
	for _, c := range []struct {
		name, args string
		want       time.Duration
	}{
		{toolbox.ToolBash, `{"command":"x"}`, 120 * time.Second},
		{toolbox.ToolBash, `{"command":"x","timeout":5}`, 5 * time.Second},
		{toolbox.ToolBash, `{"command":"x","timeout":1e12}`, 600 * time.Second},
		{toolbox.ToolReadFile, `{"path":"a"}`, 600 * time.Second},
	} {
		got, on := hostBound(c.name, json.RawMessage(c.args))
		if want := c.want + 2*time.Minute; !on || got != want {
			t.Errorf("%s %s: bound %v (%v), want %v", c.name, c.args, got, on, want)
		}
	}
}
