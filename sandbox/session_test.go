package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

// Concurrent calls share one session and each gets its own answer.
func TestConcurrentToolCalls(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ws := t.TempDir()
	for i := 0; i < 16; i++ {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%d.txt", i)), []byte(fmt.Sprintf("content %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb := sandboxtest.New(t, e, sandbox.Spec{Workspace: ws})
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				r, err := sb.Tool(context.Background(), toolbox.ToolReadFile, []byte(fmt.Sprintf(`{"path":"f%d.txt"}`, i)))
				if err != nil || !strings.Contains(r.Output, fmt.Sprintf("content %d\n", i)) {
					t.Errorf("call %d: %+v %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Cancelling a call's context returns at once and stops the command.
func TestToolCancel(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sb := sandboxtest.New(t, e, sandbox.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := sb.Tool(ctx, toolbox.ToolBash, []byte(`{"command":"sleep 600","timeout":600}`))
	// "At once" against the command's 600 s: the bound leaves room for a
	// loaded machine.
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 60*time.Second {
		t.Fatalf("cancelled call: %v after %v", err, time.Since(start))
	}
	var ps string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ps = sh(t, sb, "ps -o pid,comm").Output
		if !strings.Contains(ps, "sleep") {
			return
		}
	}
	t.Errorf("cancelled command still running:\n%s", ps)
}

// When the session's process dies, calls fall back to one exec per call,
// and a session is opened again later.
func TestSessionDeathFallsBack(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("alpha\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := sandboxtest.New(t, e, sandbox.Spec{Workspace: ws})
	read := func() {
		t.Helper()
		if r := tool(t, sb, toolbox.ToolReadFile, map[string]any{"path": "a.txt"}); r.IsError || !strings.Contains(r.Output, "alpha") {
			t.Fatalf("read_file: %+v", r)
		}
	}
	read()
	// Kill every toolbox serve process from a separate exec.
	res, err := sb.Run(context.Background(), "sh", "-c", `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "/.agent/toolbox serve "*) kill -9 ${p#/proc/} && echo killed;; esac; done`)
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "killed") {
		t.Fatalf("killing the session: %+v %v", res, err)
	}
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 3; i++ {
		read() // through the fallback while the session backs off
	}
	time.Sleep(2500 * time.Millisecond) // longer than the reopen back-off
	read()                              // reopens
	// The session is back: a toolbox serve process runs again. (Timing the
	// next call instead would flake on a loaded machine.)
	res, err = sb.Run(context.Background(), "sh", "-c", countServes)
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "1" {
		t.Errorf("toolbox serve processes after reopening: %q %v", res.Stdout, err)
	}
}

// countServes prints how many toolbox serve processes run in the sandbox.
const countServes = `n=0; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "/.agent/toolbox serve"*) n=$((n+1));; esac; done; echo $n`

func TestExecStreamsAndPropagates(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sb := sandboxtest.New(t, e, sandbox.Spec{})
	var out, errOut strings.Builder
	res, err := sb.Exec(context.Background(), sandbox.ExecOptions{
		Cmd:   []string{"sh", "-c", "tr a-z A-Z; echo oops >&2; exit 7"},
		Stdin: strings.NewReader("hello\n"), Stdout: &out, Stderr: &errOut,
	})
	if err != nil || res.ExitCode != 7 || out.String() != "HELLO\n" || errOut.String() != "oops\n" {
		t.Errorf("exec: %+v %v stdout %q stderr %q", res, err, out.String(), errOut.String())
	}
	res, err = sb.Exec(context.Background(), sandbox.ExecOptions{Cmd: []string{"sh", "-c", "tty; echo $TERM"}, TTY: true, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("tty exec: %+v %v %q", res, err, out.String())
	}
	res, err = sb.Run(context.Background(), "/no/such/program")
	if err != nil || res.ExitCode == 0 {
		t.Errorf("missing program: %+v %v", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := sb.Run(ctx, "sleep", "5"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("cancelled exec: %v after %v", err, time.Since(start))
	}
}

// The bash tool runs bash where the image has it, /bin/sh otherwise, and an
// explicit Spec.Shell wins.
func TestBashToolShell(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	const probe = `echo "bash=${BASH_VERSION:-none}"`
	debian := sandboxtest.New(t, e, sandbox.Spec{Image: sandboxtest.SandboxImage})
	if r := sh(t, debian, probe); r.IsError || strings.Contains(r.Output, "bash=none") {
		t.Errorf("image with bash: %+v", r)
	}
	// The per-call fallback chooses the same shell as the session.
	debian.Close()
	if r := sh(t, debian, probe); r.IsError || strings.Contains(r.Output, "bash=none") {
		t.Errorf("image with bash, one exec per call: %+v", r)
	}
	// Control: the same probe under /bin/sh (dash) shows no bash.
	dash := sandboxtest.New(t, e, sandbox.Spec{Image: sandboxtest.SandboxImage, Shell: "/bin/sh"})
	if r := sh(t, dash, probe); !strings.Contains(r.Output, "bash=none") {
		t.Errorf("explicit /bin/sh: %+v", r)
	}
	if got, err := e.Get(context.Background(), dash.ID); err != nil || got.Labels[sandbox.LabelShell] != "/bin/sh" {
		t.Errorf("shell label: %v %v", got, err)
	}
	busybox := sandboxtest.New(t, e, sandbox.Spec{})
	if r := sh(t, busybox, probe); r.IsError || !strings.Contains(r.Output, "bash=none") {
		t.Errorf("busybox: %+v", r)
	}
}
