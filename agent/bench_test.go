package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
)

// zeroModel answers instantly: a tool call per request with fresh
// arguments (so no doom-loop guard fires), and a final answer after
// callsPerRun calls. Usage is reported, as llama-server does.
type zeroModel struct {
	callsPerRun int
	n           int
}

func (m *zeroModel) Stream(_ context.Context, req llm.Request, onDelta func(llm.Delta)) (llm.Response, error) {
	m.n++
	u := llm.Usage{PromptTokens: 1000 + m.n, CompletionTokens: 20}
	if m.n%(m.callsPerRun+1) == 0 {
		if onDelta != nil {
			onDelta(llm.Delta{Kind: llm.DeltaText, Text: "done"})
		}
		return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "done"}, Usage: u}, nil
	}
	args := fmt.Sprintf(`{"path":"src/file%d.go"}`, m.n)
	if onDelta != nil {
		onDelta(llm.Delta{Kind: llm.DeltaToolCall, Text: args, ToolName: "read_file"})
	}
	return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{
		ID: fmt.Sprintf("call%d", m.n), Type: "function", Function: llm.FunctionCall{Name: "read_file", Arguments: args},
	}}}, FinishReason: "tool_calls", Usage: u}, nil
}

// instantWorkspace returns a 1 KB result at once: tool execution is not
// what these benchmarks measure.
type instantWorkspace struct{ out string }

func (w instantWorkspace) Call(context.Context, string, json.RawMessage) (ToolResult, error) {
	return ToolResult{Output: w.out}, nil
}

var benchOutput = strings.Repeat("func example() { return 42 }\n", 36) // ~1 KB

// BenchmarkLoopIteration measures the loop's own cost per iteration (one
// model request and one tool call, both instant): argument validation,
// events, context accounting, request building and the transcript write.
// One op is a Run of 10 tool iterations plus the final answer (including
// the one-off system prompt and project-instruction probes); ns/iter is the
// per-iteration figure.
func BenchmarkLoopIteration(b *testing.B) {
	for _, withTranscript := range []bool{false, true} {
		name := "no-transcript"
		if withTranscript {
			name = "transcript"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			ctx := context.Background()
			const iters = 11
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// Creating the transcript file is a per-session cost
				// (an openat of ~1 ms on this disk), not a per-iteration one.
				b.StopTimer()
				i++
				o := Options{Client: &zeroModel{callsPerRun: iters - 1}, Workspace: instantWorkspace{benchOutput}, ContextTokens: 1 << 20}
				if withTranscript {
					o.SessionPath = filepath.Join(dir, fmt.Sprintf("s%d.jsonl", i))
				}
				a, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := a.Run(ctx, "read the files")
				if err != nil || res.Iterations != iters {
					b.Fatalf("%+v %v", res, err)
				}
				b.StopTimer()
				_ = a.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*iters), "ns/iter")
		})
	}
}

// BenchmarkSession1000 measures a 1000-message session: the heap it holds
// in an agent, loading its transcript, and one more iteration on top of it.
func BenchmarkSession1000(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	w, _, err := session.Create(path, session.Header{})
	if err != nil {
		b.Fatal(err)
	}
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: "system"}, {Role: llm.RoleUser, Content: "task"}}
	for i := 0; len(msgs) < 1000; i++ {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Type: "function",
				Function: llm.FunctionCall{Name: "read_file", Arguments: fmt.Sprintf(`{"path":"src/f%d.go"}`, i)}}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: id, Name: "read_file", Content: benchOutput})
	}
	for _, m := range msgs {
		if err := w.Append(m); err != nil {
			b.Fatal(err)
		}
	}
	_ = w.Close()

	b.Run("load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, got, err := session.Load(path); err != nil || len(got) != 1000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("held", func(b *testing.B) {
		// Heap retained by an agent holding the 1000-message context.
		var agents []*Agent
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for b.Loop() {
			a, err := New(Options{Client: &zeroModel{}, Workspace: instantWorkspace{}})
			if err != nil {
				b.Fatal(err)
			}
			_, got, _ := session.Load(path)
			a.history = restoreHistory(got)
			agents = append(agents, a)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-B/session")
		runtime.KeepAlive(agents)
	})
	b.Run("iteration", func(b *testing.B) {
		// A resumed 1000-message session answering once: start (system
		// prompt, instruction probes, dangling-call check) and two
		// iterations (a tool call, then the answer), each building a
		// request over 1000 messages and appending to the transcript.
		ctx := context.Background()
		b.ReportAllocs()
		fi, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			// Back to the 1000 messages: each op appends a few.
			if err := os.Truncate(path, fi.Size()); err != nil {
				b.Fatal(err)
			}
			a, err := New(Options{Client: &zeroModel{callsPerRun: 1}, Workspace: instantWorkspace{benchOutput},
				SessionPath: path, Resume: true, ContextTokens: 1 << 22})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := a.Run(ctx, ""); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = a.Close()
			b.StartTimer()
		}
	})
}
