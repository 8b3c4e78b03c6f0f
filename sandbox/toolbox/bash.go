package toolbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// BashArgs are the arguments of the bash tool.
type BashArgs struct {
	Command string `json:"command"`
	// Timeout is in seconds; 0 means Limits.DefaultTimeout, and more than
	// Limits.MaxTimeout is lowered to it.
	Timeout float64 `json:"timeout,omitempty"`
}

// drainGrace is how long output is still collected after the command's
// process group is gone. Only a process that left the group (setsid) can
// still hold the pipe then; it must not hold the call hostage.
const drainGrace = 100 * time.Millisecond

func (s *Server) bash(ctx context.Context, raw json.RawMessage) Response {
	var a BashArgs
	if r := decodeArgs(ToolBash, raw, &a); r != nil {
		return *r
	}
	if a.Command == "" {
		return errorf("invalid arguments for bash: command is required")
	}
	if a.Timeout < 0 || math.IsNaN(a.Timeout) || math.IsInf(a.Timeout, 0) {
		return errorf("invalid arguments for bash: timeout must be a positive number of seconds")
	}
	lim := s.limits()
	timeout := lim.DefaultTimeout
	note := ""
	switch {
	case a.Timeout > lim.MaxTimeout.Seconds():
		timeout = lim.MaxTimeout + 1 // converting a huge float would overflow
	case a.Timeout > 0:
		timeout = time.Duration(a.Timeout * float64(time.Second))
	}
	if timeout > lim.MaxTimeout {
		note = fmt.Sprintf("[timeout lowered from %gs to the maximum %s]\n", a.Timeout, lim.MaxTimeout)
		timeout = lim.MaxTimeout
	}
	shell, ok := s.shell()
	if !ok {
		return errorf("this image has no %s, so the bash tool cannot run commands; the file tools (read_file, write_file, edit_file, list_dir, glob, grep) still work, or use an image that has a shell", shell)
	}

	res := s.run(ctx, shell, a.Command, timeout)
	res.Output = note + res.Output
	return res
}

// defaultShells are tried in order when Server.Shell is empty: bash, which
// models write, where the image has it, else /bin/sh, the one shell every
// image that has a shell provides.
var defaultShells = []string{"/bin/bash", "/bin/sh"}

// shell is the shell that runs the bash tool's commands, and whether it
// exists. Looking inside the container costs a stat per call, and the choice
// is the same however the call arrives (session or one exec per call).
func (s *Server) shell() (string, bool) {
	if s.Shell != "" {
		_, err := os.Stat(s.Shell)
		return s.Shell, err == nil
	}
	for _, sh := range defaultShells {
		if _, err := os.Stat(sh); err == nil {
			return sh, true
		}
	}
	return defaultShells[len(defaultShells)-1], false
}

// pipefailProbe turns pipefail on in a POSIX shell that has it (busybox
// ash, ksh, zsh, newer dash) and is a no-op in one that has not: the probe
// runs in a subshell, so an unknown option cannot end the command.
const pipefailProbe = "(set -o pipefail) 2>/dev/null && set -o pipefail\n"

// shellArgs are the arguments that make shell run command with pipefail
// where the shell has it: `go test ./... | tail -5` then exits with the
// tests' status, not tail's. Models pipe test output through tail, head
// or grep to keep it short, and without pipefail every failing run so
// piped reads as a success. Shells that are not POSIX-like get command
// as it is.
func shellArgs(shell, command string) []string {
	switch filepath.Base(shell) {
	case "bash":
		return []string{"-o", "pipefail", "-c", command}
	case "sh", "ash", "dash", "ksh", "mksh", "zsh":
		return []string{"-c", pipefailProbe + command}
	}
	return []string{"-c", command}
}

// run executes command in its own process group with both output streams
// on one pipe, so the model sees them interleaved as a terminal would.
func (s *Server) run(ctx context.Context, shell, command string, timeout time.Duration) Response {
	pr, pw, err := os.Pipe()
	if err != nil {
		return errorf("cannot run the command: %v", err)
	}
	cmd := exec.Command(shell, shellArgs(shell, command)...)
	cmd.Dir = s.root()
	// Giving *os.File to both streams passes the pipe straight to the child:
	// no copying goroutines inside exec, so Wait returns when the shell
	// exits, not when the last holder of the pipe lets go.
	cmd.Stdout = pw
	cmd.Stderr = pw
	// A new process group lets one kill(-pgid) reach every process the
	// command started, which is the only way to stop them: the engine has
	// no call that kills an exec'd process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	oomBefore := s.oomKills()
	err = s.startShell(cmd)
	pw.Close()
	if err != nil {
		pr.Close()
		if errors.Is(err, syscall.EAGAIN) {
			return errorf("cannot start %s: the sandbox's process limit is reached (%v); end some running processes and try again", shell, err)
		}
		return errorf("cannot start %s: %v", shell, err)
	}
	pgid := cmd.Process.Pid

	out := newCapBuffer(s.limits().OutputBytes)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(out, pr)
	}()
	waitDone := make(chan struct{})
	go func() {
		defer close(waitDone)
		_ = cmd.Wait() // the status is read from cmd.ProcessState
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, cancelled bool
	select {
	case <-waitDone:
	case <-timer.C:
		timedOut = true
		killGroup(pgid)
		<-waitDone
	case <-ctx.Done():
		cancelled = true
		killGroup(pgid)
		<-waitDone
	}
	// Nothing the command started survives the call, including background
	// jobs ("sleep 1000 &") that the shell left behind when it exited.
	killGroup(pgid)
	_ = pr.SetReadDeadline(time.Now().Add(drainGrace))
	<-readDone
	pr.Close()
	s.shellDone(pgid)

	code, signal := exitStatus(cmd.ProcessState)
	oom := !timedOut && !cancelled &&
		(signal == syscall.SIGKILL || code == 128+int(syscall.SIGKILL)) &&
		s.oomKills() > oomBefore && oomBefore >= 0

	text, truncated := out.String()
	if text == "" {
		text = "(no output)\n"
	} else if text[len(text)-1] != '\n' {
		text += "\n"
	}
	resp := Response{ExitCode: &code, TimedOut: timedOut, OOMKilled: oom, Truncated: truncated}
	switch {
	case timedOut:
		text += fmt.Sprintf("[timed out after %s: the command and every process it started were killed]", timeout)
	case cancelled:
		text += "[cancelled: the command and every process it started were killed]"
	case oom:
		text += fmt.Sprintf("[killed by the out-of-memory killer: the sandbox's memory limit was reached (exit code %d)]", code)
	case signal != 0:
		text += fmt.Sprintf("[killed by signal %s (exit code %d)]", signal, code)
	case code != 0:
		text += fmt.Sprintf("[exit code %d]", code)
	}
	resp.Output = text
	resp.IsError = code != 0 || timedOut || cancelled
	return resp
}

// exitStatus gives the shell's exit code the way a shell reports it:
// 128+N for death by signal N.
func exitStatus(ps *os.ProcessState) (int, syscall.Signal) {
	if ps == nil {
		return -1, 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal()
	}
	return ps.ExitCode(), 0
}
