package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the master for the test, the
// slave for the process under test (its stdin, stdout and stderr).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pty slave: %v", err)
	}
	_ = unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 100})
	t.Cleanup(func() { _ = m.Close(); _ = s.Close() })
	return m, s
}

// Ctrl-C on the approval form, on a real terminal: the branch is kept and
// agent exits 130 (DESIGN: 130 interrupted). Control: Enter on the same
// form exits 0.
func TestApprovalFormCtrlCExits130(t *testing.T) {
	c := RequireEngine(t)
	for _, tc := range []struct {
		name string
		key  string
		code int
	}{{"ctrl-c", "\x03", 130}, {"enter (control)", "\r", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			env := NewAgentEnv(t, c)
			repo := NewSampleRepo(t)
			master, slave := openPTY(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := env.Command(ctx, repo, "task", "--llm", "script:"+writeScript(t, quickScript), env.LabelFlag(), "Make greet.sh greet the name given")
			cmd.Env = append(cmd.Env, "TERM=xterm")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var screen bytes.Buffer
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := master.Read(buf)
					mu.Lock()
					screen.Write(buf[:n])
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
			shown := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return strings.Contains(screen.String(), "what should happen to its branch")
			}
			for deadline := time.Now().Add(90 * time.Second); !shown(); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					mu.Lock()
					t.Fatalf("the form never showed:\n%q", screen.String())
				}
			}
			time.Sleep(300 * time.Millisecond) // the form reads keys once it has drawn
			if _, err := master.Write([]byte(tc.key)); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				mu.Lock()
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, screen.String())
			}
			task := onlyTask(t, env.StateDir)
			if task.State != "kept" {
				t.Errorf("task state %s, want kept", task.State)
			}
			if Git(t, repo, "branch", "--list", "agent/*") == "" {
				t.Error("the branch is gone")
			}
		})
	}
}

// runOnPTY runs agent with a terminal as stdin, stdout and stderr and
// returns everything it wrote and its exit code.
func runOnPTY(t *testing.T, env *AgentEnv, dir string, extraEnv []string, args ...string) (string, int) {
	t.Helper()
	master, slave := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := env.Command(ctx, dir, args...)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	var screen bytes.Buffer
	done := make(chan struct{})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	err := cmd.Wait()
	_ = slave.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return screen.String(), code
}

var sgr = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// On a terminal: colour for states and the review; none under NO_COLOR; no
// escape byte at all under TERM=dumb (no status line, no form).
func TestTerminalColourAndDumb(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	script := writeScript(t, quickScript)

	// TERM=dumb: the whole task run, review included, holds no ESC.
	out, code := runOnPTY(t, env, repo, []string{"TERM=dumb"}, "task", "--llm", "script:"+script, "--approve", "keep", env.LabelFlag(), "Make greet.sh greet the name given")
	if code != 0 {
		t.Fatalf("task under TERM=dumb: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "\x1b") || !strings.Contains(out, "kept branch") {
		t.Errorf("TERM=dumb run holds ESC (or did not finish):\n%q", out)
	}
	for _, tc := range []struct {
		name   string
		env    []string
		wantSG bool // colour (SGR) expected
	}{
		{"colour terminal (control)", []string{"TERM=xterm"}, true},
		{"NO_COLOR", []string{"TERM=xterm", "NO_COLOR=1"}, false},
		{"TERM=dumb", []string{"TERM=dumb"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{{"tasks"}, {"doctor"}} {
				out, _ := runOnPTY(t, env, repo, tc.env, args...)
				if strings.Contains(strings.Join(tc.env, " "), "TERM=dumb") && strings.Contains(out, "\x1b") {
					t.Errorf("agent %s under TERM=dumb holds ESC: %q", args[0], out)
				}
				// Colour is SGR (ESC [ ... m). The form library's start-up
				// query for the background colour (OSC 11, CSI 6n, from
				// bubbletea's init) is not colour; TERM=dumb stops it too.
				if has := sgr.MatchString(out); has != tc.wantSG {
					t.Errorf("agent %s: colour %v, want %v:\n%q", args[0], has, tc.wantSG, out)
				}
			}
		})
	}
}

// askUserScript asks whom to greet and writes the greeting only when the
// answer it was sent is Grace Hopper (the scripted server refuses the
// request otherwise, so no file is written).
const askUserScript = `model: ask
n_ctx: 16384
turns:
  - tool_calls:
      - {name: ask_user, arguments: {question: "Whom should I greet?", options: ["Ada Lovelace", "Grace Hopper"]}}
  - expect: {last_role: tool, tool_result_contains: "Grace Hopper"}
    tool_calls:
      - {name: write_file, arguments: {path: greeting.txt, content: "Hello, Grace Hopper\n"}}
  - text: "Greeted Grace Hopper."
`

// ask_user answered through its form on a real terminal: the option picked
// with the arrow key and Enter is the tool result the model receives, and
// the task goes on to the approval form. Control: Enter alone picks the
// first option, the model's expectation fails and nothing is written.
func TestAskUserAnsweredOnPTY(t *testing.T) {
	c := RequireEngine(t)
	for _, tc := range []struct {
		name  string
		keys  string
		wrote bool
	}{{"down, enter picks the second option", "\x1b[B\r", true}, {"enter picks the first (control)", "\r", false}} {
		t.Run(tc.name, func(t *testing.T) {
			env := NewAgentEnv(t, c)
			repo := NewSampleRepo(t)
			master, slave := openPTY(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := env.Command(ctx, repo, "task", "--llm", "script:"+writeScript(t, askUserScript), env.LabelFlag(), "Greet someone")
			cmd.Env = append(cmd.Env, "TERM=xterm")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var mu sync.Mutex
			var screen bytes.Buffer
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := master.Read(buf)
					mu.Lock()
					screen.Write(buf[:n])
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
			seen := func() string {
				mu.Lock()
				defer mu.Unlock()
				return screen.String()
			}
			// waitFor waits for text on the screen after offset from; false
			// when the process ended first.
			waitFor := func(text string, from int) (int, bool) {
				for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					s := seen()
					if i := strings.Index(s[from:], text); i >= 0 {
						return from + i + len(text), true
					}
					select {
					case err := <-exited:
						exited <- err
						return 0, false
					default:
					}
					if time.Now().After(deadline) || (from == 0 && strings.Contains(s, "what should happen to its branch")) {
						t.Fatalf("%q never showed:\n%q", text, s)
					}
				}
			}
			at, ok := waitFor("The agent asks: Whom should I greet?", 0)
			if !ok || strings.Contains(seen()[:at], "what should happen to its branch") {
				t.Fatalf("ended before the question:\n%s", seen())
			}
			time.Sleep(300 * time.Millisecond) // the form reads keys once it has drawn
			for _, k := range strings.SplitAfter(tc.keys, "\x1b[B") {
				if _, err := master.Write([]byte(k)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if _, ok := waitFor("what should happen to its branch", at); ok {
				time.Sleep(300 * time.Millisecond)
				if _, err := master.Write([]byte("\r")); err != nil {
					t.Fatal(err)
				}
			} else if tc.wrote {
				t.Fatalf("ended before the approval form:\n%s", seen())
			}
			var err error
			select {
			case err = <-exited:
			case <-ctx.Done():
				t.Fatalf("agent did not exit:\n%s", seen())
			}
			if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
				t.Fatal(err)
			}
			task := onlyTask(t, env.StateDir)
			got, gerr := exec.Command("git", "-C", repo, "show", task.Branch+":greeting.txt").Output()
			if tc.wrote {
				if err != nil || gerr != nil || string(got) != "Hello, Grace Hopper\n" {
					t.Fatalf("want the greeting on %s and exit 0: exit %v, file %q (%v)\n%s", task.Branch, err, got, gerr, seen())
				}
			} else if gerr == nil {
				t.Fatalf("control: the greeting was written though the first option was picked:\n%s", seen())
			}
		})
	}
}
