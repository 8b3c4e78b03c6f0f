package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/localagent/agent/agent/llm"
)

// fakeClient answers with replies produced by a function of the request.
// Loop-logic unit tests only; the end-to-end test uses the scripted server.
type fakeClient struct {
	mu      sync.Mutex
	reqs    []llm.Request
	replies []replyFn
}

func (c *fakeClient) Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (llm.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	n := len(c.reqs)
	c.mu.Unlock()
	if n > len(c.replies) {
		return llm.Response{}, fmt.Errorf("fake client: no reply scripted for request %d", n)
	}
	return c.replies[n-1](ctx, req, onDelta)
}

func (c *fakeClient) requests() []llm.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]llm.Request(nil), c.reqs...)
}

func text(s string) replyFn {
	return func(_ context.Context, _ llm.Request, d func(llm.Delta)) (llm.Response, error) {
		if d != nil {
			d(llm.Delta{Kind: llm.DeltaText, Text: s})
		}
		return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: s}, FinishReason: "stop",
			Usage: llm.Usage{PromptTokens: 100, CompletionTokens: 10, TotalTokens: 110}}, nil
	}
}

// calls replies with native tool calls given as name, JSON args pairs.
func calls(pairs ...string) replyFn {
	return func(context.Context, llm.Request, func(llm.Delta)) (llm.Response, error) {
		var tc []llm.ToolCall
		for i := 0; i+1 < len(pairs); i += 2 {
			tc = append(tc, llm.ToolCall{ID: fmt.Sprintf("c%d", i/2), Type: "function",
				Function: llm.FunctionCall{Name: pairs[i], Arguments: pairs[i+1]}})
		}
		return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: tc}, FinishReason: "tool_calls"}, nil
	}
}

func failWith(err error) replyFn {
	return func(context.Context, llm.Request, func(llm.Delta)) (llm.Response, error) { return llm.Response{}, err }
}

// replyFn produces one reply.
type replyFn func(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (llm.Response, error)

// memWorkspace is an in-memory workspace implementing just enough of the
// toolbox's semantics for loop tests.
type memWorkspace struct {
	mu    sync.Mutex
	files map[string]string
	log   []string
	// hook lets a test replace a tool's behaviour.
	hook func(tool string, args json.RawMessage) (ToolResult, error, bool)
}

func newMemWorkspace(files map[string]string) *memWorkspace {
	if files == nil {
		files = map[string]string{}
	}
	return &memWorkspace{files: files}
}

func (w *memWorkspace) calls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

func (w *memWorkspace) Call(ctx context.Context, tool string, args json.RawMessage) (ToolResult, error) {
	w.mu.Lock()
	w.log = append(w.log, tool+" "+string(args))
	h := w.hook
	w.mu.Unlock()
	if h != nil {
		if r, err, ok := h(tool, args); ok {
			return r, err
		}
	}
	var a struct {
		Path, Content, OldString, NewString, Command string
		Old                                          string `json:"old_string"`
		New                                          string `json:"new_string"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return ToolResult{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	zero := 0
	switch tool {
	case ToolReadFile:
		c, ok := w.files[a.Path]
		if !ok {
			return ToolResult{Output: a.Path + ": no such file", IsError: true}, nil
		}
		var b strings.Builder
		for i, l := range strings.Split(strings.TrimSuffix(c, "\n"), "\n") {
			fmt.Fprintf(&b, "%6d\t%s\n", i+1, l)
		}
		return ToolResult{Output: b.String()}, nil
	case ToolWriteFile:
		w.files[a.Path] = a.Content
		return ToolResult{Output: "wrote " + a.Path}, nil
	case ToolEditFile:
		c, ok := w.files[a.Path]
		if !ok {
			return ToolResult{Output: a.Path + ": no such file", IsError: true}, nil
		}
		if strings.Count(c, a.Old) != 1 {
			return ToolResult{Output: "old_string not found exactly once", IsError: true}, nil
		}
		w.files[a.Path] = strings.Replace(c, a.Old, a.New, 1)
		return ToolResult{Output: "edited " + a.Path}, nil
	case ToolListDir:
		var names []string
		for n := range w.files {
			names = append(names, n)
		}
		sort.Strings(names)
		return ToolResult{Output: strings.Join(names, "\n")}, nil
	case ToolBash:
		return ToolResult{Output: "ran: " + a.Command, ExitCode: &zero}, nil
	}
	return ToolResult{Output: "unsupported " + tool, IsError: true}, nil
}

func newTestAgent(t *testing.T, c llm.Client, ws Workspace, mod func(*Options)) *Agent {
	t.Helper()
	o := Options{Client: c, Workspace: ws, SessionPath: t.TempDir() + "/s.jsonl", ArtifactDir: t.TempDir()}
	if mod != nil {
		mod(&o)
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}
