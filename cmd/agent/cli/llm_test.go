package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/policy"
)

// llmIsolate keeps the user's and the project's configuration out of a test.
func llmIsolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("XDG_STATE_HOME", dir)
	t.Chdir(dir)
	return dir
}

func runUp(t *testing.T, args ...string) (*LLMUpOptions, error) {
	t.Helper()
	ios, _, _, _ := TestStreams()
	f := NewFactory(ios)
	var got *LLMUpOptions
	cmd := NewCmdLLMUp(f, func(_ context.Context, o *LLMUpOptions) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	return got, err
}

func TestLLMUpDefaults(t *testing.T) {
	llmIsolate(t)
	o, err := runUp(t, "--model", "m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	s := o.Server
	wd, _ := os.Getwd()
	if s.Model != filepath.Join(wd, "m.gguf") || s.Image != "agent/llama-server:cpu" || s.Port != 8080 ||
		s.Ctx != 16384 || s.Parallel != 2 || s.GPUs.String() != "auto" || s.StartTimeout != 300*time.Second || s.Instance != "" {
		t.Errorf("defaults: %+v", s)
	}
}

func TestLLMUpFlagsAndConfig(t *testing.T) {
	dir := llmIsolate(t)
	t.Setenv("AGENT_LLM_PORT", "9123")
	t.Setenv("AGENT_LLM_CTX", "32768")
	if err := os.MkdirAll(filepath.Join(dir, ".agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".agent", "config.yaml"), []byte("llm:\n  parallel: 1\n  gpus: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := runUp(t, "--model", "/models/x.gguf", "--ctx", "8192", "--image", "vendor/llama:cuda",
		"--start-timeout", "10s", "--instance", "t1", "--label", policy.LabelTest+"=abc", "--", "--flash-attn", "on")
	if err != nil {
		t.Fatal(err)
	}
	s := o.Server
	if s.Port != 9123 || s.Ctx != 8192 || s.Parallel != 1 || s.GPUs.String() != "none" || s.Image != "vendor/llama:cuda" ||
		s.StartTimeout != 10*time.Second || s.Instance != "t1" || s.Labels[policy.LabelTest] != "abc" {
		t.Errorf("options: %+v", s)
	}
	if strings.Join(s.ExtraArgs, " ") != "--flash-attn on" {
		t.Errorf("extra args: %q", s.ExtraArgs)
	}
	o, err = runUp(t, "--model", "/m.gguf", "--gpus", "0,1", "--port", "7000")
	if err != nil || o.Server.GPUs.String() != "0,1" || o.Server.Port != 7000 {
		t.Errorf("flags over env: %+v, %v", o, err)
	}
}

func TestLLMUsageErrors(t *testing.T) {
	llmIsolate(t)
	model := filepath.Join(t.TempDir(), "missing.gguf")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"llm", "up", "--model", model, "--gpus", "fast"}, ExitUsage, "not a GPU index"},
		{[]string{"llm", "up", "--model", model, "stray"}, ExitUsage, "go after --"},
		{[]string{"llm", "up", "--model", model, "--", "--port", "1"}, ExitUsage, "set by agent itself"},
		{[]string{"llm", "up"}, ExitUsage, "no model"},
		{[]string{"llm", "up", "--model", model, "--parallel", "-1"}, ExitUsage, "at least one slot"},
		{[]string{"llm", "up", "--model", model, "--label", policy.LabelKind + "=x"}, ExitUsage, "--label"},
		{[]string{"llm", "up", "--model", model, "--gpus", "none"}, ExitError, "does not exist"},
		{[]string{"llm", "status", "extra"}, ExitUsage, ""},
		{[]string{"compose", "render"}, ExitUsage, "no model"},
	} {
		ios, _, _, errOut := TestStreams()
		if code := Main(tc.args, ios); code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errOut.String(), tc.want)
		}
	}
}

func TestProgressRenderer(t *testing.T) {
	var buf bytes.Buffer
	r := newProgressRenderer(&IOStreams{ErrOut: &buf})
	load := func(d time.Duration) event.Event {
		return event.Event{Kind: event.Progress, State: "loading", Text: "loading model m.gguf", Duration: d}
	}
	r.Emit(event.Event{Kind: event.Notice, Text: "warning: small"})
	r.Emit(load(time.Second))
	r.Emit(load(2 * time.Second)) // same text within 10 s: not repeated
	r.Emit(event.Event{Kind: event.Progress, Text: "llama-server is ready"})
	r.stop()
	if got, want := buf.String(), "warning: small\nloading model m.gguf (1s)\nllama-server is ready\n"; got != want {
		t.Errorf("plain output:\n%q\nwant\n%q", got, want)
	}

	var tty syncBuffer
	r = newProgressRenderer(&IOStreams{ErrOut: &tty, ErrTTY: true})
	r.Emit(load(time.Second))
	r.Emit(load(2 * time.Second))
	// The ticker redraws the spinner line on its own (however long a busy
	// machine takes to get to it).
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(tty.String(), clearLine) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the spinner line was never redrawn: %q", tty.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.Emit(event.Event{Kind: event.Progress, Text: "ready"})
	r.stop()
	r.stop()
	out := tty.String()
	if !strings.HasSuffix(out, clearLine+"ready\n") || !strings.Contains(out, "loading model m.gguf 2s") {
		t.Errorf("tty output: %q", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWriteStatus(t *testing.T) {
	var buf bytes.Buffer
	writeStatus(&buf, &llamaserver.Status{Name: "agent-llm", State: llamaserver.StateAbsent})
	if !strings.Contains(buf.String(), "agent llm up --model FILE") {
		t.Errorf("absent: %s", buf.String())
	}
	buf.Reset()
	writeStatus(&buf, &llamaserver.Status{Name: "agent-llm", ID: "0123456789abcdef", State: llamaserver.StateReady, URL: "http://127.0.0.1:8080",
		TotalSlots: 4, BusySlots: 1, SlotCtx: 8192, Ctx: 32768, GPUs: "all", Devices: []string{"nvidia: all"}, Build: "b1"})
	for _, want := range []string{"ready", "1/4 busy, 8192 tokens of context each (ctx 32768)", "all (nvidia: all)", "agent-llm (0123456789ab)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("ready status lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	writeStatus(&buf, &llamaserver.Status{Name: "agent-llm", State: llamaserver.StateStopped, ExitCode: 137, OOMKilled: true})
	if !strings.Contains(buf.String(), "stopped (exit code 137, out of memory)") {
		t.Errorf("stopped: %s", buf.String())
	}
}
