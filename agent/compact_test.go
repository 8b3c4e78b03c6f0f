package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
)

func TestCompactionThresholds(t *testing.T) {
	tests := []struct {
		used, window int
		want         compactAction
	}{
		{0, 8192, compactNone},
		{5000, 8192, compactNone},
		{5324, 8192, compactNone},       // 64.99%
		{5325, 8192, compactCheckpoint}, // 65.0%
		{6553, 8192, compactCheckpoint}, // 79.99%
		{6554, 8192, compactHard},       // 80.0%
		{9000, 8192, compactHard},
		{1300, 2000, compactCheckpoint},
		{1600, 2000, compactHard},
		{100, 0, compactNone}, // unknown window: never compact
	}
	for _, tt := range tests {
		if got := compactionFor(tt.used, tt.window); got != tt.want {
			t.Errorf("compactionFor(%d, %d) = %s, want %s", tt.used, tt.window, got, tt.want)
		}
	}
}

func TestTokenCounterUsesReportedUsage(t *testing.T) {
	h := []llm.Message{{Role: llm.RoleSystem, Content: strings.Repeat("x", 400)}, {Role: llm.RoleUser, Content: "hi"}}
	var tc tokenCounter
	if got := tc.estimate(h, 10); got != 100+4+0+4+10 {
		t.Errorf("estimate = %d", got)
	}
	tc.anchor(2, 500, 0)
	h = append(h, llm.Message{Role: llm.RoleTool, Content: strings.Repeat("y", 40)})
	if got := tc.estimate(h, 10); got != 500+10+4 {
		t.Errorf("anchored estimate = %d", got)
	}
}

// A server that counts more tokens than the estimate (2,332 against 1,502
// measured with llama-server on a real prompt) calibrates what follows:
// compaction fires where the server's count crosses the threshold, not a
// third later. The control is the same history without a reported count.
func TestTokenCounterCalibratesEstimate(t *testing.T) {
	const window = 10000
	h := conversation(8, 1900)
	h[0].Content = strings.Repeat("s", 6000) // a system prompt of 1,500 estimated tokens
	var raw tokenCounter
	est := raw.estimate(h, 0)
	if compactionFor(est, window) != compactNone {
		t.Fatalf("control: %d estimated tokens of %d already compact", est, window)
	}
	var tc tokenCounter
	sys := estimateMessages(h[:2])
	tc.anchor(2, sys*2332/1502, sys)
	if got, want := tc.estimate(h, 0), sys*2332/1502+est*2332/1502-sys*2332/1502; got < want-2 || got > want+12 {
		t.Errorf("anchored, calibrated estimate = %d, want about %d", got, want)
	}
	tc.reset() // a compaction moved the anchor; the scale stays
	used := tc.estimate(h, 0)
	if used*1502 < est*2332*99/100 || compactionFor(used, window) == compactNone {
		t.Fatalf("calibrated estimate %d (raw %d) does not compact a window of %d", used, est, window)
	}
	if got := tc.unscaled(tc.scaled(est)); got < est-1 || got > est+1 {
		t.Errorf("unscaled(scaled(%d)) = %d", est, got)
	}
}

// conversation builds system, user, then n turns of assistant call + tool
// result with outputs of size bytes.
func conversation(n, size int) []llm.Message {
	h := []llm.Message{{Role: llm.RoleSystem, Content: "sys"}, {Role: llm.RoleUser, Content: "the task"}}
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		h = append(h,
			llm.Message{Role: llm.RoleAssistant, Content: "step", ToolCalls: []llm.ToolCall{{ID: id, Type: "function",
				Function: llm.FunctionCall{Name: "read_file", Arguments: `{"path":"f"}`}}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: id, Name: "read_file", Content: strings.Repeat("z", size)})
	}
	return h
}

// pairsIntact checks that every tool message follows its assistant call.
func pairsIntact(t *testing.T, h []llm.Message) {
	t.Helper()
	open := map[string]bool{}
	for i, m := range h {
		switch m.Role {
		case llm.RoleAssistant:
			open = map[string]bool{}
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		case llm.RoleTool:
			if !open[m.ToolCallID] {
				t.Fatalf("message %d: tool result %s without its call", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		default:
			if len(open) > 0 {
				t.Fatalf("message %d: calls %v left without results", i, open)
			}
		}
	}
}

func TestHardCompaction(t *testing.T) {
	a := newTestAgent(t, &fakeClient{}, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = 4000 })
	a.history = conversation(20, 2000) // ~10k tokens
	a.runner.todos = []todoItem{{Content: "fix the bug", Status: "in_progress"}}
	a.hardCompact(2000, false)
	h := a.history
	if h[0].Role != llm.RoleSystem || h[1].Content != "the task" {
		t.Fatalf("head not kept: %+v", h[:2])
	}
	if got := estimateMessages(h) + a.extraTokens(); got > 2000 {
		t.Fatalf("still %d tokens", got)
	}
	if !strings.Contains(h[2].Content, "earlier messages were removed") || !strings.Contains(h[2].Content, "[~] fix the bug") {
		t.Fatalf("no note about dropped turns: %+v", h[2])
	}
	last := h[len(h)-1]
	if last.ToolCallID != "c19" {
		t.Fatalf("last turn not kept: %+v", last)
	}
	pairsIntact(t, h)
}

func TestHardCompactionCutsOldOutputsFirst(t *testing.T) {
	a := newTestAgent(t, &fakeClient{}, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = 8000 })
	a.history = conversation(4, 8000) // ~8k tokens, few turns
	// The target counts the tool definitions (~1.7k tokens) as well.
	a.hardCompact(4900, false)
	if len(a.history) != 10 { // nothing dropped
		t.Fatalf("%d messages left", len(a.history))
	}
	if n := len(a.history[3].Content); n > 2*oldToolOutput {
		t.Fatalf("old output kept %d bytes", n)
	}
	pairsIntact(t, a.history)
}

func TestCheckpointSummaryAt65Percent(t *testing.T) {
	var summaryReq llm.Request
	c := &fakeClient{replies: []replyFn{
		func(_ context.Context, req llm.Request, _ func(llm.Delta)) (llm.Response, error) {
			summaryReq = req
			return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "## Goal\nthe task\n## Done so far\nread f 10 times"}}, nil
		},
		text("done"),
	}}
	ws := newMemWorkspace(nil)
	a := newTestAgent(t, c, ws, func(o *Options) { o.ContextTokens = 8000; o.ToolMode = ToolModeText })
	if err := a.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sys := a.history[0]
	a.history = conversation(10, 1500)
	a.history[0] = sys
	used := a.tokens.estimate(a.history, a.extraTokens())
	if compactionFor(used, 8000) != compactCheckpoint {
		t.Fatalf("setup: %d tokens is not in the checkpoint band", used)
	}
	res, err := a.Run(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "done" || len(c.requests()) != 2 {
		t.Fatalf("res = %+v", res)
	}
	if len(summaryReq.Tools) != 0 || !strings.Contains(summaryReq.Messages[1].Content, "## Next steps") {
		t.Fatalf("summary request = %+v", summaryReq)
	}
	sent := c.requests()[1].Messages
	if sent[0].Role != llm.RoleSystem || !strings.Contains(sent[1].Content, "the task") ||
		!strings.Contains(sent[1].Content, "read f 10 times") {
		t.Fatalf("after checkpoint the request starts %+v", sent[:2])
	}
	if got := estimateMessages(sent); got > 8000*checkpointPct/100 {
		t.Fatalf("request still %d tokens", got)
	}
	pairsIntact(t, a.history)
	// The checkpoint is in the transcript and a resumed session restores
	// the compacted context, not the whole history.
	_, msgs, err := session.Load(res.SessionPath)
	if err != nil {
		t.Fatal(err)
	}
	restored := restoreHistory(append(conversation(10, 1500)[1:], msgs[1:]...))
	if restored[0].Content != "the task" || !strings.HasPrefix(restored[1].Name, "checkpoint-") {
		t.Fatalf("restored head = %+v", restored[:2])
	}
	pairsIntact(t, append([]llm.Message{sys}, restored...))
}

func TestContextFullIsAClearError(t *testing.T) {
	c := &fakeClient{replies: []replyFn{text("never")}}
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = 600 })
	res, err := a.Run(t.Context(), strings.Repeat("a very long prompt ", 1000))
	if !errors.Is(err, ErrContextFull) || res.StopReason != StopError || len(c.requests()) != 0 {
		t.Fatalf("err = %v, res = %+v, %d requests", err, res, len(c.requests()))
	}
	if !strings.Contains(err.Error(), "--ctx") {
		t.Errorf("error does not say how to fix it: %v", err)
	}
}

func TestServerContextErrorCompactsAndRetries(t *testing.T) {
	c := &fakeClient{replies: []replyFn{
		failWith(&llm.Error{Kind: llm.KindContextExceeded, StatusCode: 400, Message: "context size exceeded"}),
		text("fine"),
	}}
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = 8000 })
	if err := a.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sys := a.history[0]
	a.history = conversation(8, 2000)
	a.history[0] = sys
	res, err := a.Run(t.Context(), "")
	if err != nil || res.Text != "fine" {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	if n := estimateMessages(c.requests()[1].Messages); n > 8000*45/100+a.toolsTok {
		t.Fatalf("retry still %d tokens", n)
	}
}

func TestShrinkArgsKeepsValidJSON(t *testing.T) {
	big := `{"path":"a.go","content":"` + strings.Repeat("é", 5000) + `","edits":[` + strings.Repeat(`{"old_string":"x","new_string":"y"},`, 100) + `{}]}`
	got := shrinkArgs(big, 256)
	var v map[string]any
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatalf("not JSON: %v: %.200s", err, got)
	}
	if v["path"] != "a.go" || len(got) > 1024 {
		t.Fatalf("shrunk to %d bytes: %.300s", len(got), got)
	}
	if shrinkArgs(`{"path":"x"}`, 256) != `{"path":"x"}` {
		t.Fatal("short arguments changed")
	}
}

// A long run in small windows: every request must fit and keep tool calls
// paired with their results, through checkpoints and hard cuts; the newest
// results reach the model whole when the window can hold them.
func TestLongRunStaysInsideTheWindow(t *testing.T) {
	for _, tt := range []struct {
		window        int
		wantSummaries bool
		newestWhole   bool
	}{
		{2048, false, false}, // a llama-server slot of -c 4096 -np 2
		{4096, false, true},  // summaries or not: either is fine
		{8192, true, true},
	} {
		t.Run(fmt.Sprint(tt.window), func(t *testing.T) {
			output := strings.Repeat("some file content\n", 150) // ~2.7 KB
			ws := newMemWorkspace(nil)
			ws.hook = func(_ string, args json.RawMessage) (ToolResult, error, bool) {
				if !strings.Contains(string(args), `"f`) {
					return ToolResult{}, nil, false // AGENTS.md and friends: absent
				}
				return ToolResult{Output: output}, nil, true
			}
			var (
				mu        sync.Mutex
				n         int
				summaries int
				sent      [][]llm.Message
			)
			client := &fakeClient{}
			for range 200 {
				client.replies = append(client.replies, func(_ context.Context, req llm.Request, _ func(llm.Delta)) (llm.Response, error) {
					mu.Lock()
					defer mu.Unlock()
					if req.Messages[0].Content == checkpointSystem {
						summaries++
						return llm.Response{Message: llm.Message{Content: "## Goal\nread files\n## Done so far\nread some"}}, nil
					}
					sent = append(sent, req.Messages)
					n++
					if n > 30 {
						return llm.Response{Message: llm.Message{Content: "all read"}}, nil
					}
					return llm.Response{Message: llm.Message{ToolCalls: []llm.ToolCall{{ID: fmt.Sprint("c", n), Type: "function",
						Function: llm.FunctionCall{Name: "read_file", Arguments: fmt.Sprintf(`{"path":"f%d"}`, n)}}}}}, nil
				})
			}
			a := newTestAgent(t, client, ws, func(o *Options) { o.ContextTokens = tt.window; o.MaxIterations = 100 })
			res, err := a.Run(t.Context(), "read thirty files")
			if err != nil || res.Text != "all read" {
				t.Fatalf("res = %+v, err = %v", res, err)
			}
			if tt.wantSummaries && summaries == 0 {
				t.Errorf("%d checkpoint summaries", summaries)
			}
			for i, msgs := range sent {
				if est := estimateMessages(msgs) + a.toolsTok; est+a.minReply() > tt.window {
					t.Fatalf("request %d: about %d tokens in a %d window", i, est, tt.window)
				}
				if msgs[1].Role != llm.RoleUser || !strings.Contains(msgs[1].Content, "read thirty files") {
					t.Fatalf("request %d lost the task: %+v", i, msgs[1])
				}
				if last := msgs[len(msgs)-1]; i > 0 && tt.newestWhole && last.Content != output {
					t.Fatalf("request %d: the newest result was cut to %d bytes", i, len(last.Content))
				}
				pairsIntact(t, msgs)
			}
		})
	}
}

// countingClient is a server that counts prompt tokens (llama-server's
// /apply-template and /tokenize).
type countingClient struct {
	*fakeClient
	tokens, counts int
}

func (c *countingClient) CountTokens(ctx context.Context, req llm.Request) (int, error) {
	c.counts++
	return c.tokens, nil
}

// The first request is sized by the server's exact count, not the estimate:
// 7,000 counted tokens leave 3,000 of a 10,000 window for the reply. The
// control is the same agent with a server that cannot count.
func TestFirstRequestUsesServerCount(t *testing.T) {
	run := func(c llm.Client) llm.Request {
		a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = 10000; o.MaxReplyTokens = 8000 })
		if _, err := a.Run(t.Context(), "hi"); err != nil {
			t.Fatal(err)
		}
		return c.(interface{ requests() []llm.Request }).requests()[0]
	}
	cc := &countingClient{fakeClient: &fakeClient{replies: []replyFn{text("hello")}}, tokens: 7000}
	if got := run(cc).MaxTokens; got != 3000 || cc.counts != 1 {
		t.Errorf("with a count of 7000: max_tokens %d, counted %d times", got, cc.counts)
	}
	if got := run(&fakeClient{replies: []replyFn{text("hello")}}).MaxTokens; got != 8000 {
		t.Errorf("control, estimated: max_tokens %d", got)
	}
}
