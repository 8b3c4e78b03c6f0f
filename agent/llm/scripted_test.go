package llm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/scripted"
)

func startScript(t *testing.T, yaml string) *scripted.Server {
	t.Helper()
	s, err := scripted.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := scripted.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = srv.Close()
	})
	return srv
}

func newClient(t *testing.T, url string, mod func(*llm.Options)) *llm.HTTPClient {
	t.Helper()
	o := llm.Options{BaseURL: url, RetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	c, err := llm.NewHTTP(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func userReq(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

func TestScriptedConversation(t *testing.T) {
	srv := startScript(t, `
model: demo
chunk: 3
turns:
  - reasoning: "Let me look — ünïcödé 🚀 first."
    text: "I will read the file. 日本語"
    tool_calls:
      - {name: read_file, arguments: {path: "main.go"}}
      - {name: bash, arguments: '{"command": "go test ./... 🚀"}'}
  - expect: {last_role: tool, tool_result_contains: "package main"}
    text: Done.
`)
	c := newClient(t, srv.URL()+"/v1", nil)
	var deltas []llm.Delta
	resp, err := c.Stream(context.Background(), userReq("fix it"), func(d llm.Delta) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "I will read the file. 日本語" || resp.Message.Reasoning != "Let me look — ünïcödé 🚀 first." {
		t.Fatalf("content %q reasoning %q", resp.Message.Content, resp.Message.Reasoning)
	}
	if len(resp.Message.ToolCalls) != 2 || resp.FinishReason != "tool_calls" {
		t.Fatalf("calls %+v finish %q", resp.Message.ToolCalls, resp.FinishReason)
	}
	tc := resp.Message.ToolCalls
	if tc[0].Function.Name != "read_file" || tc[0].Function.Arguments != `{"path":"main.go"}` || tc[0].ID == "" {
		t.Errorf("call 0: %+v", tc[0])
	}
	if tc[1].Function.Name != "bash" || tc[1].Function.Arguments != `{"command": "go test ./... 🚀"}` {
		t.Errorf("call 1: %+v", tc[1])
	}
	if resp.Usage.TotalTokens == 0 || resp.Model != "scripted/demo" {
		t.Errorf("usage %+v model %q", resp.Usage, resp.Model)
	}
	var text strings.Builder
	for _, d := range deltas {
		if d.Kind == llm.DeltaText {
			text.WriteString(d.Text)
		}
	}
	if text.String() != resp.Message.Content {
		t.Errorf("deltas %q != content %q", text.String(), resp.Message.Content)
	}

	msgs := append(userReq("fix it").Messages, resp.Message,
		llm.Message{Role: llm.RoleTool, ToolCallID: tc[0].ID, Content: "package main\n"},
		llm.Message{Role: llm.RoleTool, ToolCallID: tc[1].ID, Content: "ok"})
	resp, err = c.Stream(context.Background(), llm.Request{Messages: msgs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Done." || resp.FinishReason != "stop" {
		t.Fatalf("second reply %+v", resp)
	}
	if m := srv.Mismatches(); len(m) > 0 {
		t.Fatal(m)
	}
	reqs := srv.ChatRequests()
	if len(reqs) != 2 || !reqs[0].Stream || reqs[1].Chat.Messages[2].Role != llm.RoleTool {
		t.Fatalf("recorded %+v", reqs)
	}
	if strings.Contains(string(reqs[1].Body), "reasoning_content") {
		t.Errorf("reasoning was sent back to the server: %s", reqs[1].Body)
	}

	// The script has ended: a clear, non-retriable error.
	_, err = c.Stream(context.Background(), userReq("more"), nil)
	if !errors.Is(err, llm.ErrServer) || !strings.Contains(err.Error(), "script has ended") || llm.IsRetriable(err) {
		t.Fatalf("after the end: %v", err)
	}
}
