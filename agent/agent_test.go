package agent

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
)

func TestRunReadEditBash(t *testing.T) {
	ws := newMemWorkspace(map[string]string{"main.go": "package main\n\nfunc f() int { return 1 }\n", "AGENTS.md": "Use tabs.\n"})
	c := &fakeClient{replies: []replyFn{
		calls("read_file", `{"path":"main.go"}`),
		calls("edit_file", `{"path":"main.go","old_string":"return 1","new_string":"return 2"}`),
		calls("bash", `{"command":"go test ./..."}`),
		text("Changed f to return 2; tests pass."),
	}}
	rec := &event.Recorder{}
	a := newTestAgent(t, c, ws, func(o *Options) {
		o.Sink = rec
		o.Env.Branch = "agent/x"
		o.Env.Offline = true
		o.ContextTokens = 32768 // room for every tool's definition
	})
	res, err := a.Run(context.Background(), "make f return 2")
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopDone || res.Text != "Changed f to return 2; tests pass." || res.Iterations != 4 {
		t.Fatalf("result = %+v", res)
	}
	if got := ws.files["main.go"]; !strings.Contains(got, "return 2") {
		t.Fatalf("main.go = %q", got)
	}
	if len(res.ToolCalls) != 3 || res.ToolCalls[2].Name != "bash" || *res.ToolCalls[2].ExitCode != 0 {
		t.Fatalf("tool calls = %+v", res.ToolCalls)
	}
	sys := c.requests()[0].Messages[0].Content
	for _, want := range []string{"Use tabs.", "agent/x", "offline", "read_file:"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %q", want)
		}
	}
	if n := len(c.requests()[0].Tools); n != 19 {
		t.Errorf("offered %d tools, want 19", n)
	}
	// The transcript holds every message, in order, and loads back.
	h, msgs, err := session.Load(res.SessionPath)
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != res.SessionID || h.Branch != "agent/x" {
		t.Errorf("header = %+v", h)
	}
	roles := ""
	for _, m := range msgs {
		roles += string(m.Role[0])
	}
	if roles != "suatatata" {
		t.Errorf("transcript roles = %s", roles)
	}
	var kinds []event.Kind
	for _, e := range rec.Events() {
		if e.Kind == event.ToolFinished || e.Kind == event.Done {
			kinds = append(kinds, e.Kind)
		}
	}
	if len(kinds) != 4 || kinds[3] != event.Done {
		t.Errorf("events = %v", kinds)
	}
}

func TestBadModelInput(t *testing.T) {
	ws := newMemWorkspace(map[string]string{"a.txt": "hi\n"})
	c := &fakeClient{replies: []replyFn{
		calls("read_file", `{"path": "a.txt"`, "frobnicate", `{}`, "read_file", `{"offset":"x"}`, "read_file", `"{\"path\":\"a.txt\"}"`),
		text("done"),
	}}
	// Native mode: in auto mode a missing required argument would switch
	// to text tool calls instead (tested separately).
	a := newTestAgent(t, c, ws, func(o *Options) { o.ToolMode = ToolModeNative })
	res, err := a.Run(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopDone {
		t.Fatalf("stop = %s", res.StopReason)
	}
	msgs := c.requests()[1].Messages
	if len(msgs) < 6 {
		t.Fatalf("messages = %+v", msgs)
	}
	tools := msgs[len(msgs)-4:]
	want := []string{"not valid JSON", `unknown tool "frobnicate"`, "missing property 'path'", "hi"}
	for i, w := range want {
		if !strings.Contains(tools[i].Content, w) {
			t.Errorf("result %d = %q, want it to mention %q", i, tools[i].Content, w)
		}
	}
	if !res.ToolCalls[0].IsError || !res.ToolCalls[1].IsError || res.ToolCalls[3].IsError {
		t.Errorf("records = %+v", res.ToolCalls)
	}
	// Only the valid (double-encoded) call reached the workspace, after
	// the four probes for project instructions.
	if got := ws.calls(); len(got) != 5 {
		t.Errorf("workspace calls = %q", got)
	}
}

func TestHugeToolOutputBecomesArtifact(t *testing.T) {
	big := strings.Repeat("0123456789abcdef\n", 50<<20/17)
	ws := newMemWorkspace(nil)
	ws.hook = func(tool string, _ json.RawMessage) (ToolResult, error, bool) {
		if tool == ToolBash {
			return ToolResult{Output: big}, nil, true
		}
		return ToolResult{}, nil, false
	}
	c := &fakeClient{replies: []replyFn{
		calls("bash", `{"command":"cat big"}`),
		calls("read_artifact", `{"id":"a1","offset":1000,"limit":3}`),
		text("ok"),
	}}
	a := newTestAgent(t, c, ws, nil)
	res, err := a.Run(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	msgs := c.requests()[1].Messages
	got := msgs[len(msgs)-1].Content
	if len(got) > 10<<10 || !strings.Contains(got, "artifact a1") || !res.ToolCalls[0].Truncated {
		t.Fatalf("model saw %d bytes: %.200q", len(got), got)
	}
	msgs = c.requests()[2].Messages
	page := msgs[len(msgs)-1].Content
	if strings.Count(page, "0123456789abcdef") != 3 || !strings.Contains(page, "offset 1003") {
		t.Fatalf("page = %q", page)
	}
	_, tm, err := session.Load(res.SessionPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range tm {
		if len(m.Content) > 64<<10 {
			t.Fatalf("transcript holds a %d-byte message", len(m.Content))
		}
	}
}

func TestEndlessStream(t *testing.T) {
	c := &fakeClient{replies: []replyFn{
		calls("list_dir", `{}`),
		func(ctx context.Context, _ llm.Request, d func(llm.Delta)) (llm.Response, error) {
			// A reply that never ends: only the agent's cap stops it.
			for ctx.Err() == nil {
				d(llm.Delta{Kind: llm.DeltaText, Text: "la la la "})
			}
			return llm.Response{}, ctx.Err()
		},
	}}
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.MaxReplyBytes = 64 << 10 })
	res, err := a.Run(context.Background(), "sing")
	if !errors.Is(err, ErrReplyTooLong) || res.StopReason != StopError {
		t.Fatalf("err = %v, res = %+v", err, res)
	}
	_, msgs, lerr := session.Load(res.SessionPath)
	if lerr != nil || len(msgs) != 4 { // system, user, assistant call, tool result
		t.Fatalf("transcript: %v, %d messages", lerr, len(msgs))
	}
}

// In a small window the optional tools are left out before the core tools
// lose their full descriptions.
func TestSmallWindowDropsOptionalTools(t *testing.T) {
	for _, tt := range []struct {
		window   int
		git      bool
		lean     bool
		readFile bool
	}{
		{32768, true, false, true},
		{8192, false, false, true},
		{2048, false, true, true},
	} {
		a := newTestAgent(t, &fakeClient{}, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = tt.window })
		names := strings.Join(a.runner.names(), ",")
		if strings.Contains(names, "git_diff") != tt.git || a.lean != tt.lean || strings.Contains(names, "read_file") != tt.readFile {
			t.Errorf("window %d: tools %s, lean %v", tt.window, names, a.lean)
		}
	}
}

// ask_user is kept in a small window when there is a user to ask (a
// terminal); without one it goes with the other optional tools (control).
func TestSmallWindowKeepsAskUserWithAUser(t *testing.T) {
	for _, tt := range []struct {
		user bool
		want bool
	}{{true, true}, {false, false}} {
		a := newTestAgent(t, &fakeClient{}, newMemWorkspace(nil), func(o *Options) {
			o.ContextTokens = 8192
			if tt.user {
				o.User = noAnswerUser{}
			}
		})
		names := strings.Join(a.runner.names(), ",")
		if strings.Contains(names, "git_diff") || strings.Contains(names, ToolAskUser) != tt.want {
			t.Errorf("user %v: tools %s", tt.user, names)
		}
	}
}

type noAnswerUser struct{}

func (noAnswerUser) ReviewPlan(context.Context, string) (PlanReview, error) {
	return PlanReview{}, ErrUserCancelled
}
func (noAnswerUser) Ask(context.Context, string, []string) (string, error) {
	return "", ErrUserCancelled
}

func TestAgentTypeAllowsServer(t *testing.T) {
	code := BuiltinAgentTypes()["code"]
	explore := BuiltinAgentTypes()["explore"]
	if !code.AllowsServer("notes") || explore.AllowsServer("notes") {
		t.Errorf("code allows notes: %v, explore allows notes: %v", code.AllowsServer("notes"), explore.AllowsServer("notes"))
	}
	one := AgentType{Tools: []string{"mcp__notes__write_note"}}
	if !one.AllowsServer("notes") || one.AllowsServer("other") {
		t.Error("a single mcp tool name does not select its server only")
	}
	if !(AgentType{}).AllowsServer("x") {
		t.Error("a type without an allow-list allows every server")
	}
}

// A window too small for every tool says so at the start, naming what was
// left out and the window that would offer it; that window does.
func TestSmallWindowToolsNotice(t *testing.T) {
	notice := func(window int) (string, string) {
		rec := &event.Recorder{}
		a := newTestAgent(t, &fakeClient{}, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = window; o.Sink = rec })
		if err := a.start(t.Context()); err != nil {
			t.Fatal(err)
		}
		var text string
		for _, e := range rec.Events() {
			if e.Kind == event.Notice && strings.Contains(e.Text, "left out") {
				text = e.Text
			}
		}
		return text, strings.Join(a.runner.names(), ",")
	}
	text, _ := notice(8192)
	m := regexp.MustCompile(`left out (.*)\. .* fits a window of (\d+) tokens`).FindStringSubmatch(text)
	if m == nil || !strings.Contains(m[1], "git_diff") || strings.Contains(m[1], "read_file") {
		t.Fatalf("notice for 8192 tokens: %q", text)
	}
	need, _ := strconv.Atoi(m[2])
	if need <= 8192 {
		t.Fatalf("needed window %d is not larger than the one that was too small", need)
	}
	text, names := notice(need)
	if text != "" || !strings.Contains(names, "git_diff") {
		t.Errorf("window %d: notice %q, tools %s", need, text, names)
	}
	if text, _ := notice(need - 64); text == "" {
		t.Errorf("window %d: no notice, yet %d was said to be needed", need-64, need)
	}
}
