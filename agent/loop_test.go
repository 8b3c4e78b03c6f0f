package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
)

func lastOf(req llm.Request) llm.Message { return req.Messages[len(req.Messages)-1] }

func TestInterruptedRunResumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws := newMemWorkspace(map[string]string{"a": "x"})
	started := make(chan struct{})
	ws.hook = func(tool string, args json.RawMessage) (ToolResult, error, bool) {
		if tool == ToolBash && strings.Contains(string(args), "slow") {
			close(started)
			<-ctx.Done() // Ctrl-C while the command runs
			return ToolResult{}, ctx.Err(), true
		}
		return ToolResult{}, nil, false
	}
	c := &fakeClient{replies: []replyFn{
		calls("read_file", `{"path":"a"}`),
		calls("bash", `{"command":"slow build"}`),
	}}
	path := t.TempDir() + "/s.jsonl"
	a := newTestAgent(t, c, ws, func(o *Options) { o.SessionPath = path })
	go func() { <-started; cancel() }()
	res, err := a.Run(ctx, "build it")
	if !errors.Is(err, context.Canceled) || res.StopReason != StopCancelled {
		t.Fatalf("err = %v, res = %+v", err, res)
	}
	_ = a.Close()

	// A fresh agent resumes the transcript and continues where it stopped.
	c2 := &fakeClient{replies: []replyFn{calls("bash", `{"command":"make"}`), text("built")}}
	b := newTestAgent(t, c2, ws, func(o *Options) { o.SessionPath = path; o.Resume = true })
	res, err = b.Run(context.Background(), "")
	if err != nil || res.Text != "built" || b.SessionID() != a.SessionID() {
		t.Fatalf("resumed: %+v, %v", res, err)
	}
	sent := c2.requests()[0].Messages
	var roles []string
	for _, m := range sent {
		roles = append(roles, string(m.Role))
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,tool,assistant,tool" {
		t.Fatalf("resumed context roles = %s", got)
	}
	if !strings.Contains(lastOf(c2.requests()[0]).Content, "interrupted") {
		t.Fatalf("interrupted call answered with %q", lastOf(c2.requests()[0]).Content)
	}
	_, msgs, err := session.Load(path)
	if err != nil || len(msgs) != 10 { // sys,user,a,t,a,t | sys,a,t,a
		t.Fatalf("transcript: %v, %d messages", err, len(msgs))
	}
}

func TestResumeAfterCrashAnswersDanglingCalls(t *testing.T) {
	path := t.TempDir() + "/s.jsonl"
	w, _, err := session.Create(path, session.Header{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []llm.Message{
		{Role: llm.RoleSystem, Content: "old system prompt"},
		{Role: llm.RoleUser, Content: "task"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
			{ID: "x1", Type: "function", Function: llm.FunctionCall{Name: "read_file", Arguments: `{"path":"a"}`}},
			{ID: "x2", Type: "function", Function: llm.FunctionCall{Name: "bash", Arguments: `{"command":"rm -rf build"}`}}}},
		{Role: llm.RoleTool, ToolCallID: "x1", Name: "read_file", Content: "x"},
	} {
		_ = w.Append(m)
	}
	_ = w.Close()
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString(`{"role":"tool","tool_call_id":"x2","con`) // the crash
	_ = f.Close()

	ws := newMemWorkspace(map[string]string{"a": "x"})
	c := &fakeClient{replies: []replyFn{text("ok")}}
	a := newTestAgent(t, c, ws, func(o *Options) { o.SessionPath = path; o.Resume = true })
	if _, err := a.Run(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	sent := c.requests()[0].Messages
	if len(sent) != 5 || sent[4].ToolCallID != "x2" || !strings.Contains(sent[4].Content, "interrupted") {
		t.Fatalf("sent %+v", sent)
	}
	if strings.Contains(sent[0].Content, "old system prompt") {
		t.Fatal("the old system prompt was reused")
	}
	for _, call := range ws.calls() {
		if strings.Contains(call, "rm -rf") {
			t.Fatal("an interrupted call was run again")
		}
	}
}

func TestDowngradeWhenServerRejectsTools(t *testing.T) {
	ws := newMemWorkspace(map[string]string{"a.txt": "hello"})
	c := &fakeClient{replies: []replyFn{
		failWith(&llm.Error{Kind: llm.KindToolsUnsupported, StatusCode: 500, Message: "tools param requires --jinja flag"}),
		text("I'll read it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>"),
		text("It says hello."),
	}}
	rec := &event.Recorder{}
	a := newTestAgent(t, c, ws, func(o *Options) { o.Sink = rec })
	res, err := a.Run(t.Context(), "what is in a.txt?")
	if err != nil || res.Text != "It says hello." {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	reqs := c.requests()
	if len(reqs[0].Tools) == 0 || len(reqs[1].Tools) != 0 || !strings.Contains(reqs[1].Messages[0].Content, "<tool_call>") {
		t.Fatal("second request is not in text mode")
	}
	last := lastOf(reqs[2])
	if last.Role != llm.RoleUser || !strings.Contains(last.Content, `<tool_response name="read_file">`) ||
		!strings.Contains(last.Content, "hello") {
		t.Fatalf("tool result sent as %+v", last)
	}
	if res.ToolCalls[0].Name != "read_file" || res.ToolCalls[0].IsError {
		t.Fatalf("records = %+v", res.ToolCalls)
	}
	for _, m := range reqs[2].Messages {
		if len(m.ToolCalls) > 0 || m.Role == llm.RoleTool {
			t.Fatalf("text-mode request carries native tool fields: %+v", m)
		}
	}
	// A resumed session remembers the switch.
	_ = a.Close()
	c2 := &fakeClient{replies: []replyFn{text("still text")}}
	b := newTestAgent(t, c2, ws, func(o *Options) { o.SessionPath = res.SessionPath; o.Resume = true })
	if _, err := b.Run(t.Context(), "more"); err != nil {
		t.Fatal(err)
	}
	if r := c2.requests()[0]; len(r.Tools) != 0 || !strings.Contains(r.Messages[0].Content, "<tool_call>") {
		t.Fatal("the resumed session went back to native tool calls")
	}
}

func TestDowngradeWhenNativeCallsLackArguments(t *testing.T) {
	c := &fakeClient{replies: []replyFn{
		calls("read_file", `{}`),
		text(`<tool_call>{"name":"read_file","arguments":{"path":"a"}}</tool_call>`),
		text("done"),
	}}
	a := newTestAgent(t, c, newMemWorkspace(map[string]string{"a": "x"}), nil)
	res, err := a.Run(t.Context(), "go")
	if err != nil || res.Text != "done" || len(res.ToolCalls) != 1 || res.ToolCalls[0].IsError {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	// The broken native reply was not kept.
	for _, m := range c.requests()[2].Messages {
		if m.Role == llm.RoleAssistant && strings.Contains(m.Content, "{}") {
			t.Fatalf("broken reply kept: %+v", m)
		}
	}
}

func TestContinuationOfCutToolCall(t *testing.T) {
	c := &fakeClient{replies: []replyFn{
		text("<tool_call>\n{\"name\": \"write_file\", \"argu"),
		text("ments\": {\"path\": \"b\", \"content\": \"new\"}}\n</tool_call>"),
		text("written"),
	}}
	ws := newMemWorkspace(nil)
	a := newTestAgent(t, c, ws, func(o *Options) { o.ToolMode = ToolModeText })
	res, err := a.Run(t.Context(), "write b")
	if err != nil || res.Text != "written" || ws.files["b"] != "new" {
		t.Fatalf("res = %+v, err = %v, files = %v", res, err, ws.files)
	}
	if !strings.Contains(lastOf(c.requests()[1]).Content, "cut off") {
		t.Fatalf("continuation request = %+v", lastOf(c.requests()[1]))
	}
	if res.Iterations != 2 {
		t.Fatalf("iterations = %d", res.Iterations)
	}
}

func TestNudgeOnce(t *testing.T) {
	for _, tt := range []struct {
		reply string
		nudge bool
	}{
		{"Let me look at the main file:", true},
		{"I'll run the tests now...", true},
		{"```bash\ngo test ./...\n```", true},
		{`{"name": "read_file", "arguments": {"path": "x"}`, true},
		{"<tool_call>{broken json</tool_call>", true},
		{"Done: I changed main.go and the tests pass.", false},
		{"", true},
		{"<think>I should read the file.</think>", true},
		{"Let me know if you need anything else.", false},
	} {
		c := &fakeClient{replies: []replyFn{text(tt.reply), text(tt.reply), text("final")}}
		a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.ToolMode = ToolModeNative })
		res, err := a.Run(t.Context(), "go")
		if err != nil {
			t.Fatal(err)
		}
		if got := len(c.requests()) == 2; got != tt.nudge {
			t.Errorf("%q: nudged = %v, want %v (res %+v)", tt.reply, got, tt.nudge, res)
		}
	}
}

func TestHooksRunInTheWorkspace(t *testing.T) {
	ws := newMemWorkspace(nil)
	rec := &event.Recorder{}
	var hookCmds []string
	var mu sync.Mutex
	ws.hook = func(tool string, args json.RawMessage) (ToolResult, error, bool) {
		var a struct{ Command string }
		_ = json.Unmarshal(args, &a)
		if tool != ToolBash || !strings.Contains(a.Command, "AGENT_HOOK=") {
			return ToolResult{}, nil, false
		}
		mu.Lock()
		hookCmds = append(hookCmds, a.Command)
		mu.Unlock()
		one, zero := 1, 0
		switch {
		case strings.Contains(a.Command, "git status"):
			return ToolResult{Output: "On branch agent/x", ExitCode: &zero}, nil, true
		case strings.Contains(a.Command, "check-policy") && strings.Contains(a.Command, "secret"):
			return ToolResult{Output: "writing secrets is not allowed", ExitCode: &one}, nil, true
		}
		// As the sandbox's shell answers a silent command.
		return ToolResult{Output: "(no output)\n", ExitCode: &zero}, nil, true
	}
	c := &fakeClient{replies: []replyFn{
		calls("write_file", `{"path":"secret.txt","content":"x"}`),
		calls("write_file", `{"path":"ok.txt","content":"y"}`),
		text("done"),
	}}
	a := newTestAgent(t, c, ws, func(o *Options) {
		o.Hooks = Hooks{SessionStart: []string{"git status"}, PreTool: []string{"check-policy"}, PostTool: []string{"fmt-files"}}
		o.Sink = rec
	})
	res, err := a.Run(t.Context(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.requests()[0].Messages[0].Content, "On branch agent/x") {
		t.Error("session_start output not in the system prompt")
	}
	if _, ok := ws.files["secret.txt"]; ok || ws.files["ok.txt"] != "y" {
		t.Fatalf("files = %v", ws.files)
	}
	blocked := lastOf(c.requests()[1]).Content
	if !strings.Contains(blocked, "blocked by pre_tool hook (exit 1): writing secrets is not allowed") || !res.ToolCalls[0].IsError {
		t.Fatalf("blocked result = %q", blocked)
	}
	// A quiet hook is not news; one that said something or blocked is
	// (control).
	var notices []string
	for _, e := range rec.Events() {
		if e.Kind == event.Notice && strings.HasPrefix(e.Text, "hook ") {
			notices = append(notices, e.Text)
		}
	}
	if len(notices) != 2 || !strings.Contains(notices[1], "writing secrets") || strings.Contains(strings.Join(notices, ""), "no output") {
		t.Errorf("hook notices = %q, want the session_start and the blocking one", notices)
	}
	// session_start, pre (blocked), pre, post.
	if len(hookCmds) != 4 || !strings.Contains(hookCmds[1], "AGENT_TOOL_NAME='write_file'") ||
		!strings.Contains(hookCmds[3], "AGENT_HOOK='post_tool'") || !strings.Contains(hookCmds[3], "AGENT_TOOL_IS_ERROR='0'") {
		t.Fatalf("hook commands = %q", hookCmds)
	}
}

func TestReadOnlyCallsRunConcurrentlyWritesInOrder(t *testing.T) {
	ws := newMemWorkspace(map[string]string{"a": "1", "b": "2", "c": "3"})
	// The reads of a and b in the first reply: the first to start waits
	// until the other has started too, which it would wait for in vain if
	// they ran one after the other. No sleep decides it.
	var reads atomic.Int32
	bothStarted := make(chan struct{})
	overlapped := true
	ws.hook = func(tool string, args json.RawMessage) (ToolResult, error, bool) {
		if tool != ToolReadFile || (string(args) != `{"path":"a"}` && string(args) != `{"path":"b"}`) {
			return ToolResult{}, nil, false
		}
		switch reads.Add(1) {
		case 1:
			select {
			case <-bothStarted:
			case <-time.After(10 * time.Second):
				overlapped = false
			}
		case 2:
			close(bothStarted)
		}
		return ToolResult{}, nil, false
	}
	c := &fakeClient{replies: []replyFn{
		calls("read_file", `{"path":"a"}`, "read_file", `{"path":"b"}`, "grep", `{"pattern":"x"}`,
			"write_file", `{"path":"a","content":"new"}`, "read_file", `{"path":"a"}`),
		text("done"),
	}}
	a := newTestAgent(t, c, ws, nil)
	res, err := a.Run(t.Context(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if !overlapped {
		t.Error("read-only calls did not overlap")
	}
	msgs := c.requests()[1].Messages
	if got := msgs[len(msgs)-1].Content; !strings.Contains(got, "new") {
		t.Fatalf("read after write saw %q", got)
	}
	for i, m := range msgs[len(msgs)-5:] {
		if m.ToolCallID != res.ToolCalls[i].ID {
			t.Fatalf("results out of order: %d is %s", i, m.ToolCallID)
		}
	}
}

type fakeSpawner struct{ got []SubTask }

func (s *fakeSpawner) Spawn(_ context.Context, tasks []SubTask) ([]SubResult, error) {
	s.got = tasks
	var out []SubResult
	for _, t := range tasks {
		out = append(out, SubResult{Name: t.Name, Summary: "did " + t.Prompt, IsError: t.Name == "bad"})
	}
	return out, nil
}

func TestSpawnAgents(t *testing.T) {
	c := &fakeClient{replies: []replyFn{text("x")}}
	a := newTestAgent(t, c, newMemWorkspace(nil), nil)
	_, _ = a.Run(t.Context(), "go")
	for _, tool := range c.requests()[0].Tools {
		if tool.Function.Name == ToolSpawnAgents {
			t.Fatal("spawn_agents offered without a Spawner")
		}
	}
	sp := &fakeSpawner{}
	c = &fakeClient{replies: []replyFn{
		calls("spawn_agents", `{"tasks":[{"name":"docs","prompt":"write docs"},{"name":"bad","prompt":"fail"}]}`),
		calls("spawn_agents", `{"tasks":[{"name":"x y","prompt":"p"}]}`),
		text("merged"),
	}}
	a = newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.Spawner = sp })
	res, err := a.Run(t.Context(), "go")
	if err != nil || res.Text != "merged" {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	out := lastOf(c.requests()[1]).Content
	if len(sp.got) != 2 || !strings.Contains(out, "## docs (done)\ndid write docs") || !strings.Contains(out, "## bad (failed)") {
		t.Fatalf("spawn result = %q", out)
	}
	if !res.ToolCalls[1].IsError || !strings.Contains(lastOf(c.requests()[2]).Content, "pattern") {
		t.Fatalf("bad task name accepted: %q", lastOf(c.requests()[2]).Content)
	}
}

func TestRunTool(t *testing.T) {
	ws := newMemWorkspace(map[string]string{"a": "hello"})
	ctx := t.Context()
	res, err := RunTool(ctx, ws, "read_file", json.RawMessage(`{"path":"a"}`), ToolOptions{})
	if err != nil || res.IsError || !strings.Contains(res.Output, "hello") {
		t.Fatalf("read: %+v, %v", res, err)
	}
	res, err = RunTool(ctx, ws, "rm_rf", json.RawMessage(`{}`), ToolOptions{})
	if err != nil || !res.IsError || !strings.Contains(res.Output, "Available tools") {
		t.Fatalf("unknown: %+v, %v", res, err)
	}
	res, err = RunTool(ctx, ws, "write_file", json.RawMessage(`{"path":"b"}`), ToolOptions{})
	if err != nil || !res.IsError || !strings.Contains(res.Output, "content") || ws.files["b"] != "" {
		t.Fatalf("invalid: %+v, %v", res, err)
	}
	dir := t.TempDir()
	ws.files["big"] = strings.Repeat("x\n", 20000)
	res, err = RunTool(ctx, ws, "read_file", json.RawMessage(`{"path":"big"}`), ToolOptions{ArtifactDir: dir, ArtifactPrefix: "s-"})
	if err != nil || !res.Truncated || !strings.Contains(res.Output, "artifact a1") {
		t.Fatalf("big: %.300q, %v", res.Output, err)
	}
	if _, err := os.Stat(dir + "/s-a1.txt"); err != nil {
		t.Fatal(err)
	}
	wsErr := errors.New("container gone")
	ws.hook = func(string, json.RawMessage) (ToolResult, error, bool) { return ToolResult{}, wsErr, true }
	if _, err := RunTool(ctx, ws, "bash", json.RawMessage(`{"command":"true"}`), ToolOptions{}); !errors.Is(err, wsErr) {
		t.Fatalf("workspace failure: %v", err)
	}
}

// read_artifact takes its id from the model: an id that walks out of the
// artifact directory must not read a host file.
func TestArtifactIDsCannotEscape(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "secret.txt"), []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// No prefix, as for `agent sandbox tool`: the id alone makes the path.
	s := newArtifactStore(filepath.Join(base, "artifacts"), "")
	attacks := []string{"../secret", "a1/../../secret"}
	// Control: unchecked, these ids name the planted file.
	for _, id := range attacks {
		if b, err := os.ReadFile(s.path(id)); err != nil || string(b) != "host secret\n" {
			t.Fatalf("control: id %q does not reach the planted file (%v)", id, err)
		}
	}
	for _, id := range append(attacks, "", "b1") {
		if out, ok := s.page(id, 1, 10); ok || strings.Contains(out, "host secret") {
			t.Errorf("page(%q) = %q, %v", id, out, ok)
		}
	}
}

// A resumed session numbers artifacts from 1 again: ids an earlier run
// stored are skipped, never overwritten.
func TestArtifactIDsSkipEarlierRuns(t *testing.T) {
	dir := t.TempDir()
	first, err := newArtifactStore(dir, "s-").save("first run")
	if err != nil || first != "a1" {
		t.Fatalf("first save: %q, %v", first, err)
	}
	second, err := newArtifactStore(dir, "s-").save("resumed run")
	if err != nil || second != "a2" {
		t.Fatalf("save after resume: %q, %v", second, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "s-a1.txt")); err != nil || string(b) != "first run" {
		t.Fatalf("a1 = %q, %v", b, err)
	}
}

func TestMaxIterationsPerMessage(t *testing.T) {
	var replies []replyFn
	for i := range 5 {
		replies = append(replies, calls("read_file", `{"path":"f`+string(rune('a'+i))+`"}`))
	}
	replies = append(replies, text("second message answered"))
	c := &fakeClient{replies: replies}
	rec := &event.Recorder{}
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.MaxIterations = 3; o.Sink = rec; o.Name = "sub1"; o.Task = "t1" })
	res, err := a.Run(t.Context(), "go")
	if err != nil || res.StopReason != StopMaxIterations || res.Iterations != 3 || !strings.Contains(res.Text, "max_iterations") {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	// The budget is per user message: the next Run gets a fresh one.
	res, err = a.Run(t.Context(), "continue")
	if err != nil || res.StopReason != StopDone || res.Iterations != 3 {
		t.Fatalf("second run: %+v, %v", res, err)
	}
	for _, e := range rec.Events() {
		if e.Agent != "sub1" || e.Task != "t1" || e.Time.IsZero() {
			t.Fatalf("event not stamped: %+v", e)
		}
	}
}

func TestManyCallsAndDuplicateIDs(t *testing.T) {
	many := func(context.Context, llm.Request, func(llm.Delta)) (llm.Response, error) {
		var tc []llm.ToolCall
		for i := range 40 {
			tc = append(tc, llm.ToolCall{ID: "same", Type: "function",
				Function: llm.FunctionCall{Name: "think", Arguments: `{"thought":"t` + strings.Repeat("x", i+1) + `"}`}})
		}
		return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: tc}}, nil
	}
	c := &fakeClient{replies: []replyFn{many, text("ok")}}
	a := newTestAgent(t, c, newMemWorkspace(nil), nil)
	res, err := a.Run(t.Context(), "go")
	if err != nil || len(res.ToolCalls) != maxCallsPerReply {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	msgs := c.requests()[1].Messages
	ids := map[string]bool{}
	notRun := 0
	for _, m := range msgs {
		if m.Role == llm.RoleTool {
			ids[m.ToolCallID] = true
			if strings.HasPrefix(m.Content, "not run") {
				notRun++
			}
		}
	}
	if len(ids) != 40 || notRun != 8 {
		t.Fatalf("%d distinct ids, %d not run", len(ids), notRun)
	}
	pairsIntact(t, msgs)
}

func TestCutOffNativeCallGetsAHint(t *testing.T) {
	cutReply := func(context.Context, llm.Request, func(llm.Delta)) (llm.Response, error) {
		return llm.Response{FinishReason: "length", Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{
			ID: "c1", Type: "function", Function: llm.FunctionCall{Name: "write_file", Arguments: `{"path":"big.go","content":"package main\n\nfunc`}}}}}, nil
	}
	c := &fakeClient{replies: []replyFn{cutReply, text("ok")}}
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.ContextTokens = 16384 })
	if _, err := a.Run(t.Context(), "write it"); err != nil {
		t.Fatal(err)
	}
	req := c.requests()[1]
	if req.MaxTokens > 8192 || c.requests()[0].MaxTokens < 4096 {
		t.Errorf("max_tokens = %d then %d", c.requests()[0].MaxTokens, req.MaxTokens)
	}
	msgs := req.Messages
	if !strings.Contains(msgs[len(msgs)-2].Content, "not valid JSON") || !strings.Contains(lastOf(req).Content, "output limit") {
		t.Fatalf("last messages = %+v", msgs[len(msgs)-2:])
	}
}

func TestArtifactWithOneHugeLine(t *testing.T) {
	s := newArtifactStore(t.TempDir(), "p-")
	id, err := s.save(strings.Repeat("x", 100<<10) + "\nsecond\n")
	if err != nil {
		t.Fatal(err)
	}
	out, ok := s.page(id, 1, 10)
	if !ok || len(out) > artifactPageBytes+200 || !strings.Contains(out, "offset 2") {
		t.Fatalf("page 1: %d bytes: %.100q", len(out), out[len(out)-100:])
	}
	if out, _ := s.page(id, 2, 10); !strings.HasPrefix(out, "second\n") {
		t.Fatalf("page 2: %q", out)
	}
}

func TestResumeRestoresTodoList(t *testing.T) {
	path := t.TempDir() + "/s.jsonl"
	c := &fakeClient{replies: []replyFn{
		calls("todo_write", `{"todos":[{"content":"write tests","status":"in_progress"}]}`),
		text("paused"),
	}}
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.SessionPath = path })
	if _, err := a.Run(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	b := newTestAgent(t, &fakeClient{}, newMemWorkspace(nil), func(o *Options) { o.SessionPath = path; o.Resume = true })
	if got := b.todoNote(); !strings.Contains(got, "[~] write tests") {
		t.Fatalf("todo note after resume = %q", got)
	}
}

// A model that ends without a single tool call (as one whose chat template
// is not tool-aware, or one that emits garbage, does) gets a diagnosis
// line saying so and what to try. Control: a conversation with a tool call
// ends without it.
func TestNoToolCallDiagnosis(t *testing.T) {
	for _, tt := range []struct {
		name    string
		replies []replyFn
		want    string
	}{
		{"garbage", []replyFn{text("ĠĠ<0x0A> the the the"), text("ĠĠ the")}, "no tool call in 1 reply"},
		{"an action never called", []replyFn{text("I'll run the tests now..."), text("Let me look at the file:")}, "no tool call in 2 replies"},
		{"control: a tool call", []replyFn{calls("read_file", `{"path":"a.txt"}`), text("It says hi.")}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &event.Recorder{}
			c := &fakeClient{replies: tt.replies}
			a := newTestAgent(t, c, newMemWorkspace(map[string]string{"a.txt": "hi"}), func(o *Options) { o.ToolMode = ToolModeNative; o.Sink = rec })
			if _, err := a.Run(t.Context(), "fix the tests"); err != nil {
				t.Fatal(err)
			}
			var got string
			for _, e := range rec.Events() {
				if e.Kind == event.Notice && strings.Contains(e.Text, "no tool call") {
					got = e.Text
				}
			}
			if tt.want == "" {
				if got != "" {
					t.Errorf("a diagnosis after a tool call: %q", got)
				}
				return
			}
			if !strings.Contains(got, tt.want) || !strings.Contains(got, "tool-aware") || !strings.Contains(got, "--jinja") {
				t.Errorf("diagnosis %q, want %q and what to try", got, tt.want)
			}
		})
	}
}
