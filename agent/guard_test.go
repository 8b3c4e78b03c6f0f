package agent

import (
	"strings"
	"testing"

	"github.com/localagent/agent/agent/llm"
)

func TestLoopGuard(t *testing.T) {
	type step struct {
		calls  []string // signatures
		failed []bool   // nil: all succeed
		want   string   // "", "stop-before", "redirect", "stop-after"
	}
	ok := func(sigs ...string) step { return step{calls: sigs} }
	fail := func(sigs ...string) step {
		f := make([]bool, len(sigs))
		for i := range f {
			f[i] = true
		}
		return step{calls: sigs, failed: f}
	}
	with := func(s step, want string) step { s.want = want; return s }
	tests := []struct {
		name  string
		steps []step
	}{
		{"different calls never stop", []step{ok("a"), ok("b"), ok("a"), ok("b"), ok("a"), ok("b")}},
		{"same call twice is fine", []step{ok("a"), ok("a"), ok("b")}},
		{"same call 3 times in a row stops before the third runs", []step{ok("a"), ok("a"), with(ok("a"), "stop-before")}},
		{"same sequence of several calls 3 times stops", []step{ok("a", "b"), ok("a", "b"), with(ok("a", "b"), "stop-before")}},
		{"a different call in between resets the count", []step{ok("a"), ok("a"), ok("b"), ok("a"), ok("a"), with(ok("a"), "stop-before")}},
		{"same order matters", []step{ok("a", "b"), ok("b", "a"), ok("a", "b"), ok("b", "a")}},
		{"same failing call: redirect at 3, stop at 4", []step{
			fail("x"), fail("x"), with(fail("x"), "redirect"), with(fail("x"), "stop-after")}},
		{"failures need not be consecutive", []step{
			fail("x"), ok("r"), fail("x"), ok("s"), with(fail("x"), "redirect"), ok("t"), with(fail("x"), "stop-after")}},
		{"different failing calls are counted apart", []step{
			fail("x"), fail("y"), fail("x"), fail("y"), with(fail("x"), "redirect"), with(fail("y"), "redirect")}},
		{"one redirect per call", []step{
			fail("x"), fail("x"), with(fail("x"), "redirect"), ok("fix"), with(fail("x"), "stop-after")}},
		{"a call that failed then succeeds only counts failures", []step{
			fail("x"), ok("x"), ok("y"), fail("x"), ok("z"), with(fail("x"), "redirect")}},
		{"a call that failed, succeeded and is sent again is still a loop", []step{
			fail("x"), ok("x"), with(ok("x"), "stop-before")}},
		{"mixed reply repeated 3 times stops before", []step{
			{calls: []string{"a", "x"}, failed: []bool{false, true}},
			{calls: []string{"a", "x"}, failed: []bool{false, true}},
			with(step{calls: []string{"a", "x"}}, "stop-before")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newLoopGuard()
			for i, s := range tt.steps {
				got := ""
				if v := g.before(s.calls); v.stop {
					got = "stop-before"
				} else {
					failed := s.failed
					if failed == nil {
						failed = make([]bool, len(s.calls))
					}
					v := g.after(s.calls, failed)
					switch {
					case v.stop:
						got = "stop-after"
					case v.redirect != "":
						got = "redirect"
					}
				}
				if got != s.want {
					t.Fatalf("step %d (%v): got %q, want %q", i+1, s.calls, got, s.want)
				}
			}
		})
	}
}

func TestCallSignaturesIgnoreFormatting(t *testing.T) {
	a := callSignatures([]llm.ToolCall{{Function: llm.FunctionCall{Name: "grep", Arguments: `{"pattern":"x", "path":"."}`}}})
	b := callSignatures([]llm.ToolCall{{Function: llm.FunctionCall{Name: "grep", Arguments: "{\n \"path\": \".\",\"pattern\":\"x\"}"}}})
	if a[0] != b[0] {
		t.Fatalf("%q != %q", a[0], b[0])
	}
}

// The loop stops a doom loop with a clear reason and answers every call.
func TestRunStopsDoomLoop(t *testing.T) {
	same := calls("read_file", `{"path":"a"}`)
	c := &fakeClient{replies: []replyFn{same, same, same, text("unreachable")}}
	ws := newMemWorkspace(map[string]string{"a": "x"})
	a := newTestAgent(t, c, ws, nil)
	res, err := a.Run(t.Context(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopDoomLoop || !strings.Contains(res.Text, "3 times in a row") || len(res.ToolCalls) != 2 {
		t.Fatalf("res = %+v", res)
	}
	// The third call was answered "not run" so the conversation stays valid.
	last := a.Messages()[len(a.Messages())-1]
	if last.Role != llm.RoleTool || !strings.HasPrefix(last.Content, "not run") {
		t.Fatalf("last message = %+v", last)
	}
}

func TestRunRedirectsThenStopsRepeatedFailure(t *testing.T) {
	bad := calls("edit_file", `{"path":"a","old_string":"nope","new_string":"y"}`)
	c := &fakeClient{replies: []replyFn{bad, bad, bad, bad, text("unreachable")}}
	a := newTestAgent(t, c, newMemWorkspace(map[string]string{"a": "x"}), nil)
	res, err := a.Run(t.Context(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopRepeatedFailure || res.Iterations != 4 {
		t.Fatalf("res = %+v", res)
	}
	redirects := 0
	for _, m := range c.requests()[3].Messages {
		if m.Role == llm.RoleUser && strings.Contains(m.Content, "failed 3 times") {
			redirects++
		}
	}
	if redirects != 1 {
		t.Fatalf("%d redirect messages before the 4th request", redirects)
	}
}
