package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// chatScript: the demo's turns for the first message, then a project
// command's expanded template as the next one.
func chatScript(t *testing.T) string {
	t.Helper()
	demo, err := os.ReadFile(filepath.Join(moduleRoot(), "demo", "script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return writeScript(t, string(demo)+`  - expect: {last_role: user, last_contains: "Please add a test for the default greeting", contains: "the user reverted your last commit"}
    tool_calls:
      - {name: write_file, arguments: {path: test_default.sh, content: "sh greet.sh\n"}}
  - expect: {last_role: tool}
    text: "Added test_default.sh."
`)
}

// TestChatLineMode: without a terminal, agent chat reads one message per
// line; the first starts a task, /diff shows its change, /undo reverts it
// (and the model is told), a project command's template is sent with its
// arguments, /merge merges and ends the session.
func TestChatLineMode(t *testing.T) {
	label, stateDir := taskEnv(t)
	repo, base := demoRepo(t)
	cmds := filepath.Join(repo, ".agent", "commands")
	if err := os.MkdirAll(cmds, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cmds, "addtest.md"), []byte("Please add a test for $ARGUMENTS.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, repo, "add", ".agent")
	gitOut(t, repo, "-c", "user.name=u", "-c", "user.email=u@localhost", "commit", "-qm", "commands")
	base = gitOut(t, repo, "rev-parse", "HEAD")

	ios, in, out, errOut := TestStreams()
	in.WriteString("Make greet.sh greet the name given\n/diff\n/undo\n/help\n/compact\n/addtest the default greeting\n/stats\n/merge\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := chatRun(ctx, &ChatOptions{IO: ios, Factory: NewFactory(ios), Repo: repo,
		Labels: []string{sandbox.LabelTest + "=" + label}, Run: RunFlags{LLM: "script:" + chatScript(t), LLMSet: true}})
	if err != nil {
		t.Fatalf("chat: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	got := errOut.String()
	for _, want := range []string{"> read_file greet.sh", `+echo "Hello, ${1:-world}!"`, "reverted the agent's last commit: Make greet.sh greet the name given",
		"/addtest", "your next message starts by compacting", "> write_file test_default.sh", "turns: 2 · commits: 3", "merged agent/"} {
		if !strings.Contains(got, want) {
			t.Errorf("chat output lacks %q:\n%s", want, got)
		}
	}
	// /compact ran at the start of the next turn.
	if !strings.Contains(got, "context compacted (hard)") && !strings.Contains(got, "nothing to compact") {
		t.Errorf("/compact did nothing visible:\n%s", got)
	}
	tk := onlyTask(t, stateDir)
	if tk.State != store.Merged {
		t.Errorf("task is %s, want merged", tk.State)
	}
	// main: the task's commit, its revert and the test, merged.
	if b, _ := os.ReadFile(filepath.Join(repo, "greet.sh")); strings.Contains(string(b), "${1:-world}") {
		t.Error("the undone change reached main")
	}
	if _, err := os.Stat(filepath.Join(repo, "test_default.sh")); err != nil {
		t.Error("the second turn's file is not in main")
	}
	if gitOut(t, repo, "rev-parse", "main") == base {
		t.Error("main did not move")
	}
}

// /plan in line mode: the next message runs in plan mode, so the model's
// write is refused as a tool result (the scripted model expects the
// refusal); the message after it runs normally and the same write lands
// (control: the write itself works).
func TestChatPlanLineMode(t *testing.T) {
	label, stateDir := taskEnv(t)
	repo, _ := demoRepo(t)
	script := writeScript(t, `model: plan
turns:
  - expect: {last_role: user, last_contains: "Write plan.txt"}
    tool_calls:
      - {name: write_file, arguments: {path: plan.txt, content: "planned\n"}}
  - expect: {last_role: tool, tool_result_contains: "write_file is not allowed yet: this task is in plan mode"}
    text: "Plan: write plan.txt."
  - expect: {last_role: user, last_contains: "Go ahead"}
    tool_calls:
      - {name: write_file, arguments: {path: plan.txt, content: "planned\n"}}
  - expect: {last_role: tool, tool_result_contains: "plan.txt"}
    text: "Wrote plan.txt."
`)
	ios, in, out, errOut := TestStreams()
	in.WriteString("/plan\nWrite plan.txt\nGo ahead\n/keep\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := chatRun(ctx, &ChatOptions{IO: ios, Factory: NewFactory(ios), Repo: repo,
		Labels: []string{sandbox.LabelTest + "=" + label}, Run: RunFlags{LLM: "script:" + script, LLMSet: true}})
	if err != nil {
		t.Fatalf("chat: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	got := errOut.String()
	for _, want := range []string{"your next message runs in plan mode", "not allowed yet", "Plan: write plan.txt.", "Wrote plan.txt."} {
		if !strings.Contains(got, want) {
			t.Errorf("chat output lacks %q:\n%s", want, got)
		}
	}
	tk := onlyTask(t, stateDir)
	if b := gitOut(t, repo, "show", tk.Branch+":plan.txt"); b != "planned" {
		t.Errorf("plan.txt on the branch: %q, want the write after plan mode to land", b)
	}
}

// A project command is read from the repository's own .agent/commands:
// a link at any of its steps (which could lead the read to any file of the
// host) makes it unknown; the same file without links is read.
func TestProjectCommandRefusesLinks(t *testing.T) {
	elsewhere := t.TempDir()
	if err := os.MkdirAll(filepath.Join(elsewhere, "commands"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "commands", "x.md"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	setup := func(t *testing.T, build func(agentDir string)) *chatSession {
		repo := t.TempDir()
		build(filepath.Join(repo, ".agent"))
		return &chatSession{opts: &ChatOptions{Repo: repo}}
	}
	real := func(agentDir string) {
		if err := os.MkdirAll(filepath.Join(agentDir, "commands"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(agentDir, "commands", "x.md"), []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Control: a real file in real directories is read.
	if got, err := setup(t, real).projectCommand("x"); err != nil || got != "secret" {
		t.Fatalf("control: %q, %v", got, err)
	}
	for name, build := range map[string]func(string){
		".agent is a link": func(a string) { must(t, os.Symlink(elsewhere, a)) },
		"commands is a link": func(a string) {
			must(t, os.MkdirAll(a, 0o755))
			must(t, os.Symlink(filepath.Join(elsewhere, "commands"), filepath.Join(a, "commands")))
		},
		"the file is a link": func(a string) {
			must(t, os.MkdirAll(filepath.Join(a, "commands"), 0o755))
			must(t, os.Symlink(filepath.Join(elsewhere, "commands", "x.md"), filepath.Join(a, "commands", "x.md")))
		},
	} {
		if got, err := setup(t, build).projectCommand("x"); err == nil {
			t.Errorf("%s: read %q through it", name, got)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ask_user in line mode: the question and its numbered options are
// printed, and the next line is the answer ("2" picks the second option,
// which the scripted model expects). Control: the same chat with the input
// ending before an answer gives the model no answer, so its expectation
// fails and nothing is written.
func TestChatAskUserLineMode(t *testing.T) {
	script := `model: ask
n_ctx: 4096
turns:
  - expect: {last_role: user, last_contains: "Greet someone"}
    tool_calls:
      - {name: ask_user, arguments: {question: "Whom should I greet?", options: ["Ada Lovelace", "Grace Hopper"]}}
  - expect: {last_role: tool, tool_result_contains: "The user answered: Grace Hopper"}
    tool_calls:
      - {name: write_file, arguments: {path: greeting.txt, content: "Hello, Grace Hopper\n"}}
  - text: "Greeted Grace Hopper."
`
	for _, tc := range []struct {
		name, input string
		wrote       bool
	}{{"answered", "Greet someone\n2\n/keep\n", true}, {"end of input (control)", "Greet someone\n", false}} {
		t.Run(tc.name, func(t *testing.T) {
			label, stateDir := taskEnv(t)
			repo, _ := demoRepo(t)
			ios, in, out, errOut := TestStreams()
			in.WriteString(tc.input)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			err := chatRun(ctx, &ChatOptions{IO: ios, Factory: NewFactory(ios), Repo: repo,
				Labels: []string{sandbox.LabelTest + "=" + label}, Run: RunFlags{LLM: "script:" + writeScript(t, script), LLMSet: true}})
			if err != nil {
				t.Fatalf("chat: %v\n%s\n%s", err, out.String(), errOut.String())
			}
			got := errOut.String()
			if !strings.Contains(got, "the agent asks: Whom should I greet?") || !strings.Contains(got, "2) Grace Hopper") {
				t.Errorf("the question was not shown:\n%s", got)
			}
			tk := onlyTask(t, stateDir)
			show := exec.Command("git", "show", tk.Branch+":greeting.txt")
			show.Dir = repo
			if wrote := show.Run() == nil; wrote != tc.wrote {
				t.Errorf("greeting.txt on the branch: %v, want %v\n%s", wrote, tc.wrote, got)
			}
		})
	}
}
