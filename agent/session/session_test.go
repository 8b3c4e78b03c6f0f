package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localagent/agent/agent/llm"
)

func TestWriteLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "s.jsonl")
	w, h, err := Create(p, Header{Model: "qwen", Branch: "agent/x", Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	if h.ID == "" || h.Version != Version || h.Created.IsZero() {
		t.Fatalf("header not filled in: %+v", h)
	}
	msgs := []llm.Message{
		{Role: llm.RoleSystem, Content: "sys"},
		{Role: llm.RoleUser, Content: "multi\nline <html> & \"quotes\""},
		{Role: llm.RoleAssistant, Reasoning: "hmm", ToolCalls: []llm.ToolCall{{ID: "1", Type: "function",
			Function: llm.FunctionCall{Name: "bash", Arguments: `{"command":"ls"}`}}}},
		{Role: llm.RoleTool, ToolCallID: "1", Name: "bash", Content: "a\nb"},
	}
	for _, m := range msgs {
		if err := w.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	// Written through: readable before Close.
	h2, got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if h2.ID != h.ID || h2.Model != "qwen" || !h2.Offline || len(got) != 4 || got[1].Content != msgs[1].Content ||
		got[2].Reasoning != "hmm" || got[2].ToolCalls[0].Function.Arguments != `{"command":"ls"}` {
		t.Fatalf("loaded %+v %+v", h2, got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Create(p, Header{}); err == nil {
		t.Fatal("Create overwrote an existing transcript")
	}
	data, _ := os.ReadFile(p)
	if n := strings.Count(string(data), "\n"); n != 5 {
		t.Fatalf("%d lines, want 5", n)
	}
}

func TestTornLastLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.jsonl")
	w, _, err := Create(p, Header{})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Append(llm.Message{Role: llm.RoleUser, Content: "one"})
	_ = w.Close()
	// A crash in the middle of writing the second message.
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString(`{"role":"assistant","content":"tw`)
	_ = f.Close()

	_, msgs, err := Load(p)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Load: %v, %d messages", err, len(msgs))
	}
	w, _, msgs, err = Open(p)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Open: %v, %d messages", err, len(msgs))
	}
	if err := w.Append(llm.Message{Role: llm.RoleAssistant, Content: "two"}); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	_, msgs, err = Load(p)
	if err != nil || len(msgs) != 2 || msgs[1].Content != "two" {
		t.Fatalf("after resume: %v, %+v", err, msgs)
	}
}

func TestDamagedOrForeignFiles(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"empty":     "",
		"foreign":   `{"hello":"world"}` + "\n",
		"torn head": `{"type":"agent-session","vers`,
	}
	for name, body := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		_ = os.WriteFile(p, []byte(body), 0o600)
		if _, _, err := Load(p); !errors.Is(err, ErrNotTranscript) {
			t.Errorf("%s: err = %v, want ErrNotTranscript", name, err)
		}
	}
	p := filepath.Join(dir, "middle")
	_ = os.WriteFile(p, []byte(`{"type":"agent-session","version":1,"id":"x"}`+"\n"+"garbage\n"+`{"role":"user","content":"x"}`+"\n"), 0o600)
	if _, _, err := Load(p); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("damaged middle line: err = %v", err)
	}
}

func BenchmarkAppend(b *testing.B) {
	w, _, err := Create(filepath.Join(b.TempDir(), "s.jsonl"), Header{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	m := llm.Message{Role: llm.RoleTool, ToolCallID: "c1", Name: "read_file", Content: strings.Repeat("line of code\n", 100)}
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Append(m); err != nil {
			b.Fatal(err)
		}
	}
}
