package cli

import (
	"bytes"
	"encoding/json"
	"github.com/localagent/agent/orchestrator/store"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
)

func sampleEvents() []event.Event {
	zero, one := 0, 1
	return []event.Event{
		{Kind: event.Progress, Text: "sandbox abc ready"},
		{Kind: event.TextDelta, Text: "I will "},
		{Kind: event.TextDelta, Text: "run the tests."},
		{Kind: event.ToolStarted, Tool: "bash", CallID: "c1", Args: `{"command":"go test ./..."}`},
		{Kind: event.ToolFinished, Tool: "bash", CallID: "c1", ExitCode: &one, Duration: 1500 * time.Millisecond,
			Text: "=== RUN TestA", Output: "=== RUN TestA\n" + strings.Repeat("noise\n", 50) + "--- FAIL: TestA (0.00s)\n    a_test.go:9: got 2\nFAIL\n\n[exit code 1]\n"},
		{Kind: event.ToolStarted, Tool: "read_file", CallID: "c2", Args: `{"path":"main.go"}`},
		{Kind: event.ToolFinished, Tool: "read_file", CallID: "c2", IsError: true, Text: "no such file"},
		{Kind: event.Usage, PromptTokens: 100, CompletionTokens: 20},
		{Kind: event.ToolStarted, Tool: "bash", CallID: "c3", Args: `{"command":"go test ./..."}`},
		{Kind: event.ToolFinished, Tool: "bash", CallID: "c3", ExitCode: &zero, Duration: time.Second},
		{Kind: event.Notice, Text: "context compacted"},
		{Kind: event.Done, State: "done", Text: "ok"},
	}
}

func TestRenderPlain(t *testing.T) {
	ios, _, out, errOut := TestStreams()
	r := newEventRenderer(ios, false)
	fixed := time.Unix(1000, 0)
	r.start, r.now = fixed, func() time.Time { return fixed.Add(2 * time.Second) }
	for _, e := range sampleEvents() {
		r.Emit(e)
	}
	r.Close()
	if out.Len() != 0 {
		t.Errorf("plain mode wrote to stdout: %q", out)
	}
	got := errOut.String()
	for _, want := range []string{
		"  2.0s sandbox abc ready\n",
		"I will run the tests.\n  2.0s > bash $ go test ./...\n",
		// A failed command shows the tail of its output, where the
		// failure is, not its first line.
		"  2.0s   bash exit 1 (1.5s)\n          │ noise\n          │ noise\n          │ --- FAIL: TestA (0.00s)\n          │ a_test.go:9: got 2\n          │ FAIL\n",
		"  2.0s   read_file error (0s): no such file\n",
		"  2.0s note: context compacted\n",
		"  2.0s done (done) · 3 tool calls · tokens 100 in / 20 out\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plain output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b") {
		t.Errorf("plain output has escape sequences:\n%q", got)
	}
}

func TestRenderJSON(t *testing.T) {
	ios, _, out, errOut := TestStreams()
	r := newEventRenderer(ios, true)
	for _, e := range sampleEvents() {
		r.Emit(e)
	}
	r.Close()
	if errOut.Len() != 0 {
		t.Errorf("json mode wrote human text: %q", errOut)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(sampleEvents()) {
		t.Fatalf("%d lines for %d events", len(lines), len(sampleEvents()))
	}
	for _, l := range lines {
		var e event.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Kind == "" || e.Time.IsZero() {
			t.Errorf("bad line %q: %v", l, err)
		}
	}
}

func TestRenderLive(t *testing.T) {
	var buf bytes.Buffer
	ios := &IOStreams{Out: &bytes.Buffer{}, ErrOut: &buf, ErrTTY: true}
	r := newEventRenderer(ios, false)
	for _, e := range sampleEvents() {
		r.Emit(e)
	}
	r.Close()
	got := buf.String()
	if !strings.Contains(got, "tool calls · tokens 100 in / 20 out") {
		t.Errorf("no status line:\n%q", got)
	}
	if !strings.HasSuffix(got, clearLine) && !strings.HasSuffix(got, "\n") {
		t.Errorf("status line not cleared at the end: %q", got[len(got)-20:])
	}
}

// A background process has no exit status of its own: it is listed as
// started, not as a failure; a command without an exit status that was not
// started in the background still is (control).
func TestPrintCommandsBackground(t *testing.T) {
	one := 1
	var b bytes.Buffer
	printCommands(&b, []store.Command{
		{Command: "[background] python3 -m http.server", DurationMS: 12},
		{Command: "[explore] [background] sleep 100", DurationMS: 3},
		{Command: "make", ExitCode: &one},
		{Command: "lost"},
	}, 0, colors{})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "bg   started") || !strings.Contains(lines[1], "bg   started") ||
		!strings.Contains(lines[2], "FAIL exit 1") || !strings.Contains(lines[3], "FAIL exit ?") {
		t.Errorf("commands:\n%s", b.String())
	}
}

// A rate measured from a stream that arrived in one burst is not shown as
// a speed; a plausible one, or one the server timed, is (controls).
func TestSpeedLineBurst(t *testing.T) {
	if l := speedLine(3, 300, 0, 1, 90, 0.2, false); strings.Contains(l, "tok/s") || !strings.Contains(l, "not measurable") {
		t.Errorf("burst: %s", l)
	}
	if l := speedLine(3, 300, 0, 1, 90, 3000, false); !strings.Contains(l, "30.0 tok/s generated") {
		t.Errorf("stream: %s", l)
	}
	if l := speedLine(3, 300, 0, 1, 90000, 3000, true); !strings.Contains(l, "30000.0 tok/s generated") {
		t.Errorf("server: %s", l)
	}
}
