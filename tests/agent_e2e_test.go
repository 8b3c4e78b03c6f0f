package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/scripted"
	"github.com/localagent/agent/agent/session"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

const e2eScript = `
model: e2e
turns:
  - expect: {system_contains: "Keep answers short.", tools: [read_file, edit_file, bash]}
    text: "I will read the file first."
    tool_calls:
      - {name: read_file, arguments: {path: calc.sh}}
  - expect: {last_role: tool, tool_result_contains: "echo $((1 + 1))"}
    tool_calls:
      - {name: edit_file, arguments: {path: calc.sh, old_string: "echo $((1 + 1))", new_string: "echo $((2 + 2))"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {command: "sh calc.sh > out.txt && cat out.txt"}}
  - expect: {last_role: tool, tool_result_contains: "4"}
    text: "calc.sh now prints 4; I ran it and saved the output in out.txt."
  - expect: {contains: "calc.sh now prints 4", last_contains: "also say done"}
    text: "done"
`

// TestAgentEndToEnd runs the agent over real HTTP (the scripted server and
// the real LLM client) and a real sandbox: it reads a file, edits it, runs
// a command and finishes; the workspace changes exactly as scripted and the
// transcript resumes in a fresh agent.
func TestAgentEndToEnd(t *testing.T) {
	eng := sandboxtest.RequireDocker(t)
	ws := t.TempDir()
	// The sandbox runs as another uid when the tests run as root; let it write.
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws, "calc.sh"), "#!/bin/sh\necho $((1 + 1))\n")
	writeFile(t, filepath.Join(ws, "AGENTS.md"), "Keep answers short.\n")
	sb := sandboxtest.New(t, eng, sandbox.Spec{Workspace: ws})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script, err := scripted.Parse([]byte(e2eScript))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := scripted.Start(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	client, err := llm.NewHTTP(llm.Options{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}

	sessionPath := filepath.Join(t.TempDir(), "session.jsonl")
	rec := &event.Recorder{}
	opts := agent.Options{
		Client: client, Workspace: orchestrator.NewWorkspace(sb), SessionPath: sessionPath,
		ArtifactDir: t.TempDir(), Sink: rec, Env: agent.Environment{Offline: true, Branch: "agent/e2e"},
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Run(ctx, "Make calc.sh print 4 and save its output in out.txt.")
	if err != nil {
		t.Fatalf("run: %v (mismatches %q)", err, srv.Mismatches())
	}
	_ = a.Close()
	if m := srv.Mismatches(); len(m) > 0 {
		t.Fatalf("the agent sent unexpected requests: %q", m)
	}
	if res.StopReason != agent.StopDone || !strings.Contains(res.Text, "prints 4") || res.Iterations != 4 {
		t.Fatalf("result = %+v", res)
	}
	var names []string
	for _, c := range res.ToolCalls {
		names = append(names, c.Name)
		if c.IsError {
			t.Errorf("tool call %s failed", c.Name)
		}
	}
	if got := strings.Join(names, ","); got != "read_file,edit_file,bash" {
		t.Fatalf("tool calls = %s", got)
	}
	if ec := res.ToolCalls[2].ExitCode; ec == nil || *ec != 0 {
		t.Fatalf("bash exit code = %v", ec)
	}

	// The workspace changed exactly as scripted, and nothing else appeared.
	if got := readFile(t, filepath.Join(ws, "calc.sh")); got != "#!/bin/sh\necho $((2 + 2))\n" {
		t.Fatalf("calc.sh = %q", got)
	}
	if got := readFile(t, filepath.Join(ws, "out.txt")); got != "4\n" {
		t.Fatalf("out.txt = %q", got)
	}
	entries, _ := os.ReadDir(ws)
	if len(entries) != 3 {
		t.Fatalf("workspace holds %d entries, want 3 (calc.sh, AGENTS.md, out.txt)", len(entries))
	}
	finished := 0
	for _, e := range rec.Events() {
		if e.Kind == event.ToolFinished {
			finished++
		}
	}
	if finished != 3 {
		t.Errorf("%d tool_finished events, want 3", finished)
	}

	// The transcript is complete and a fresh agent continues from it.
	h, msgs, err := session.Load(sessionPath)
	if err != nil || h.ID != res.SessionID || len(msgs) != 9 {
		t.Fatalf("transcript: %v, header %+v, %d messages", err, h, len(msgs))
	}
	opts.Resume = true
	b, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	res2, err := b.Run(ctx, "also say done")
	if err != nil || res2.Text != "done" {
		t.Fatalf("resumed run: %+v, %v (mismatches %q)", res2, err, srv.Mismatches())
	}
	if m := srv.Mismatches(); len(m) > 0 {
		t.Fatalf("resumed request: %q", m)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o666); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(path, 0o666)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAgentHugeOutputFromSandbox: 47 MB of command output reaches the model
// as an excerpt and an artifact it can page through; the artifact lives on
// the host, never in the workspace, and the transcript stays small.
func TestAgentHugeOutputFromSandbox(t *testing.T) {
	eng := sandboxtest.RequireDocker(t)
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	sb := sandboxtest.New(t, eng, sandbox.Spec{Workspace: ws})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script, err := scripted.Parse([]byte(`
turns:
  - tool_calls:
      - {name: bash, arguments: {command: "seq 1 6000000"}}
  - expect: {last_role: tool, last_contains: "stored as artifact a1"}
    tool_calls:
      - {name: read_artifact, arguments: {id: a1, offset: 2, limit: 2}}
  - expect: {last_role: tool, last_contains: "2\n3\n"}
    text: done
`))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := scripted.Start(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	client, err := llm.NewHTTP(llm.Options{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	arts := t.TempDir()
	a, err := agent.New(agent.Options{Client: client, Workspace: orchestrator.NewWorkspace(sb),
		SessionPath: filepath.Join(t.TempDir(), "s.jsonl"), ArtifactDir: arts})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.Run(ctx, "flood")
	if err != nil || res.Text != "done" {
		t.Fatalf("res = %+v, err = %v (mismatches %q)", res, err, srv.Mismatches())
	}
	if m := srv.Mismatches(); len(m) > 0 {
		t.Fatalf("unexpected requests: %q", m)
	}
	files, _ := filepath.Glob(filepath.Join(arts, "*-a1.txt"))
	if len(files) != 1 {
		t.Fatalf("artifact files: %v", files)
	}
	if entries, _ := os.ReadDir(ws); len(entries) != 0 {
		t.Fatalf("the workspace gained %d entries", len(entries))
	}
	_, msgs, err := session.Load(res.SessionPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if len(m.Content) > 16<<10 {
			t.Fatalf("a %d-byte %s message in the transcript", len(m.Content), m.Role)
		}
	}
}
