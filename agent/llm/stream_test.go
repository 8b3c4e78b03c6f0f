package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localagent/agent/agent/llm"
)

// fixtureServer serves an SSE fixture in pieces of `piece` bytes (flushing
// each, so lines and UTF-8 characters split across reads), and answers a
// non-streaming request (the empty-stream probe) with probeStatus/probeBody.
type fixtureServer struct {
	sse         []byte
	piece       int
	probeStatus int
	probeBody   string
	probes      atomic.Int32
}

func (f *fixtureServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if !body.Stream {
		f.probes.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.probeStatus)
		_, _ = w.Write([]byte(f.probeBody))
		return
	}
	if body.StreamOptions == nil || !body.StreamOptions.IncludeUsage {
		http.Error(w, "stream_options.include_usage not requested", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for p := f.sse; len(p) > 0; {
		n := min(f.piece, len(p))
		if _, err := w.Write(p[:n]); err != nil {
			return
		}
		_ = rc.Flush()
		p = p[n:]
	}
}

func call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Type: "function", Function: llm.FunctionCall{Name: name, Arguments: args}}
}

func TestStreamFixtures(t *testing.T) {
	usage := llm.Usage{PromptTokens: 120, CompletionTokens: 42, TotalTokens: 162}
	tests := []struct {
		fixture     string
		content     string
		reasoning   string
		calls       []llm.ToolCall
		finish      string
		usage       llm.Usage
		probeStatus int
		probeBody   string
		errIs       error
		errHas      string
		partial     bool
	}{
		{fixture: "parallel_tools.sse", finish: "tool_calls", usage: usage, calls: []llm.ToolCall{
			call("call_a", "read_file", `{"path": "main.go"}`),
			call("call_b", "grep", `{"pattern":"TODO","path":"."}`),
		}},
		{fixture: "split_args.sse", finish: "tool_calls", usage: usage, calls: []llm.ToolCall{
			call("call_w", "write_file", `{"path":"a.go","content":"package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n"}`),
		}},
		{fixture: "split_utf8.sse", content: "café 🚀 日本", finish: "tool_calls", calls: []llm.ToolCall{
			call("call_u", "bash", `{"command":"echo ü🚀"}`),
		}},
		// Recorded from Debian's llama-server (b11669) with a random-weight
		// model: the server itself sends U+FFFD for bytes that are not text.
		{fixture: "llama_server_b11669_plain.sse", content: "\uFFFDJJJJJJJJ\uFFFD\uFFFD3", finish: "length",
			usage: llm.Usage{PromptTokens: 59, CompletionTokens: 12, TotalTokens: 71}},
		{fixture: "pings.sse", content: "Hello", finish: "stop", usage: usage},
		{fixture: "reasoning.sse", content: "Hello!", reasoning: "The user wants a greeting.", finish: "stop", usage: usage},
		{fixture: "usage_chunk.sse", content: "Hi", finish: "stop", usage: llm.Usage{PromptTokens: 9, CompletionTokens: 1, TotalTokens: 10}},
		{fixture: "finish_no_done.sse", content: "ok", finish: "stop", usage: usage},
		{fixture: "no_index.sse", finish: "tool_calls", calls: []llm.ToolCall{
			call("c1", "list_dir", `{"path":"."}`),
			call("c2", "read_file", `{"path":"go.mod"}`),
		}},
		{fixture: "ollama_style.sse", reasoning: "hmm", finish: "tool_calls", calls: []llm.ToolCall{
			call("", "bash", `{"command":"ls"}`),
		}},
		{fixture: "error_event.sse", content: "Partial", errIs: llm.ErrServer, errHas: "out of memory", partial: true},
		{fixture: "llama_error_line.sse", errIs: llm.ErrServer, errHas: "Failed to initialize samplers"},
		{fixture: "data_error.sse", errIs: llm.ErrContextExceeded, errHas: "exceeds the available context size"},
		{fixture: "json_body.sse", errIs: llm.ErrServer, errHas: "--jinja"},
		{fixture: "truncated.sse", content: "I will now write the", errIs: llm.ErrUnavailable, errHas: "ended before the reply was finished", partial: true},
		{fixture: "cut_mid_chunk.sse", content: "abc", errIs: llm.ErrUnavailable, errHas: "cut off", partial: true},
		{fixture: "empty.sse", probeStatus: 500, probeBody: `{"error":{"code":500,"message":"chat template failed to render","type":"server_error"}}`,
			errIs: llm.ErrServer, errHas: "empty stream; a non-streaming retry said: chat template failed to render"},
		{fixture: "done_only.sse", probeStatus: 400, probeBody: `{"error":{"code":400,"message":"model does not support tools"}}`,
			errIs: llm.ErrServer, errHas: "model does not support tools"},
		{fixture: "empty.sse", probeStatus: 200, probeBody: `{"choices":[{"index":0,"message":{"role":"assistant","content":"from the probe"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}`,
			content: "from the probe", finish: "stop", usage: llm.Usage{PromptTokens: 3, CompletionTokens: 3, TotalTokens: 6}},
	}
	for _, tt := range tests {
		for _, piece := range []int{1 << 20, 7, 1} {
			name := strings.TrimSuffix(tt.fixture, ".sse")
			if tt.probeStatus != 0 {
				name += "_probe" + http.StatusText(tt.probeStatus)
			}
			t.Run(name+"/"+map[int]string{1 << 20: "whole", 7: "7B", 1: "1B"}[piece], func(t *testing.T) {
				sse, err := os.ReadFile(filepath.Join("testdata", tt.fixture))
				if err != nil {
					t.Fatal(err)
				}
				fs := &fixtureServer{sse: sse, piece: piece, probeStatus: tt.probeStatus, probeBody: tt.probeBody}
				srv := httptest.NewServer(fs)
				defer srv.Close()
				c := newClient(t, srv.URL, nil)
				wantCalls := append([]llm.ToolCall(nil), tt.calls...)
				var text, thinking strings.Builder
				args := map[int]string{}
				resp, err := c.Stream(context.Background(), userReq("hi"), func(d llm.Delta) {
					switch d.Kind {
					case llm.DeltaText:
						text.WriteString(d.Text)
					case llm.DeltaReasoning:
						thinking.WriteString(d.Text)
					case llm.DeltaToolCall:
						args[d.ToolIndex] += d.Text
					}
				})
				if tt.errIs != nil {
					if !errors.Is(err, tt.errIs) || !strings.Contains(err.Error(), tt.errHas) {
						t.Fatalf("error %v, want %v containing %q", err, tt.errIs, tt.errHas)
					}
					var e *llm.Error
					if !errors.As(err, &e) || e.Partial != tt.partial {
						t.Errorf("partial: %+v, want %v", e, tt.partial)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				m := resp.Message
				if m.Content != tt.content || m.Reasoning != tt.reasoning || resp.FinishReason != tt.finish || resp.Usage != tt.usage {
					t.Errorf("got content %q reasoning %q finish %q usage %+v", m.Content, m.Reasoning, resp.FinishReason, resp.Usage)
				}
				if text.String() != m.Content || thinking.String() != m.Reasoning {
					t.Errorf("deltas %q / %q differ from the reply", text.String(), thinking.String())
				}
				for i, c := range wantCalls {
					if c.ID == "" && i < len(m.ToolCalls) {
						if !strings.HasPrefix(m.ToolCalls[i].ID, "call_") {
							t.Errorf("call %d got no generated id: %q", i, m.ToolCalls[i].ID)
						}
						wantCalls[i].ID = m.ToolCalls[i].ID
					}
					if i < len(m.ToolCalls) && args[i] != m.ToolCalls[i].Function.Arguments {
						t.Errorf("call %d: deltas %q differ from %q", i, args[i], m.ToolCalls[i].Function.Arguments)
					}
				}
				if !reflect.DeepEqual(m.ToolCalls, wantCalls) {
					t.Errorf("calls\n got %+v\nwant %+v", m.ToolCalls, wantCalls)
				}
				if tt.probeStatus != 0 && fs.probes.Load() != 1 {
					t.Errorf("%d probes, want 1", fs.probes.Load())
				}
			})
		}
	}
}

// A partial character is held back from the live display until it is whole.
func TestDeltasNeverSplitCharacters(t *testing.T) {
	sse, err := os.ReadFile(filepath.Join("testdata", "split_utf8.sse"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&fixtureServer{sse: sse, piece: 3})
	defer srv.Close()
	c := newClient(t, srv.URL, nil)
	_, err = c.Stream(context.Background(), userReq("hi"), func(d llm.Delta) {
		if d.Kind == llm.DeltaText && !isValidUTF8(d.Text) {
			t.Errorf("delta with a split character: %q", d.Text)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "") == s }

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		status    int
		body      string
		tools     bool
		errIs     error
		has       string
		retriable bool
	}{
		// As llama-server b11669 answers it.
		{400, `{"error":{"code":400,"message":"request (6054 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":6054,"n_ctx":512}}`, false, llm.ErrContextExceeded, "context size", false},
		{400, `{"error":{"message":"This model's maximum context length is 4096 tokens."}}`, false, llm.ErrContextExceeded, "4096", false},
		{500, `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`, true, llm.ErrToolsUnsupported, "--jinja", false},
		{400, `{"error":"registry.ollama.ai/library/gemma:2b does not support tools"}`, true, llm.ErrToolsUnsupported, "does not support tools", false},
		{400, `{"error":{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError"}}`, true, llm.ErrToolsUnsupported, "auto-tool-choice", false},
		// A request the server refuses for another reason that names a
		// tool: switching to text tool calls would not help.
		{400, `{"error":{"code":400,"message":"Invalid 'tool_call_id' in message 3","type":"invalid_request_error"}}`, true, llm.ErrServer, "tool_call_id", false},
		{401, `{"error":{"message":"Invalid API Key","type":"authentication_error"}}`, false, llm.ErrServer, "Invalid API Key", false},
		{404, `404 page not found`, false, llm.ErrServer, "404 page not found", false},
		{500, ``, false, llm.ErrServer, "Internal Server Error", false},
		{503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, false, llm.ErrUnavailable, "Loading model", true},
		{422, `{"detail":[{"msg":"field required"}]}`, false, llm.ErrServer, "field required", false},
	}
	for _, tt := range tests {
		t.Run(strings.Fields(tt.has)[0], func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			c := newClient(t, srv.URL, func(o *llm.Options) { o.MaxRetries = -1 })
			req := userReq("hi")
			if tt.tools {
				req.Tools = []llm.Tool{{Type: "function", Function: llm.FunctionDef{Name: "bash"}}}
			}
			_, err := c.Stream(context.Background(), req, nil)
			var e *llm.Error
			if !errors.Is(err, tt.errIs) || !strings.Contains(err.Error(), tt.has) || !errors.As(err, &e) || e.StatusCode != tt.status {
				t.Fatalf("got %v, want %v with %q", err, tt.errIs, tt.has)
			}
			if llm.IsRetriable(err) != tt.retriable {
				t.Errorf("retriable = %v", !tt.retriable)
			}
		})
	}
}

func TestIdleTimeoutCutsEndlessStall(t *testing.T) {
	srv := startScript(t, `
turns:
  - text: "one two three four five six seven eight"
    stall: 30s
`)
	c := newClient(t, srv.URL(), func(o *llm.Options) { o.IdleTimeout = 200 * time.Millisecond })
	start := time.Now()
	var got strings.Builder
	resp, err := c.Stream(context.Background(), userReq("hi"), func(d llm.Delta) { got.WriteString(d.Text) })
	el := time.Since(start)
	var e *llm.Error
	if !errors.Is(err, llm.ErrTimeout) || !errors.As(err, &e) || !e.Partial || !strings.Contains(err.Error(), "idle timeout") {
		t.Fatalf("err %v", err)
	}
	if el > 5*time.Second {
		t.Errorf("took %s", el)
	}
	if resp.Message.Content == "" || resp.Message.Content != got.String() {
		t.Errorf("partial reply %q, deltas %q", resp.Message.Content, got.String())
	}
	if !llm.IsRetriable(err) {
		t.Error("a stalled stream should be retriable by the caller")
	}
}

// Keep-alive pings while the server processes the prompt (before any data)
// fall under the generous first-byte timeout, not the idle timeout: a slow
// but live server is not cut. The pings span longer than the idle timeout.
func TestPingsKeepStreamAlive(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for range 15 {
			_, _ = w.Write([]byte(": ping\n\n"))
			_ = rc.Flush()
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"alive"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, func(o *llm.Options) { o.IdleTimeout = 500 * time.Millisecond })
	resp, err := c.Stream(context.Background(), userReq("hi"), nil)
	if err != nil || resp.Message.Content != "alive" {
		t.Fatalf("%v %+v", err, resp)
	}
}

func TestFirstByteTimeout(t *testing.T) {
	srv := startScript(t, `
turns:
  - {text: late, delay: 30s}
`)
	c := newClient(t, srv.URL(), func(o *llm.Options) {
		o.FirstByteTimeout = 150 * time.Millisecond
		o.IdleTimeout = time.Hour
		o.MaxRetries = 3
	})
	_, err := c.Stream(context.Background(), userReq("hi"), nil)
	if !errors.Is(err, llm.ErrTimeout) || !strings.Contains(err.Error(), "first-byte timeout") {
		t.Fatalf("err %v", err)
	}
	// Timeouts are not retried by the client: a slow prompt would only get
	// slower if sent again.
	if n := len(srv.ChatRequests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestRetryOn503ThenSuccess(t *testing.T) {
	srv := startScript(t, `
turns:
  - error: {status: 503, message: Loading model}
  - error: {status: 503, message: Loading model}
  - text: ready now
`)
	var retries []int
	c := newClient(t, srv.URL(), func(o *llm.Options) {
		o.OnRetry = func(n int, _ time.Duration, err error) {
			retries = append(retries, n)
			if !errors.Is(err, llm.ErrUnavailable) {
				t.Errorf("retry on %v", err)
			}
		}
	})
	resp, err := c.Stream(context.Background(), userReq("hi"), nil)
	if err != nil || resp.Message.Content != "ready now" {
		t.Fatalf("%v %+v", err, resp)
	}
	if !reflect.DeepEqual(retries, []int{1, 2}) {
		t.Errorf("retries %v", retries)
	}
}

func TestRetryGivesUp(t *testing.T) {
	srv := startScript(t, `
final: {error: {status: 503, message: Loading model}}
`)
	c := newClient(t, srv.URL(), func(o *llm.Options) { o.MaxRetries = 2 })
	_, err := c.Stream(context.Background(), userReq("hi"), nil)
	if !errors.Is(err, llm.ErrUnavailable) || !llm.IsRetriable(err) {
		t.Fatalf("err %v", err)
	}
	if n := len(srv.ChatRequests()); n != 3 {
		t.Errorf("%d requests, want 3 (1 + 2 retries)", n)
	}
}

func TestRetryOnConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	var n int
	c := newClient(t, url, func(o *llm.Options) {
		o.MaxRetries = 2
		o.OnRetry = func(int, time.Duration, error) { n++ }
	})
	_, err := c.Stream(context.Background(), userReq("hi"), nil)
	var e *llm.Error
	if !errors.Is(err, llm.ErrUnavailable) || !errors.As(err, &e) || e.StatusCode != 0 || !strings.Contains(err.Error(), "is it running") {
		t.Fatalf("err %v", err)
	}
	if n != 2 {
		t.Errorf("%d retries", n)
	}
}

// A reply that has started is never retried: the caller has shown it.
func TestNoRetryAfterPartialOutput(t *testing.T) {
	srv := startScript(t, `
turns:
  - {text: "some words here and more words there, to have a middle", drop: true}
  - text: second turn must not be used
`)
	c := newClient(t, srv.URL(), nil)
	resp, err := c.Stream(context.Background(), userReq("hi"), nil)
	var e *llm.Error
	if !errors.Is(err, llm.ErrUnavailable) || !errors.As(err, &e) || !e.Partial || !strings.Contains(err.Error(), "broke in the middle") {
		t.Fatalf("err %v", err)
	}
	if resp.Message.Content == "" || srv.Remaining() != 1 {
		t.Errorf("content %q, remaining %d", resp.Message.Content, srv.Remaining())
	}
}

func TestCancelOneGeneration(t *testing.T) {
	srv := startScript(t, `
turns:
  - {text: "a long reply that stalls", stall: 30s}
  - text: the next one works
`)
	c := newClient(t, srv.URL(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	var once atomic.Bool
	go func() {
		<-first
		cancel()
	}()
	start := time.Now()
	resp, err := c.Stream(ctx, userReq("hi"), func(llm.Delta) {
		if once.CompareAndSwap(false, true) {
			close(first)
		}
	})
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
	var e *llm.Error
	if errors.As(err, &e) {
		t.Errorf("cancellation reported as a server error: %v", err)
	}
	if resp.Message.Content == "" {
		t.Error("partial content lost")
	}
	// The client is unharmed.
	resp, err = c.Stream(context.Background(), userReq("again"), nil)
	if err != nil || resp.Message.Content != "the next one works" {
		t.Fatalf("%v %+v", err, resp)
	}
}

func TestMaxReplyBytesStopsEndlessOutput(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte(`data: {"choices":[{"index":0,"delta":{"content":"la la la la la la la "},"finish_reason":null}]}` + "\n\n")
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, func(o *llm.Options) { o.MaxReplyBytes = 1 << 20 })
	_, err := c.Stream(context.Background(), userReq("sing"), nil)
	if !errors.Is(err, llm.ErrProtocol) || !strings.Contains(err.Error(), "looping") {
		t.Fatalf("err %v", err)
	}
}

func TestSSEErrorEventFromScript(t *testing.T) {
	srv := startScript(t, `
turns:
  - text: "half a reply"
    error: {event: true, message: "slot unavailable", type: server_error}
`)
	c := newClient(t, srv.URL(), nil)
	resp, err := c.Stream(context.Background(), userReq("hi"), nil)
	if !errors.Is(err, llm.ErrServer) || !strings.Contains(err.Error(), "slot unavailable") {
		t.Fatalf("err %v", err)
	}
	if resp.Message.Content != "half a reply" {
		t.Errorf("content %q", resp.Message.Content)
	}
}

func TestEmptyStreamProbeAgainstScript(t *testing.T) {
	srv := startScript(t, `
turns:
  - empty: true
  - error: {status: 500, message: "template error: unknown role"}
`)
	c := newClient(t, srv.URL(), nil)
	_, err := c.Stream(context.Background(), userReq("hi"), nil)
	if !errors.Is(err, llm.ErrServer) || !strings.Contains(err.Error(), "template error: unknown role") {
		t.Fatalf("err %v", err)
	}
	reqs := srv.ChatRequests()
	if len(reqs) != 2 || !reqs[0].Stream || reqs[1].Stream {
		t.Fatalf("requests %+v", reqs)
	}
}

func TestAPIKeyAndModel(t *testing.T) {
	var auth, model string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		var b struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		model = b.Model
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL+"/v1/", func(o *llm.Options) { o.APIKey = "sekrit"; o.Model = "m1" })
	if _, err := c.Stream(context.Background(), userReq("hi"), nil); err != nil {
		t.Fatal(err)
	}
	if auth != "Bearer sekrit" || model != "m1" {
		t.Errorf("auth %q model %q", auth, model)
	}
}

func TestNewHTTPRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := llm.NewHTTP(llm.Options{BaseURL: u}); err == nil || !strings.Contains(err.Error(), "http://HOST:PORT") {
			t.Errorf("%q: %v", u, err)
		}
	}
}

// Sub-agents share one client: concurrent generations must not mix.
func TestConcurrentStreams(t *testing.T) {
	const n = 8
	var turns []string
	for i := range n {
		turns = append(turns, fmt.Sprintf(`{text: "reply %d with some more words to stream", tool_calls: [{name: bash, arguments: {command: "echo %d"}}]}`, i, i))
	}
	srv := startScript(t, "chunk: 2\nturns: ["+strings.Join(turns, ",")+"]")
	c := newClient(t, srv.URL(), nil)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			var got strings.Builder
			resp, err := c.Stream(context.Background(), userReq("go"), func(d llm.Delta) {
				if d.Kind == llm.DeltaText {
					got.WriteString(d.Text)
				}
			})
			if err != nil {
				errs <- err
				return
			}
			var i int
			if _, err := fmt.Sscanf(resp.Message.Content, "reply %d", &i); err != nil || got.String() != resp.Message.Content ||
				len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].Function.Arguments != fmt.Sprintf(`{"command":"echo %d"}`, i) {
				errs <- fmt.Errorf("mixed reply: %+v (deltas %q)", resp.Message, got.String())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A server that ignores "stream" and answers with one JSON document.
func TestServerIgnoringStream(t *testing.T) {
	for _, tt := range []struct{ body, content, errHas string }{
		{body: `{"choices":[{"index":0,"message":{"role":"assistant","content":"whole","tool_calls":[{"id":"c","type":"function","function":{"name":"bash","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, content: "whole"},
		{body: `{"error":{"message":"no such model","type":"invalid_request_error"}}`, errHas: "no such model"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			_, _ = w.Write([]byte(tt.body))
		}))
		c := newClient(t, srv.URL, nil)
		resp, err := c.Stream(context.Background(), userReq("hi"), nil)
		srv.Close()
		if tt.errHas != "" {
			if !errors.Is(err, llm.ErrServer) || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("err %v", err)
			}
			continue
		}
		if err != nil || resp.Message.Content != tt.content || len(resp.Message.ToolCalls) != 1 || resp.FinishReason != "tool_calls" {
			t.Errorf("%+v %v", resp, err)
		}
	}
}

// Timeouts can be switched off one at a time.
func TestTimeoutsDisabled(t *testing.T) {
	srv := startScript(t, `
turns:
  - {text: "one two three four five six", stall: 30s}
  - {text: "late", delay: 300ms}
`)
	c := newClient(t, srv.URL(), func(o *llm.Options) {
		o.FirstByteTimeout = -1
		o.IdleTimeout = 150 * time.Millisecond
	})
	if _, err := c.Stream(context.Background(), userReq("hi"), nil); !errors.Is(err, llm.ErrTimeout) || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("idle only: %v", err)
	}
	// The idle timer starts with the first byte, so a slow start is fine.
	resp, err := c.Stream(context.Background(), userReq("hi"), nil)
	if err != nil || resp.Message.Content != "late" {
		t.Fatalf("slow start: %+v %v", resp, err)
	}
}
