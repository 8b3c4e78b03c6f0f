package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/localagent/agent/sandbox/toolbox"
)

// ExecOptions describe one command run in a sandbox. The zero value of a
// field is documented per field.
type ExecOptions struct {
	// Cmd is the program and its arguments (no shell is implied). Required.
	Cmd []string
	// Env is extra "KEY=value" environment.
	Env []string
	// WorkingDir defaults to /workspace.
	WorkingDir string
	// User defaults to the sandbox's user. Root is possible only by asking
	// for it here, and even then without capabilities.
	User string
	// Stdin, when non-nil, is copied to the command's standard input, which
	// is closed at its end.
	Stdin io.Reader
	// Stdout and Stderr receive the output; nil discards it. With TTY set
	// everything arrives on Stdout.
	Stdout, Stderr io.Writer
	// TTY allocates a terminal for the command.
	TTY bool
	// ConsoleSize is the terminal's initial height and width (TTY only;
	// engines older than API 1.42 ignore it, send the size on Resize too).
	ConsoleSize *[2]uint
	// Resize, when non-nil, carries terminal sizes (height, width) to apply
	// while the command runs (TTY only).
	Resize <-chan [2]uint
}

// ExecResult is the outcome of one command. Stdout and Stderr are filled by
// Run only.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	Duration time.Duration
}

// Exec runs a command in the sandbox through the Engine API (exec create,
// attach, demultiplex, inspect) and streams its output. A non-zero exit is
// not an error: it is in ExecResult.ExitCode. Cancelling ctx stops waiting
// and returns ctx.Err(); note that the Engine API cannot kill an exec'd
// process, so the command may keep running (the toolbox's bash tool is the
// way to run commands with a deadline).
func (s *Sandbox) Exec(ctx context.Context, opts ExecOptions) (ExecResult, error) {
	if err := s.waitHold(ctx); err != nil {
		return ExecResult{}, err
	}
	return s.exec(ctx, opts)
}

// exec is Exec without waiting for Hold's condition.
func (s *Sandbox) exec(ctx context.Context, opts ExecOptions) (ExecResult, error) {
	if len(opts.Cmd) == 0 {
		return ExecResult{}, errors.New("exec: no command given")
	}
	if opts.User == "" {
		opts.User = s.User
	}
	if opts.WorkingDir == "" {
		opts.WorkingDir = toolbox.WorkspaceRoot
	}
	start := time.Now()
	code, err := s.drv.Exec(ctx, s.ID, opts)
	res := ExecResult{ExitCode: code, Duration: time.Since(start)}
	if err != nil && s.isGone(err) {
		if rerr := s.checkRunning(context.WithoutCancel(ctx)); rerr != nil {
			return res, rerr
		}
	}
	return res, err
}

// MaxRunOutput bounds each stream Run keeps in memory; a command that
// prints more fails Run with an error.
const MaxRunOutput = toolbox.MaxResponseBytes

// Run runs a command with no input and returns its output in memory (at
// most MaxRunOutput bytes of each stream).
func (s *Sandbox) Run(ctx context.Context, cmd ...string) (ExecResult, error) {
	out := &boundedBuffer{max: MaxRunOutput}
	errOut := &boundedBuffer{max: MaxRunOutput}
	res, err := s.Exec(ctx, ExecOptions{Cmd: cmd, Stdout: out, Stderr: errOut})
	res.Stdout, res.Stderr = out.Bytes(), errOut.Bytes()
	return res, err
}

// isGone reports an engine error that means the container cannot run
// execs: it was removed (not found) or is not running (conflict).
func (s *Sandbox) isGone(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotRunning) ||
		cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err)
}

// Exec implements Driver: create -> attach -> copy -> inspect.
func (e *Engine) Exec(ctx context.Context, id string, opts ExecOptions) (int, error) {
	if err := e.refuseIfFrozen(id); err != nil {
		return -1, err
	}
	return e.exec(ctx, id, opts)
}

func (e *Engine) exec(ctx context.Context, id string, opts ExecOptions) (int, error) {
	started := e.startingExec(id)
	defer started()
	created, err := e.api.ContainerExecCreate(ctx, id, container.ExecOptions{
		User:         opts.User,
		Tty:          opts.TTY,
		ConsoleSize:  opts.ConsoleSize,
		AttachStdin:  opts.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Env:          opts.Env,
		WorkingDir:   opts.WorkingDir,
		Cmd:          opts.Cmd,
	})
	if err != nil {
		return -1, e.wrapExec(id, err)
	}
	att, err := e.api.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: opts.TTY, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		return -1, e.wrapExec(id, err)
	}
	defer att.Close()
	e.waitExecStarted(ctx, created.ID)
	started()

	if opts.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, opts.Stdin)
			_ = att.CloseWrite()
		}()
	}
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if opts.TTY && opts.Resize != nil {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			for {
				select {
				case <-rctx.Done():
					return
				case sz := <-opts.Resize:
					_ = e.api.ContainerExecResize(rctx, created.ID, container.ResizeOptions{Height: sz[0], Width: sz[1]})
				}
			}
		}()
	}
	copied := make(chan error, 1)
	go func() {
		var err error
		if opts.TTY {
			_, err = io.Copy(stdout, att.Reader)
		} else {
			_, err = stdcopy.StdCopy(stdout, stderr, att.Reader)
		}
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		att.Close()
		<-copied
		return -1, ctx.Err()
	}
	if err != nil {
		return -1, fmt.Errorf("exec in sandbox %s: reading output: %w", shortID(id), err)
	}
	return e.execExitCode(ctx, created.ID)
}

// execExitCode inspects a finished exec. The engine may report it running
// for a moment after its output stream has closed.
func (e *Engine) execExitCode(ctx context.Context, execID string) (int, error) {
	for delay := time.Millisecond; ; delay *= 2 {
		ins, err := e.api.ContainerExecInspect(ctx, execID)
		if err != nil {
			return -1, e.wrap("inspecting exec", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if delay > time.Second {
			return -1, errors.New("exec output ended but the engine still reports the command running")
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(delay):
		}
	}
}

func (e *Engine) wrapExec(id string, err error) error {
	return e.wrap("exec in sandbox "+shortID(id), err)
}
