package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Stdio is a long-running command in the sandbox whose standard input and
// output are streams (an MCP server speaking JSON-RPC over stdio). It runs
// through the Engine's exec API like every other command: nothing of it
// runs on the host.
type Stdio struct {
	// Stdout is the command's standard output.
	Stdout io.ReadCloser
	// Stdin is the command's standard input; closing it ends the input.
	Stdin io.WriteCloser
	// Done is closed when the command has exited (or the exec failed).
	Done <-chan struct{}

	pidFile string
	sb      *Sandbox
	stop    sync.Once
}

// StartStdio starts cmd in the sandbox with piped standard streams. Its
// standard error is discarded. The command's pid is recorded inside the
// sandbox so that Stop (and StopProcesses) can kill it: the Engine API has
// no call that kills an exec'd process.
func (s *Sandbox) StartStdio(ctx context.Context, cmd []string, env []string) (*Stdio, error) {
	if len(cmd) == 0 {
		return nil, fmt.Errorf("stdio: no command given")
	}
	if err := s.waitHold(ctx); err != nil {
		return nil, err
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	pidFile := "/tmp/.agent-stdio-" + hex.EncodeToString(rb[:]) + ".pid"
	full := append([]string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, pidFile}, cmd...)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	p := &Stdio{Stdout: outR, Stdin: inW, Done: done, pidFile: pidFile, sb: s}
	go func() {
		defer close(done)
		_, err := s.Exec(context.WithoutCancel(ctx), ExecOptions{Cmd: full, Env: env, Stdin: inR, Stdout: outW})
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	s.mu.Lock()
	// Commands that already exited need no stop: drop them, so that a
	// server restarted again and again does not grow the list.
	live := s.stdio[:0]
	for _, q := range s.stdio {
		select {
		case <-q.Done:
		default:
			live = append(live, q)
		}
	}
	s.stdio = append(live, p)
	s.mu.Unlock()
	return p, nil
}

// Stop ends the command: its input is closed and the process is killed
// inside the sandbox.
func (p *Stdio) Stop(ctx context.Context) error {
	var err error
	p.stop.Do(func() {
		_ = p.Stdin.Close()
		args, _ := json.Marshal(map[string]any{
			"command": fmt.Sprintf(`[ -f %s ] && kill -9 "$(cat %s)" 2>/dev/null; rm -f %s; true`, p.pidFile, p.pidFile, p.pidFile),
			"timeout": 10,
		})
		_, err = p.sb.Tool(ctx, "bash", args)
		_ = p.Stdout.Close()
	})
	return err
}

// stopStdio stops every Stdio command of s and returns how many it stopped.
func (s *Sandbox) stopStdio(ctx context.Context) (int, error) {
	s.mu.Lock()
	list := s.stdio
	s.stdio = nil
	s.mu.Unlock()
	var first error
	n := 0
	for _, p := range list {
		select {
		case <-p.Done:
			continue
		default:
		}
		n++
		if err := p.Stop(ctx); err != nil && first == nil {
			first = err
		}
	}
	return n, first
}
