package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chatTUIScript: the demo's turns for the first message; a long reply that
// stalls halfway (Ctrl-C stops it); a short one after it.
const chatTUIScript = `
model: chat
n_ctx: 16384
chunk: 4
turns:
  - text: "I'll read the script and its test first."
    tool_calls:
      - {name: read_file, arguments: {path: greet.sh}}
      - {name: read_file, arguments: {path: test.sh}}
  - expect: {last_role: tool, tool_result_contains: "Hello, world!"}
    text: "Let me run the tests to see what fails."
    tool_calls:
      - {name: bash, arguments: {command: "sh test.sh"}}
  - expect: {last_role: tool, tool_result_contains: "FAIL"}
    text: "greet.sh ignores its argument. I'll use it, with world as the default."
    tool_calls:
      - name: edit_file
        arguments:
          path: greet.sh
          old_string: 'echo "Hello, world!"'
          new_string: 'echo "Hello, ${1:-world}!"'
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {command: "sh test.sh"}}
  - expect: {last_role: tool, tool_result_contains: "PASS"}
    reasoning: "The test passes now; I should say so briefly."
    text: "Done: greet.sh now greets the name given as its first argument (default: world), and sh test.sh passes."
  - expect: {last_role: user, last_contains: "essay"}
    stall: 120s
    text: "Greetings have a long history. ESSAYSTART Every culture greets in its own way, and a shell script is no exception. It prints, it waits, it prints again; the rest of this essay never arrives because the user stops it."
  - expect: {last_role: user, last_contains: "say hi"}
    text: "Hi! STILLHERE"
`

type tmuxSession struct {
	t      *testing.T
	socket string
	name   string
}

func (s *tmuxSession) tmux(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (s *tmuxSession) capture() string { return s.tmux("capture-pane", "-p", "-t", s.name) }

func (s *tmuxSession) keys(keys ...string) {
	s.t.Helper()
	s.tmux(append([]string{"send-keys", "-t", s.name}, keys...)...)
}

// typeLine types text literally, then Enter.
func (s *tmuxSession) typeLine(text string) {
	s.t.Helper()
	s.tmux("send-keys", "-t", s.name, "-l", text)
	s.keys("Enter")
}

func (s *tmuxSession) waitFor(text string, d time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		c := s.capture()
		if strings.Contains(c, text) {
			return c
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the screen never showed %q:\n%s", text, c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestChatTUI drives `agent chat` in a pseudo-terminal (tmux): a prompt, a
// streamed reply, tool calls rendered, /diff showing the change, Ctrl-C
// during a long reply stopping it while the session goes on, and /merge
// merging. The screens at 80 and 160 columns are logged (and written to
// $AGENT_CHAT_SCREENS when set).
func TestChatTUI(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	base := Git(t, repo, "rev-parse", "main")
	dir := t.TempDir()
	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(script, []byte(chatTUIScript), 0o600); err != nil {
		t.Fatal(err)
	}
	// The command the terminal runs: the test's environment, then agent.
	var sh strings.Builder
	sh.WriteString("#!/bin/sh\n")
	for _, kv := range env.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && (strings.HasPrefix(k, "AGENT_") || k == "XDG_CONFIG_HOME" || k == "PATH" || k == "HOME" || k == "DOCKER_HOST") {
			sh.WriteString("export " + k + "='" + strings.ReplaceAll(v, "'", `'\''`) + "'\n")
		}
	}
	sh.WriteString("export TERM=xterm-256color\ncd '" + repo + "'\nexec '" + env.Bin + "' chat --llm script:" + script + " " + env.LabelFlag() + "\n")
	wrapper := filepath.Join(dir, "chat.sh")
	if err := os.WriteFile(wrapper, []byte(sh.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	s := &tmuxSession{t: t, socket: "agent-chat-test-" + env.Label, name: "chat"}
	s.tmux("new-session", "-d", "-s", s.name, "-x", "80", "-y", "30", wrapper)
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
	s.tmux("set-option", "-t", s.name, "remain-on-exit", "on")
	screens := map[string]string{}

	s.waitFor("message, or /help", 30*time.Second)
	s.typeLine("Make greet.sh greet the name given")
	s.waitFor("Done: greet.sh now greets", time.Minute)
	screen := s.waitFor("ready ·", 30*time.Second)
	for _, want := range []string{"you: Make greet.sh greet", "> read_file greet.sh", "> bash $ sh test.sh → exit 1", "> edit_file greet.sh → ok",
		"▸ thinking", "tokens", "context", "tok/s"} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen lacks %q:\n%s", want, screen)
		}
	}
	screens["80 columns, after the first reply"] = screen
	s.keys("C-t")
	screens["80 columns, thinking shown"] = s.waitFor("thinking: The test passes now", 10*time.Second)
	s.keys("C-t")
	s.keys("C-o")
	screen = s.waitFor(`+ echo "Hello, ${1:-world}!"`, 10*time.Second)
	if !strings.Contains(screen, "    PASS") {
		t.Errorf("the passing test run's output is not shown under it:\n%s", screen)
	}
	screens["80 columns, tool details shown"] = screen
	s.keys("C-o")

	s.typeLine("/diff")
	screen = s.waitFor(`+echo "Hello, ${1:-world}!"`, 30*time.Second)
	screens["80 columns, /diff"] = screen

	s.tmux("resize-window", "-t", s.name, "-x", "160", "-y", "30")
	s.typeLine("now write a long essay about greetings")
	s.waitFor("ESSAYSTART", time.Minute)
	screens["160 columns, a long reply streaming"] = s.capture()
	s.keys("C-c")
	screen = s.waitFor("generation stopped", 30*time.Second)
	if strings.Contains(screen, "never arrives") {
		t.Error("the reply went on after Ctrl-C")
	}
	screens["160 columns, after Ctrl-C"] = screen
	s.typeLine("say hi")
	s.waitFor("STILLHERE", time.Minute)
	s.waitFor("ready ·", 30*time.Second)
	s.typeLine("/merge")
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(s.tmux("list-panes", "-t", s.name, "-F", "#{pane_dead}"), "1") {
		if time.Now().After(deadline) {
			t.Fatalf("agent chat did not end after /merge:\n%s", s.capture())
		}
		time.Sleep(100 * time.Millisecond)
	}
	screen = s.tmux("capture-pane", "-p", "-J", "-S", "-100", "-t", s.name)
	screens["after /merge"] = screen
	if !strings.Contains(screen, "merged agent/") {
		t.Errorf("no word of the merge:\n%s", screen)
	}
	if Git(t, repo, "rev-parse", "main") == base {
		t.Error("main did not move")
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "greet.sh")); !strings.Contains(string(b), "${1:-world}") {
		t.Error("the merge did not reach the checkout")
	}
	var all strings.Builder
	for _, k := range []string{"80 columns, after the first reply", "80 columns, thinking shown", "80 columns, tool details shown", "80 columns, /diff",
		"160 columns, a long reply streaming", "160 columns, after Ctrl-C", "after /merge"} {
		all.WriteString("==== " + k + " ====\n" + screens[k] + "\n")
	}
	t.Log("\n" + all.String())
	if p := os.Getenv("AGENT_CHAT_SCREENS"); p != "" {
		_ = os.WriteFile(p, []byte(all.String()), 0o644)
	}
}

// TestChatTUIAskUser: in the chat's terminal view, ask_user shows the
// question with numbered options and the next line typed is the answer:
// "2" picks Grace Hopper, which the scripted model expects before it
// writes the greeting (so the file on the branch shows the answer arrived).
func TestChatTUIAskUser(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(script, []byte(askUserScript), 0o600); err != nil {
		t.Fatal(err)
	}
	var sh strings.Builder
	sh.WriteString("#!/bin/sh\n")
	for _, kv := range env.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && (strings.HasPrefix(k, "AGENT_") || k == "XDG_CONFIG_HOME" || k == "PATH" || k == "HOME" || k == "DOCKER_HOST") {
			sh.WriteString("export " + k + "='" + strings.ReplaceAll(v, "'", `'\''`) + "'\n")
		}
	}
	sh.WriteString("export TERM=xterm-256color\ncd '" + repo + "'\nexec '" + env.Bin + "' chat --llm script:" + script + " " + env.LabelFlag() + "\n")
	wrapper := filepath.Join(dir, "chat.sh")
	if err := os.WriteFile(wrapper, []byte(sh.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	s := &tmuxSession{t: t, socket: "agent-chat-ask-" + env.Label, name: "chat"}
	s.tmux("new-session", "-d", "-s", s.name, "-x", "100", "-y", "30", wrapper)
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
	s.tmux("set-option", "-t", s.name, "remain-on-exit", "on")

	s.waitFor("message, or /help", 30*time.Second)
	s.typeLine("Greet someone")
	screen := s.waitFor("the agent asks: Whom should I greet?", time.Minute)
	if !strings.Contains(screen, "2) Grace Hopper") {
		t.Errorf("the options are not shown:\n%s", screen)
	}
	s.typeLine("2")
	s.waitFor("Greeted Grace Hopper.", time.Minute)
	s.waitFor("ready ·", 30*time.Second)
	s.typeLine("/keep")
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(s.tmux("list-panes", "-t", s.name, "-F", "#{pane_dead}"), "1") {
		if time.Now().After(deadline) {
			t.Fatalf("agent chat did not end after /keep:\n%s", s.capture())
		}
		time.Sleep(100 * time.Millisecond)
	}
	tk := newestTask(t, env.StateDir)
	if got := Git(t, repo, "show", tk.Branch+":greeting.txt"); got != "Hello, Grace Hopper" {
		t.Errorf("greeting.txt on the branch: %q", got)
	}
}
