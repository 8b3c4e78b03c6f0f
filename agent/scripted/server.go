package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/localagent/agent/agent/llm"
)

// Request is one request the server received.
type Request struct {
	Time   time.Time
	Method string
	Path   string
	Body   []byte
	// Chat is the decoded body of a chat completion request.
	Chat llm.Request
	// Stream is the request's "stream" flag.
	Stream bool
	// Turn is the 1-based script turn that answered a chat request
	// (0 for other endpoints; len(Turns)+1 and up after the script ended).
	Turn int
}

// Handler serves a Script. It is safe for concurrent use; chat requests
// consume turns in the order they arrive.
type Handler struct {
	script Script

	mu         sync.Mutex
	next       int // index of the next turn
	health     int // /health requests answered
	requests   []Request
	mismatches []string
}

// NewHandler returns a handler for s (use it with httptest.NewServer).
func NewHandler(s *Script) *Handler {
	h := &Handler{}
	if s != nil {
		h.script = *s
	}
	if h.script.Slots == 0 {
		h.script.Slots = 1
	}
	if h.script.NCtx == 0 {
		h.script.NCtx = 8192
	}
	if h.script.Chunk == 0 {
		h.script.Chunk = 8
	}
	return h
}

// Model is the model name the server reports.
func (h *Handler) Model() string {
	if h.script.Model == "" {
		return ModelName
	}
	return ModelName + "/" + h.script.Model
}

// Requests returns a copy of every request received so far.
func (h *Handler) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// ChatRequests returns only the chat completion requests.
func (h *Handler) ChatRequests() []Request {
	var out []Request
	for _, r := range h.Requests() {
		if r.Turn > 0 {
			out = append(out, r)
		}
	}
	return out
}

// Mismatches returns the failed expectations, one line each.
func (h *Handler) Mismatches() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.mismatches...)
}

// Remaining is the number of turns not yet served.
func (h *Handler) Remaining() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(0, len(h.script.Turns)-h.next)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	rec := Request{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Body: body}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/v1/chat/completions", "/chat/completions":
		if r.Method != http.MethodPost {
			h.record(rec)
			writeError(w, http.StatusMethodNotAllowed, "use POST", "invalid_request_error")
			return
		}
		h.chat(w, r, rec)
	case "/health", "/v1/health":
		h.mu.Lock()
		h.health++
		loading := h.health <= h.script.Loading
		h.requests = append(h.requests, rec)
		h.mu.Unlock()
		if loading {
			writeError(w, http.StatusServiceUnavailable, "Loading model", "unavailable_error")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	case "/props":
		h.record(rec)
		writeJSON(w, http.StatusOK, map[string]any{
			"total_slots": h.script.Slots,
			"default_generation_settings": map[string]any{
				"n_ctx": h.script.NCtx,
			},
			"model_alias": h.Model(),
			"model_path":  "/scripted/" + h.Model() + ".gguf",
			"build_info":  "scripted",
			"is_sleeping": false,
			"chat_template_caps": map[string]any{
				"supports_tools": true, "supports_tool_calls": true,
				"supports_parallel_tool_calls": true, "supports_system_role": true,
			},
		})
	case "/v1/models", "/models":
		h.record(rec)
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list",
			"data":   []map[string]any{{"id": h.Model(), "object": "model", "owned_by": "scripted"}},
		})
	default:
		h.record(rec)
		writeError(w, http.StatusNotFound, "scripted server: no such endpoint "+r.URL.Path, "not_found_error")
	}
}

func (h *Handler) record(r Request) {
	h.mu.Lock()
	h.requests = append(h.requests, r)
	h.mu.Unlock()
}

type chatBody struct {
	llm.Request
	Stream bool `json:"stream"`
}

func (h *Handler) chat(w http.ResponseWriter, r *http.Request, rec Request) {
	var cb chatBody
	decodeErr := json.Unmarshal(rec.Body, &cb)
	rec.Chat, rec.Stream = cb.Request, cb.Stream

	h.mu.Lock()
	h.next++
	rec.Turn = h.next
	var turn *Turn
	if h.next <= len(h.script.Turns) {
		turn = &h.script.Turns[h.next-1]
	} else {
		turn = h.script.Final
	}
	h.requests = append(h.requests, rec)
	h.mu.Unlock()

	if decodeErr != nil {
		writeError(w, http.StatusBadRequest, "scripted server: request body is not a chat request: "+decodeErr.Error(), "invalid_request_error")
		return
	}
	if turn == nil {
		writeError(w, http.StatusInternalServerError,
			fmt.Sprintf("scripted server: the script has ended (%d turns); request %d has no answer", len(h.script.Turns), rec.Turn),
			"script_exhausted")
		return
	}
	if turn.Expect != nil {
		if msg := turn.Expect.check(&cb.Request); msg != "" {
			msg = fmt.Sprintf("scripted server: turn %d: %s", rec.Turn, msg)
			h.mu.Lock()
			h.mismatches = append(h.mismatches, msg)
			h.mu.Unlock()
			writeError(w, http.StatusBadRequest, msg, "script_expectation_failed")
			return
		}
	}
	ctx := r.Context()
	if !sleep(ctx, turn.Delay) {
		return
	}
	if turn.Error != nil && !turn.Error.Event {
		writeError(w, turn.Error.status(), turn.Error.message(), turn.Error.Type)
		return
	}
	id := fmt.Sprintf("chatcmpl-scripted-%d", rec.Turn)
	if cb.Stream {
		h.stream(ctx, w, id, rec.Turn, turn, &cb.Request)
		return
	}
	if turn.Error != nil {
		writeError(w, http.StatusInternalServerError, turn.Error.message(), turn.Error.Type)
		return
	}
	if !sleep(ctx, turn.Stall) {
		return
	}
	if turn.Drop || turn.Cut {
		panic(http.ErrAbortHandler) // closes the connection mid-reply
	}
	if turn.Empty {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	msg := map[string]any{"role": "assistant", "content": turn.Text}
	if turn.Reasoning != "" {
		msg["reasoning_content"] = turn.Reasoning
	}
	if calls := turn.toolCalls(rec.Turn); len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": h.Model(),
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": turn.finishReason()}},
		"usage":   turn.usage(&cb.Request),
	})
}

// stream writes the turn as SSE chunks, flushing each one.
func (h *Handler) stream(ctx context.Context, w http.ResponseWriter, id string, turnNo int, t *Turn, req *llm.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if t.Empty {
		return
	}
	created := time.Now().Unix()
	chunk := func(delta map[string]any, finish any) []byte {
		b, _ := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": h.Model(),
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		})
		return b
	}
	var events [][]byte
	events = append(events, chunk(map[string]any{"role": "assistant", "content": nil}, nil))
	for _, s := range split(t.Reasoning, h.script.Chunk) {
		events = append(events, chunk(map[string]any{"reasoning_content": s}, nil))
	}
	for _, s := range split(t.Text, h.script.Chunk) {
		events = append(events, chunk(map[string]any{"content": s}, nil))
	}
	for i, c := range t.toolCalls(turnNo) {
		fn := c["function"].(map[string]any)
		events = append(events, chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": c["id"], "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": ""},
		}}}, nil))
		for _, s := range split(fn["arguments"].(string), 2*h.script.Chunk) {
			events = append(events, chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": s},
			}}}, nil))
		}
	}
	write := func(p []byte) bool {
		if _, err := w.Write(p); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// Halfway (at the end of a reply too short to have a middle) the turn
	// stalls, then the stream is dropped or cut; goOn reports whether the
	// rest is sent.
	goOn := func() bool {
		if !sleep(ctx, t.Stall) {
			return false
		}
		if t.Drop {
			panic(http.ErrAbortHandler)
		}
		return !t.Cut
	}
	half := max(1, len(events)/2)
	for i, ev := range events {
		if i == half && !goOn() {
			return
		}
		if !write([]byte("data: " + string(ev) + "\n\n")) {
			return
		}
	}
	if len(events) <= half && !goOn() {
		return
	}
	if t.Error != nil {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"code": t.Error.status(), "message": t.Error.message(), "type": t.Error.typ(),
		}})
		write([]byte("event: error\ndata: " + string(b) + "\n\n"))
		return
	}
	last := map[string]any{
		"id": id, "object": "chat.completion.chunk", "created": created, "model": h.Model(),
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": t.finishReason()}},
		"usage":   t.usage(req),
	}
	if t.Timings != nil {
		last["timings"] = t.Timings
	}
	final, _ := json.Marshal(last)
	if write([]byte("data: " + string(final) + "\n\n")) {
		write([]byte("data: [DONE]\n\n"))
	}
}

func (e *Error) message() string {
	if e.Message == "" {
		return "scripted error"
	}
	return e.Message
}

func (e *Error) status() int {
	if e.Status == 0 {
		return http.StatusInternalServerError
	}
	return e.Status
}

func (e *Error) typ() string {
	if e.Type == "" {
		return "server_error"
	}
	return e.Type
}

func (t *Turn) finishReason() string {
	switch {
	case t.FinishReason != "":
		return t.FinishReason
	case len(t.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

// toolCalls renders the turn's calls in wire form with stable ids.
func (t *Turn) toolCalls(turnNo int) []map[string]any {
	var out []map[string]any
	for i, c := range t.ToolCalls {
		args, _ := c.argumentsJSON() // validated by Parse
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", turnNo, i+1)
		}
		out = append(out, map[string]any{
			"id": id, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": args},
		})
	}
	return out
}

// usage is the scripted usage or an estimate (4 bytes per token), so
// context accounting sees plausible, growing numbers.
func (t *Turn) usage(req *llm.Request) llm.Usage {
	if t.Usage != nil {
		u := *t.Usage
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		return u
	}
	in := 0
	for _, m := range req.Messages {
		in += len(m.Content) + 8
		for _, c := range m.ToolCalls {
			in += len(c.Function.Name) + len(c.Function.Arguments)
		}
	}
	out := len(t.Text) + len(t.Reasoning)
	for _, c := range t.ToolCalls {
		a, _ := c.argumentsJSON()
		out += len(c.Name) + len(a)
	}
	u := llm.Usage{PromptTokens: in/4 + 1, CompletionTokens: out/4 + 1}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// check returns "" when req meets every expectation, else what failed.
func (e *Expect) check(req *llm.Request) string {
	var fails []string
	msgs := req.Messages
	var last llm.Message
	if len(msgs) > 0 {
		last = msgs[len(msgs)-1]
	}
	if e.LastRole != "" && string(last.Role) != e.LastRole {
		fails = append(fails, fmt.Sprintf("last message role is %q, want %q", last.Role, e.LastRole))
	}
	if e.LastContains != "" && !strings.Contains(last.Content, e.LastContains) {
		fails = append(fails, fmt.Sprintf("last message does not contain %q (it is %q)", e.LastContains, clip(last.Content)))
	}
	if e.Contains != "" && !anyMessage(msgs, func(m llm.Message) bool { return strings.Contains(m.Content, e.Contains) }) {
		fails = append(fails, fmt.Sprintf("no message contains %q", e.Contains))
	}
	if e.SystemContains != "" && !anyMessage(msgs, func(m llm.Message) bool {
		return m.Role == llm.RoleSystem && strings.Contains(m.Content, e.SystemContains)
	}) {
		fails = append(fails, fmt.Sprintf("no system message contains %q", e.SystemContains))
	}
	if e.ToolResultContains != "" {
		start := 0
		for i, m := range msgs {
			if m.Role == llm.RoleAssistant {
				start = i + 1
			}
		}
		if !anyMessage(msgs[start:], func(m llm.Message) bool {
			return m.Role == llm.RoleTool && strings.Contains(m.Content, e.ToolResultContains)
		}) {
			fails = append(fails, fmt.Sprintf("no tool result after the last assistant message contains %q", e.ToolResultContains))
		}
	}
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Function.Name] = true
	}
	for _, name := range e.Tools {
		if !offered[name] {
			fails = append(fails, fmt.Sprintf("tool %q is not offered", name))
		}
	}
	if e.NoTools && len(req.Tools) > 0 {
		fails = append(fails, fmt.Sprintf("%d tools offered, want none", len(req.Tools)))
	}
	return strings.Join(fails, "; ")
}

func anyMessage(msgs []llm.Message, f func(llm.Message) bool) bool {
	for _, m := range msgs {
		if f(m) {
			return true
		}
	}
	return false
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// split cuts s into pieces of n runes (never inside a character).
func split(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// sleep waits d unless ctx ends first; it reports whether to go on.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"scripted server: cannot encode reply"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg, typ string) {
	if typ == "" {
		typ = "server_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "type": typ}})
}

// Server is a Handler listening on 127.0.0.1.
type Server struct {
	*Handler
	srv  *http.Server
	url  string
	done chan struct{}
	err  error
}

// Start serves s on 127.0.0.1 at a free port until ctx ends or Close is
// called.
func Start(ctx context.Context, s *Script) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("scripted server: listen on 127.0.0.1: %w", err)
	}
	h := NewHandler(s)
	srv := &Server{
		Handler: h,
		srv:     &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		url:     "http://" + ln.Addr().String(),
		done:    make(chan struct{}),
	}
	go func() {
		defer close(srv.done)
		if err := srv.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			srv.err = err
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = srv.Close()
		case <-srv.done:
		}
	}()
	return srv, nil
}

// URL is the server's base URL ("http://127.0.0.1:PORT").
func (s *Server) URL() string { return s.url }

// Close stops the server, cutting any reply in progress.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	if err == nil {
		err = s.err
	}
	return err
}
