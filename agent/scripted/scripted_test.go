package scripted

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func post(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func chat(stream bool, msgs ...map[string]any) map[string]any {
	return map[string]any{"model": "x", "stream": stream, "messages": msgs}
}

func msg(role, content string) map[string]any {
	return map[string]any{"role": role, "content": content}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, has string }{
		{"", "empty"},
		{"turns: [{tool_calls: [{arguments: {}}]}]", "no name"},
		{"turns: [{error: {status: 200}}]", "not an HTTP error status"},
		{"turns: [{txt: hello}]", "txt"},
		{"turns: [{delay: -1s}]", "negative"},
		{"slots: -1", "negative"},
		{"turns: [{stall: soon}]", "soon"},
	}
	for _, tt := range tests {
		if _, err := Parse([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.has) {
			t.Errorf("Parse(%q) = %v, want error with %q", tt.in, err, tt.has)
		}
	}
}

func TestLoadJSONAndYAML(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "s.json")
	if err := os.WriteFile(js, []byte(`{"turns":[{"text":"hi","delay":"10ms","tool_calls":[{"name":"bash","arguments":{"command":"ls"}}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(js)
	if err != nil {
		t.Fatal(err)
	}
	if s.Turns[0].Delay != 10*time.Millisecond || s.Turns[0].ToolCalls[0].Name != "bash" {
		t.Errorf("%+v", s)
	}
	if a, _ := s.Turns[0].ToolCalls[0].argumentsJSON(); a != `{"command":"ls"}` {
		t.Errorf("arguments %s", a)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read script") {
		t.Errorf("missing: %v", err)
	}
}

func TestNonStreamingReply(t *testing.T) {
	s, err := Parse([]byte(`
turns:
  - text: hello
    reasoning: hmm
    tool_calls: [{name: bash, arguments: '{"command": "ls"}', id: my_id}]
`))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(s))
	defer srv.Close()
	resp, body := post(t, srv.URL, chat(false, msg("user", "hi")))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				Reasoning string `json:"reasoning_content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	m := out.Choices[0].Message
	if out.Model != "scripted" || m.Content != "hello" || m.Reasoning != "hmm" || m.ToolCalls[0].ID != "my_id" ||
		m.ToolCalls[0].Function.Arguments != `{"command": "ls"}` || out.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("%s", body)
	}
}

func TestStreamShape(t *testing.T) {
	s, _ := Parse([]byte(`
chunk: 2
turns:
  - text: "héllo"
    tool_calls: [{name: read_file, arguments: {path: a}}]
`))
	srv := httptest.NewServer(NewHandler(s))
	defer srv.Close()
	resp, body := post(t, srv.URL, chat(true, msg("user", "hi")))
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var datas []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			datas = append(datas, d)
		}
	}
	if datas[len(datas)-1] != "[DONE]" {
		t.Errorf("last event %q", datas[len(datas)-1])
	}
	// role, 3 text chunks (2 runes each), call header, 3 argument chunks
	// (4 runes each), final, [DONE].
	if len(datas) != 1+3+1+3+1+1 {
		t.Errorf("%d events:\n%s", len(datas), body)
	}
	if !strings.Contains(datas[len(datas)-2], `"finish_reason":"tool_calls"`) || !strings.Contains(datas[len(datas)-2], `"usage"`) {
		t.Errorf("final chunk %s", datas[len(datas)-2])
	}
}

func TestExpectations(t *testing.T) {
	s, _ := Parse([]byte(`
turns:
  - expect: {last_role: tool, tool_result_contains: "package main", tools: [read_file], system_contains: "coding agent"}
    text: ok
  - expect: {no_tools: true, last_contains: "again", contains: "first"}
    text: ok
`))
	h := NewHandler(s)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, body := post(t, srv.URL, chat(false, msg("user", "first")))
	if resp.StatusCode != 400 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	for _, want := range []string{"turn 1", `last message role is "user", want "tool"`, `"package main"`, `tool "read_file" is not offered`, "no system message"} {
		if !strings.Contains(e.Error.Message, want) {
			t.Errorf("mismatch message lacks %q: %s", want, e.Error.Message)
		}
	}
	if len(h.Mismatches()) != 1 {
		t.Errorf("mismatches %v", h.Mismatches())
	}
	resp, body = post(t, srv.URL, chat(false, msg("user", "first"), msg("assistant", ""), msg("user", "again")))
	if resp.StatusCode != 200 {
		t.Fatalf("turn 2: %d %s", resp.StatusCode, body)
	}
}

func TestScriptEndAndFinal(t *testing.T) {
	s, _ := Parse([]byte(`turns: [{text: one}]`))
	srv := httptest.NewServer(NewHandler(s))
	defer srv.Close()
	post(t, srv.URL, chat(false, msg("user", "a")))
	resp, body := post(t, srv.URL, chat(false, msg("user", "b")))
	if resp.StatusCode != 500 || !strings.Contains(string(body), "the script has ended (1 turns); request 2 has no answer") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	s, _ = Parse([]byte(`{turns: [], final: {text: "nothing more to do"}}`))
	srv2 := httptest.NewServer(NewHandler(s))
	defer srv2.Close()
	for range 2 {
		if resp, body := post(t, srv2.URL, chat(false, msg("user", "a"))); resp.StatusCode != 200 || !strings.Contains(string(body), "nothing more to do") {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	}
}

func TestConcurrentRequestsTakeDistinctTurns(t *testing.T) {
	var turns []string
	for i := range 20 {
		turns = append(turns, `{text: "t`+string(rune('a'+i))+`"}`)
	}
	s, err := Parse([]byte("turns: [" + strings.Join(turns, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") {
		t.Errorf("url %s", srv.URL())
	}
	var wg sync.WaitGroup
	seen := sync.Map{}
	for range 20 {
		wg.Go(func() {
			_, body := post(t, srv.URL(), chat(true, msg("user", "x")))
			seen.Store(string(body), true)
		})
	}
	wg.Wait()
	n := 0
	seen.Range(func(any, any) bool { n++; return true })
	if n != 20 || srv.Remaining() != 0 || len(srv.ChatRequests()) != 20 {
		t.Errorf("distinct replies %d, remaining %d", n, srv.Remaining())
	}
}

func TestStartStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := Start(ctx, &Script{Turns: []Turn{{Text: "x", Stall: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(srv.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true,"messages":[]}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	// Cancel only once the reply is stalling: cancelled earlier, the
	// request would be refused and the test would prove nothing.
	for len(srv.ChatRequests()) == 0 {
		select {
		case <-done:
			t.Fatal("the request ended before it reached the server")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a stalled reply outlived the server")
	}
	if _, err := http.Get(srv.URL() + "/health"); err == nil {
		t.Error("server still answers after its context ended")
	}
}

func TestOtherEndpoints(t *testing.T) {
	h := NewHandler(&Script{Model: "m", Slots: 4, NCtx: 1024})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for path, want := range map[string]string{
		"/health":    `"status":"ok"`,
		"/props":     `"total_slots":4`,
		"/v1/models": `"id":"scripted/m"`,
		"/nope":      "no such endpoint",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: %s", path, b)
		}
	}
	if len(h.Requests()) != 4 || len(h.ChatRequests()) != 0 {
		t.Errorf("recorded %d", len(h.Requests()))
	}
}
