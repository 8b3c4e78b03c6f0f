package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/scripted"
	"github.com/localagent/agent/agent/session"
)

// These tests drive the loop through the real HTTP client against the
// scripted OpenAI-compatible server on loopback, so streaming, tool-call
// assembly and server errors are the real thing.

func scriptedClient(t *testing.T, script string) (*llm.HTTPClient, *scripted.Server) {
	t.Helper()
	s, err := scripted.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := scripted.Start(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c, err := llm.NewHTTP(llm.Options{BaseURL: srv.URL(), MaxRetries: -1, IdleTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func noMismatches(t *testing.T, srv *scripted.Server) {
	t.Helper()
	if m := srv.Mismatches(); len(m) > 0 {
		t.Fatalf("unexpected requests: %q", m)
	}
}

func TestScriptedBadModelInput(t *testing.T) {
	c, srv := scriptedClient(t, `
turns:
  - tool_calls:
      - {name: read_file, arguments: '{"path": "a.txt"'}
      - {name: frobnicate, arguments: {}}
      - {name: read_file, arguments: {path: 7}}
      - {name: read_file, arguments: {path: a.txt}}
  - expect: {last_role: tool, contains: "not valid JSON"}
    text: done
`)
	ws := newMemWorkspace(map[string]string{"a.txt": "hi"})
	a := newTestAgent(t, c, ws, func(o *Options) { o.ToolMode = ToolModeNative })
	res, err := a.Run(t.Context(), "go")
	if err != nil {
		t.Fatalf("%v (%q)", err, srv.Mismatches())
	}
	noMismatches(t, srv)
	if res.Text != "done" || len(res.ToolCalls) != 4 {
		t.Fatalf("res = %+v", res)
	}
	msgs := a.Messages()
	results := msgs[len(msgs)-5 : len(msgs)-1]
	for i, want := range []string{"not valid JSON", `unknown tool "frobnicate"`, "want string", "hi"} {
		if !strings.Contains(results[i].Content, want) {
			t.Errorf("result %d = %q, want %q in it", i, results[i].Content, want)
		}
	}
}

func TestScriptedDowngradeToTextMode(t *testing.T) {
	c, srv := scriptedClient(t, `
turns:
  - error: {status: 500, message: "tools param requires --jinja flag"}
  - expect: {no_tools: true, system_contains: "<tool_call>"}
    text: "Reading it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>"
  - expect: {no_tools: true, last_role: user, last_contains: "<tool_response name=\"read_file\">"}
    text: "<think>It says hi.</think>The file says hi."
`)
	rec := &event.Recorder{}
	a := newTestAgent(t, c, newMemWorkspace(map[string]string{"a.txt": "hi"}), func(o *Options) { o.Sink = rec })
	res, err := a.Run(t.Context(), "what does a.txt say?")
	if err != nil {
		t.Fatalf("%v (%q)", err, srv.Mismatches())
	}
	noMismatches(t, srv)
	if res.Text != "The file says hi." || len(res.ToolCalls) != 1 {
		t.Fatalf("res = %+v", res)
	}
	notice := false
	for _, e := range rec.Events() {
		notice = notice || (e.Kind == event.Notice && strings.Contains(e.Text, "text tool calls"))
	}
	if !notice {
		t.Error("no notice about the switch to text tool calls")
	}
}

func TestScriptedCutStreamKeepsTranscript(t *testing.T) {
	c, _ := scriptedClient(t, `
turns:
  - tool_calls:
      - {name: list_dir, arguments: {}}
  - text: "This reply will be cut off in the middle and never finish properly."
    drop: true
`)
	a := newTestAgent(t, c, newMemWorkspace(map[string]string{"a": "1"}), nil)
	res, err := a.Run(t.Context(), "go")
	if err == nil || res.StopReason != StopError {
		t.Fatalf("err = %v, res = %+v", err, res)
	}
	var le *llm.Error
	if !errors.As(err, &le) {
		t.Fatalf("error does not carry the client's kind: %v", err)
	}
	_, msgs, err := session.Load(res.SessionPath)
	if err != nil || len(msgs) != 4 || msgs[3].Role != llm.RoleTool {
		t.Fatalf("transcript: %v, %+v", err, msgs)
	}
}

func TestScriptedHugeArgumentsAndArtifacts(t *testing.T) {
	// 60 KB of arguments (~15k tokens) do not fit an 8k window: the old
	// call's arguments must be cut (as valid JSON) for the next request.
	big := strings.Repeat("x", 60<<10)
	args, _ := json.Marshal(map[string]string{"path": "big.txt", "content": big})
	c, srv := scriptedClient(t, `
chunk: 4096
turns:
  - tool_calls:
      - {name: write_file, arguments: '`+string(args)+`'}
  - tool_calls:
      - {name: read_file, arguments: {path: big.txt}}
  - expect: {last_contains: "stored as artifact a1"}
    text: ok
`)
	ws := newMemWorkspace(nil)
	a := newTestAgent(t, c, ws, nil)
	res, err := a.Run(t.Context(), "go")
	if err != nil {
		t.Fatalf("%v (%q)", err, srv.Mismatches())
	}
	noMismatches(t, srv)
	if len(ws.files["big.txt"]) != len(big) || !res.ToolCalls[1].Truncated {
		t.Fatalf("res = %+v", res)
	}
}

func TestScriptedCancelMidStream(t *testing.T) {
	c, _ := scriptedClient(t, `
turns:
  - text: "thinking very slowly about this"
    stall: 30s
`)
	ctx, cancel := context.WithCancel(t.Context())
	rec := event.SinkFunc(func(e event.Event) {
		if e.Kind == event.TextDelta {
			cancel() // Ctrl-C once output has started
		}
	})
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.Sink = rec })
	start := time.Now()
	res, err := a.Run(ctx, "go")
	if !errors.Is(err, context.Canceled) || res.StopReason != StopCancelled {
		t.Fatalf("err = %v, res = %+v", err, res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %s", d)
	}
}
