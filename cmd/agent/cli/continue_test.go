package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// followUpScript is the scripted model's side of "also add tests": its
// expectations fail the request (HTTP 400, so the run fails) unless the
// follow-up request carries the first conversation: the first prompt, the
// tool results of the first run and its final answer.
const followUpScript = `
model: follow-up
n_ctx: 16384
turns:
  - expect: {last_role: user, last_contains: "also add tests", contains: "Make greet.sh greet the name given"}
    text: "I'll add a test for the default greeting."
    timings: {prompt_n: 120, cache_n: 800, prompt_ms: 60, predicted_n: 40, predicted_ms: 800}
    tool_calls:
      - name: write_file
        arguments:
          path: test_default.sh
          content: "#!/bin/sh\nif [ \"$(sh greet.sh)\" = \"Hello, world!\" ]; then echo PASS; else echo FAIL; exit 1; fi\n"
  - expect: {last_role: tool, contains: "Done: greet.sh now greets the name given"}
    tool_calls:
      - {name: bash, arguments: {command: "sh test_default.sh"}}
  - expect: {last_role: tool, tool_result_contains: "PASS"}
    text: "Added test_default.sh; it passes."
`

// followUpTurns are followUpScript's turns as they follow the demo's turns
// in one script (Request changes keeps the task's model server).
func followUpTurns(t *testing.T) string {
	t.Helper()
	_, turns, ok := strings.Cut(followUpScript, "turns:\n")
	if !ok {
		t.Fatal("bad follow-up script")
	}
	return turns
}

// taskEnv sets up what an in-process task needs: toolbox, config and state
// directories, the busybox image, and a cleanup of the run's containers.
func taskEnv(t *testing.T) (label, stateDir string) {
	t.Helper()
	sandboxtest.RequireDocker(t)
	t.Setenv(sandbox.ToolboxEnv, sandboxtest.Toolbox(t))
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	stateDir = filepath.Join(t.TempDir(), "state")
	t.Setenv("AGENT_STATE_DIR", stateDir)
	t.Setenv("AGENT_SANDBOX_IMAGE", sandboxtest.BusyboxImage)
	label = sandboxtest.TestLabel(t)
	c := sandboxtest.Client(t)
	t.Cleanup(func() {
		for _, ct := range sandboxtest.Containers(t, c, label) {
			_ = c.ContainerRemove(context.Background(), ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	})
	return label, stateDir
}

func demoRepo(t *testing.T) (repo, base string) {
	t.Helper()
	repo = filepath.Join(t.TempDir(), "repo")
	if out, err := exec.Command(filepath.Join(moduleRoot(), "demo", "setup.sh"), repo).CombinedOutput(); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	return repo, gitOut(t, repo, "rev-parse", "HEAD")
}

func writeScript(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func onlyTask(t *testing.T, stateDir string) *store.Task {
	t.Helper()
	st, err := store.Open(filepath.Join(stateDir, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := st.List()
	if err != nil || len(ts) != 1 {
		t.Fatalf("want one task, got %d (%v)", len(ts), err)
	}
	return ts[0]
}

// checkBothConversations checks that the task's one transcript holds both
// user messages, in order, each followed by its answer.
func checkBothConversations(t *testing.T, tk *store.Task) {
	t.Helper()
	_, msgs, err := session.Load(tk.Session)
	if err != nil {
		t.Fatal(err)
	}
	var users, finals []string
	for _, m := range msgs {
		if m.Role == llm.RoleUser {
			users = append(users, m.Content)
		}
		if m.Role == llm.RoleAssistant && len(m.ToolCalls) == 0 {
			finals = append(finals, m.Content)
		}
	}
	if len(users) != 2 || !strings.Contains(users[0], "Make greet.sh greet") || !strings.Contains(users[1], "also add tests") {
		t.Errorf("the transcript's user messages are %q, want the task and the follow-up", users)
	}
	if len(finals) != 2 || !strings.Contains(finals[1], "Added test_default.sh") {
		t.Errorf("the transcript's final answers are %q", finals)
	}
}

// TestContinueKeptTask: agent task -> keep -> agent continue "also add
// tests" with a scripted model that asserts the follow-up request carries
// the earlier turns -> a second commit on the branch, one transcript.
func TestContinueKeptTask(t *testing.T) {
	label, stateDir := taskEnv(t)
	repo, base := demoRepo(t)
	ios, _, _, errOut := TestStreams()
	f := NewFactory(ios)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	labels := []string{sandbox.LabelTest + "=" + label}
	demo := filepath.Join(moduleRoot(), "demo", "script.yaml")
	if err := taskRun(ctx, &TaskOptions{IO: ios, Factory: f, Prompt: "Make greet.sh greet the name given", Repo: repo,
		Approve: "keep", Labels: labels, Run: RunFlags{LLM: "script:" + demo, LLMSet: true}}); err != nil {
		t.Fatalf("task: %v\n%s", err, errOut.String())
	}
	tk := onlyTask(t, stateDir)
	if tk.State != store.Kept {
		t.Fatalf("task is %s, want kept", tk.State)
	}

	ios2, _, out2, errOut2 := TestStreams()
	f2 := NewFactory(ios2)
	defer f2.Close()
	err := continueRun(ctx, &ContinueOptions{IO: ios2, Factory: f2, Task: tk.ID, Prompt: "also add tests", Approve: "keep",
		Labels: labels, Run: RunFlags{LLM: "script:" + writeScript(t, followUpScript), LLMSet: true}})
	if err != nil {
		t.Fatalf("continue: %v\n%s\n%s", err, out2.String(), errOut2.String())
	}
	tk = onlyTask(t, stateDir)
	if tk.State != store.Kept || len(tk.FollowUps) != 1 {
		t.Errorf("after continue: state %s, follow-ups %q", tk.State, tk.FollowUps)
	}
	log := gitOut(t, repo, "log", "--format=%s", base+".."+tk.Branch)
	subjects := strings.Split(log, "\n")
	if len(subjects) != 2 || subjects[0] != "also add tests" {
		t.Errorf("branch commits: %q, want the follow-up's commit on top of the task's", subjects)
	}
	if files := gitOut(t, repo, "show", "--name-only", "--format=", tk.Branch); files != "test_default.sh" {
		t.Errorf("the follow-up commit holds %q", files)
	}
	if gitOut(t, repo, "rev-parse", "main") != base {
		t.Error("main moved")
	}
	checkBothConversations(t, tk)

	// Speed: the follow-up's first reply carried llama-server's timings.
	if !tk.Tokens.ServerTimings || tk.Tokens.PromptCached != 800 || tk.Tokens.Requests != 8 || tk.Tokens.GenPerSecond <= 0 {
		t.Errorf("speed totals: %+v", tk.Tokens)
	}
	if !strings.Contains(out2.String(), "Speed:") || !strings.Contains(out2.String(), "800 cached") {
		t.Errorf("the review shows no speed:\n%s", out2.String())
	}
	iosL, _, outL, _ := TestStreams()
	if err := taskLogRun(ctx, &TaskRefOptions{IO: iosL, Factory: NewFactory(iosL), Task: tk.ID}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(outL.String(), "Speed:") || !strings.Contains(outL.String(), "tok/s generated") {
		t.Errorf("agent log shows no speed:\n%s", outL.String())
	}
	iosT, _, outT, _ := TestStreams()
	if err := tasksRun(ctx, &TasksOptions{IO: iosT, Factory: NewFactory(iosT), JSON: true, All: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(outT.String(), `"prompt_cached": 800`) || !strings.Contains(outT.String(), `"gen_tokens_per_s"`) {
		t.Errorf("agent tasks --json has no speed:\n%s", outT.String())
	}
}

// TestRequestChangesInReview: the review form's Request changes, driven by
// keystrokes, continues the task with the typed message and comes back to
// the review, where keep ends it.
func TestRequestChangesInReview(t *testing.T) {
	label, stateDir := taskEnv(t)
	repo, base := demoRepo(t)
	demo, err := os.ReadFile(filepath.Join(moduleRoot(), "demo", "script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, string(demo)+followUpTurns(t))
	// An OS pipe, not io.Pipe: the review form runs twice on the same
	// input, and bubbletea can cancel a pending read only on a file (as
	// it does on a terminal); on an io.Pipe the first form's reader would
	// swallow the second form's first key.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out, errOut syncBuffer
	ios := &IOStreams{In: r, Out: &out, ErrOut: &errOut, InTTY: true, OutTTY: true}
	f := NewFactory(ios)
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		done <- taskRun(ctx, &TaskOptions{IO: ios, Factory: f, Prompt: "Make greet.sh greet the name given", Repo: repo,
			Approve: approveAsk, Labels: []string{sandbox.LabelTest + "=" + label}, Run: RunFlags{LLM: "script:" + script, LLMSet: true}})
	}()
	// Keep -> Discard -> Request changes, type the message, send it; the
	// second review shows two commits: keep.
	keys := []string{waitFor + "what should happen", keyDown, keyDown, keyEnter, waitFor + "What should the agent change?"}
	for _, c := range "also add tests" {
		keys = append(keys, string(c))
	}
	keys = append(keys, keyEnter, waitFor+"2 commit(s)", keyEnter)
	typeKeysInto(t, w, &errOut, keys...)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("agent task did not finish:\n%s", errOut.String())
	}
	_ = w.Close()
	tk := onlyTask(t, stateDir)
	if tk.State != store.Kept {
		t.Errorf("task is %s, want kept", tk.State)
	}
	if got := gitOut(t, repo, "rev-list", "--count", base+".."+tk.Branch); got != "2" {
		t.Errorf("branch has %s commits, want 2", got)
	}
	if !strings.Contains(out.String(), "continuing task "+tk.ID) {
		t.Errorf("no word of the continuation:\n%s", out.String())
	}
	checkBothConversations(t, tk)
}

// TestCheckoutThenContinue: agent checkout puts the branch in the user's
// checkout (git status there is clean, on the branch), refuses to overwrite
// a local change, and agent continue re-creates the worktree afterwards.
func TestCheckoutThenContinue(t *testing.T) {
	label, stateDir := taskEnv(t)
	repo, base := demoRepo(t)
	ios, _, _, errOut := TestStreams()
	f := NewFactory(ios)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	labels := []string{sandbox.LabelTest + "=" + label}
	demo := filepath.Join(moduleRoot(), "demo", "script.yaml")
	if err := taskRun(ctx, &TaskOptions{IO: ios, Factory: f, Prompt: "Make greet.sh greet the name given", Repo: repo,
		Approve: "keep", Labels: labels, Run: RunFlags{LLM: "script:" + demo, LLMSet: true}}); err != nil {
		t.Fatalf("task: %v\n%s", err, errOut.String())
	}
	tk := onlyTask(t, stateDir)

	// A local change to a file the branch changes: refused, nothing moves.
	greet := filepath.Join(repo, "greet.sh")
	orig, _ := os.ReadFile(greet)
	if err := os.WriteFile(greet, append(orig, []byte("# mine\n")...), 0o755); err != nil {
		t.Fatal(err)
	}
	iosC, _, outC, _ := TestStreams()
	err := checkoutRun(ctx, &TaskRefOptions{IO: iosC, Factory: NewFactory(iosC), Task: tk.ID})
	if err == nil || !strings.Contains(err.Error(), "greet.sh") || !strings.Contains(err.Error(), "overwrite") {
		t.Fatalf("checkout over a local change: %v, want a refusal naming greet.sh", err)
	}
	if gitOut(t, repo, "rev-parse", "--abbrev-ref", "HEAD") != "main" || !onlyTaskWorktreeExists(t, stateDir) {
		t.Fatal("a refused checkout changed something")
	}
	if err := os.WriteFile(greet, orig, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := checkoutRun(ctx, &TaskRefOptions{IO: iosC, Factory: NewFactory(iosC), Task: tk.ID}); err != nil {
		t.Fatalf("checkout: %v", err)
	}
	if !strings.Contains(outC.String(), "is on branch "+tk.Branch) {
		t.Errorf("checkout said: %s", outC.String())
	}
	if got := gitOut(t, repo, "rev-parse", "--abbrev-ref", "HEAD"); got != tk.Branch {
		t.Errorf("checkout is on %s, want %s", got, tk.Branch)
	}
	if st := gitOut(t, repo, "status", "--porcelain"); st != "" {
		t.Errorf("git status after checkout:\n%s", st)
	}
	if b, _ := os.ReadFile(greet); !strings.Contains(string(b), "${1:-world}") {
		t.Error("the checkout does not hold the branch's files")
	}
	if onlyTaskWorktreeExists(t, stateDir) {
		t.Error("the task's worktree was not released")
	}
	// The user commits on the branch in their own checkout.
	gitOut(t, repo, "-c", "user.name=u", "-c", "user.email=u@localhost", "commit", "--allow-empty", "-q", "-m", "user: a note")

	// While the branch is checked out, continue refuses and says why.
	ios2, _, _, _ := TestStreams()
	script := writeScript(t, followUpScript)
	err = continueRun(ctx, &ContinueOptions{IO: ios2, Factory: NewFactory(ios2), Task: tk.ID, Prompt: "also add tests", Approve: "keep",
		Labels: labels, Run: RunFlags{LLM: "script:" + script, LLMSet: true}})
	if err == nil || !strings.Contains(err.Error(), "checked out in") {
		t.Fatalf("continue with the branch checked out: %v", err)
	}
	gitOut(t, repo, "switch", "-q", "main")
	ios3, _, out3, errOut3 := TestStreams()
	if err := continueRun(ctx, &ContinueOptions{IO: ios3, Factory: NewFactory(ios3), Task: tk.ID, Prompt: "also add tests", Approve: "keep",
		Labels: labels, Run: RunFlags{LLM: "script:" + script, LLMSet: true}}); err != nil {
		t.Fatalf("continue after checkout: %v\n%s\n%s", err, out3.String(), errOut3.String())
	}
	subjects := gitOut(t, repo, "log", "--format=%s", base+".."+tk.Branch)
	if want := "also add tests\nuser: a note\nMake greet.sh greet the name given"; subjects != want {
		t.Errorf("branch log:\n%s\nwant:\n%s", subjects, want)
	}
	if !onlyTaskWorktreeExists(t, stateDir) {
		t.Error("continue did not re-create the worktree")
	}
}

func onlyTaskWorktreeExists(t *testing.T, stateDir string) bool {
	t.Helper()
	tk := onlyTask(t, stateDir)
	_, err := os.Stat(tk.Worktree)
	return err == nil && !tk.Released
}

// failingTestsScript runs a test that fails and ends there.
const failingTestsScript = `
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: note.txt, content: "hello\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {command: "sh test.sh"}}
  - expect: {last_role: tool, tool_result_contains: "FAIL"}
    text: "The test still fails."
`

// TestMergeIfGreen: with a failing last test run, --approve merge-if-green
// keeps the branch and exits with ExitNotGreen; with a passing one (the
// demo's script) it merges.
func TestMergeIfGreen(t *testing.T) {
	label, stateDir := taskEnv(t)
	labels := []string{sandbox.LabelTest + "=" + label}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	repo, base := demoRepo(t)
	ios, _, out, errOut := TestStreams()
	err := taskRun(ctx, &TaskOptions{IO: ios, Factory: NewFactory(ios), Prompt: "write a note", Repo: repo, Approve: "merge-if-green",
		JSON: true, Labels: labels, Run: RunFlags{LLM: "script:" + writeScript(t, failingTestsScript), LLMSet: true}})
	var ec *ExitCodeError
	if !errors.As(err, &ec) || ec.Code != ExitNotGreen {
		t.Fatalf("merge-if-green with failing tests: %v, want exit code %d\n%s", err, ExitNotGreen, errOut.String())
	}
	if code := exitCode(ios, err, false); code != ExitNotGreen {
		t.Errorf("exit code %d", code)
	}
	if gitOut(t, repo, "rev-parse", "main") != base {
		t.Error("main moved although the tests failed")
	}
	tk := onlyTask(t, stateDir)
	if tk.State != store.Kept || gitOut(t, repo, "branch", "--list", tk.Branch) == "" {
		t.Errorf("task %s, branch kept: %q", tk.State, gitOut(t, repo, "branch", "--list", tk.Branch))
	}
	if !strings.Contains(errOut.String(), "the last test run failed: sh test.sh") {
		t.Errorf("no reason given:\n%s", errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res["gate"] == nil {
		t.Errorf("the JSON result does not report the gate: %v %s", err, lines[len(lines)-1])
	}

	// Control: the same gate merges a task whose last test run passed.
	repo2, base2 := demoRepo(t)
	ios2, _, _, errOut2 := TestStreams()
	demo := filepath.Join(moduleRoot(), "demo", "script.yaml")
	if err := taskRun(ctx, &TaskOptions{IO: ios2, Factory: NewFactory(ios2), Prompt: "Make greet.sh greet the name given", Repo: repo2,
		Approve: "merge-if-green", Labels: labels, Run: RunFlags{LLM: "script:" + demo, LLMSet: true}}); err != nil {
		t.Fatalf("merge-if-green with passing tests: %v\n%s", err, errOut2.String())
	}
	if gitOut(t, repo2, "rev-parse", "main") == base2 {
		t.Error("passing tests were not merged")
	}
}

func TestReadPrompt(t *testing.T) {
	ios, _, _, _ := TestStreams()
	ios.In = strings.NewReader("from stdin\nsecond line\n")
	if p, err := readPrompt(ios, []string{"-"}, ""); err != nil || p != "from stdin\nsecond line\n" {
		t.Errorf("stdin: %q %v", p, err)
	}
	file := filepath.Join(t.TempDir(), "p.md")
	_ = os.WriteFile(file, []byte("from a file"), 0o600)
	if p, err := readPrompt(ios, nil, file); err != nil || p != "from a file" {
		t.Errorf("file: %q %v", p, err)
	}
	var ue *usageError
	if _, err := readPrompt(ios, []string{"x"}, file); !errors.As(err, &ue) {
		t.Errorf("argument and file: %v, want a usage error", err)
	}
	if _, err := readPrompt(ios, nil, ""); !errors.As(err, &ue) {
		t.Errorf("no prompt: %v, want a usage error", err)
	}
	ios.In = strings.NewReader("  \n")
	if _, err := readPrompt(ios, []string{"-"}, ""); err == nil {
		t.Error("an empty stdin prompt was accepted")
	}
	if p, err := readPrompt(ios, []string{"plain"}, ""); err != nil || p != "plain" {
		t.Errorf("argument: %q %v", p, err)
	}
}

// typeKeysInto is typeKeysShown for an OS pipe.
func typeKeysInto(t *testing.T, w io.Writer, shown *syncBuffer, keys ...string) {
	t.Helper()
	for _, k := range keys {
		text, ok := strings.CutPrefix(k, waitFor)
		if !ok {
			time.Sleep(40 * time.Millisecond)
			if _, err := w.Write([]byte(k)); err != nil {
				return
			}
			continue
		}
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(shown.String(), text) {
			if time.Now().After(deadline) {
				t.Fatalf("the form never showed %q:\n%s", text, shown.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestTermSafe(t *testing.T) {
	in := "ok\x1b]0;pwned\x07 \x1b[2J\rline\nnext\ttab \u202eevil \xff end"
	got := termtext.Text(in)
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u202e", "\xff"} {
		if strings.Contains(got, bad) {
			t.Errorf("termSafe left %q in %q", bad, got)
		}
	}
	if !strings.Contains(got, "line\nnext\ttab") || !strings.Contains(got, `\x1b]0;pwned`) {
		t.Errorf("termtext.Text(%q) = %q", in, got)
	}
	// Control: the raw text does hold what termSafe removes.
	if !strings.Contains(in, "\x1b") {
		t.Fatal("bad control")
	}
}

// TestContinueFailedTask: a task whose model request failed halfway is
// failed; agent continue goes on from its transcript with the follow-up.
func TestContinueFailedTask(t *testing.T) {
	label, stateDir := taskEnv(t)
	repo, base := demoRepo(t)
	labels := []string{sandbox.LabelTest + "=" + label}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	failing := writeScript(t, `
turns:
  - text: "I'll read the script first."
    tool_calls:
      - {name: read_file, arguments: {path: greet.sh}}
  - error: {status: 400, message: "scripted failure"}
`)
	ios, _, _, errOut := TestStreams()
	err := taskRun(ctx, &TaskOptions{IO: ios, Factory: NewFactory(ios), Prompt: "Make greet.sh greet the name given", Repo: repo,
		Approve: "keep", Labels: labels, Run: RunFlags{LLM: "script:" + failing, LLMSet: true}})
	if err == nil {
		t.Fatalf("the failing task succeeded:\n%s", errOut.String())
	}
	tk := onlyTask(t, stateDir)
	if tk.State != store.Failed {
		t.Fatalf("task is %s, want failed", tk.State)
	}
	followUp := writeScript(t, `
turns:
  - expect: {last_role: user, last_contains: "try again", contains: "Hello, world!"}
    tool_calls:
      - name: edit_file
        arguments: {path: greet.sh, old_string: 'echo "Hello, world!"', new_string: 'echo "Hello, ${1:-world}!"'}
  - expect: {last_role: tool}
    text: "Done."
`)
	ios2, _, out2, errOut2 := TestStreams()
	if err := continueRun(ctx, &ContinueOptions{IO: ios2, Factory: NewFactory(ios2), Task: tk.ID, Prompt: "try again", Approve: "keep",
		Labels: labels, Run: RunFlags{LLM: "script:" + followUp, LLMSet: true}}); err != nil {
		t.Fatalf("continue: %v\n%s\n%s", err, out2.String(), errOut2.String())
	}
	tk = onlyTask(t, stateDir)
	if tk.State != store.Kept || gitOut(t, repo, "log", "-1", "--format=%s", tk.Branch) != "try again" {
		t.Errorf("after continue: %s, last commit %q", tk.State, gitOut(t, repo, "log", "-1", "--format=%s", tk.Branch))
	}
	if gitOut(t, repo, "rev-list", "--count", base+".."+tk.Branch) != "1" {
		t.Error("want exactly the follow-up's commit on the branch")
	}
}

// A task that goes on asks for the served model this run names, never the
// .gguf file llm.model names for llm up.
func TestEndpointOverrideUsesTheServedModel(t *testing.T) {
	cfg := &Config{}
	cfg.LLM.Model, cfg.LLM.ServedModel = "/models/x.gguf", "served"
	t.Setenv("AGENT_LLM_MODEL", "/models/x.gguf")
	if _, model := endpointOverride(&RunFlags{}, cfg); model != "" {
		t.Fatalf("AGENT_LLM_MODEL alone overrode the task's model with %q", model)
	}
	if _, model := endpointOverride(&RunFlags{ModelSet: true}, cfg); model != "served" {
		t.Fatalf("--model gave %q, want the served model", model)
	}
	t.Setenv("AGENT_LLM_SERVED_MODEL", "served")
	if _, model := endpointOverride(&RunFlags{}, cfg); model != "served" {
		t.Fatalf("AGENT_LLM_SERVED_MODEL gave %q, want the served model", model)
	}
}

// A follow-up that goes to the task's recorded scripted model says so;
// one with --llm, or to a real model, does not (controls).
func TestNoteScriptedModel(t *testing.T) {
	for _, tc := range []struct {
		override, spec string
		note           bool
	}{{"", "script:/tmp/m.yaml", true}, {"http://127.0.0.1:8080", "http://127.0.0.1:8080", false}, {"", "http://127.0.0.1:8080", false}} {
		ios, _, _, errOut := TestStreams()
		noteScriptedModel(ios, tc.override, tc.spec)
		if got := strings.Contains(errOut.String(), "scripted (script:/tmp/m.yaml)"); got != tc.note {
			t.Errorf("%+v: %q", tc, errOut.String())
		}
	}
}
