package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/localagent/agent/sandbox/toolbox"
)

const usage = `usage: agent-toolbox MODE [flags]

modes:
  idle    block until SIGTERM or SIGINT (the sandbox container's main process)
  serve   a session: newline-delimited JSON requests on stdin, responses on stdout
  call    one JSON request on stdin, one response on stdout
  forward relay TCP connections on a loopback address to the egress proxy's socket
  freeze  stop every other process of the sandbox and wait until all are stopped
          (for engines without a cgroup freezer; refuses to run outside a sandbox)
  thaw    continue every process of the sandbox

flags (idle, forward):
  -egress-listen ADDR   loopback address to accept proxy connections on (e.g. 127.0.0.1:3128)
  -egress-socket PATH   the host-side egress proxy's unix socket (e.g. /.agent/egress/proxy.sock)
  (idle forwards only when both are given; forward requires both)

flags (freeze):
  -timeout D      give up, continuing everything again, after D (default 10s)

flags (serve, call):
  -root DIR       workspace directory (default /workspace)
  -max-output N   cap on a command's output in bytes (default 262144)
  -shell PATH     shell for the bash tool, run as PATH -c COMMAND (default /bin/bash if present, else /bin/sh)
`

// pollable returns a second *os.File for f's descriptor, switched to
// non-blocking mode, when f is a pipe or a socket (what docker exec gives):
// reads and writes then wait in Go's poller instead of holding an OS thread
// each, and threads are what a fork bomb in the sandbox takes away. It
// returns nil for terminals and files, which are left alone (a terminal
// shared with a shell must stay blocking).
func pollable(f *os.File) *os.File {
	st, err := f.Stat()
	if err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return nil
	}
	fd := f.Fd()
	if err := syscall.SetNonblock(int(fd), true); err != nil {
		return nil
	}
	// NewFile sees the non-blocking descriptor and registers it with the
	// poller.
	return os.NewFile(fd, f.Name())
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// idle is the container's main process: it blocks until SIGTERM or SIGINT
// and, when given the egress flags, relays the container's proxy traffic to
// the host-side egress proxy meanwhile. "forward" is the same relay without
// the idle role and requires the flags.
func idle(mode string, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent-toolbox "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("egress-listen", "", "loopback address to accept proxy connections on")
	socket := fs.String("egress-socket", "", "the host-side egress proxy's unix socket")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agent-toolbox %s takes no arguments, only flags (got %q)\n%s", mode, fs.Args(), usage)
		return 2
	}
	if (*listen == "") != (*socket == "") || mode == "forward" && *listen == "" {
		fmt.Fprintf(stderr, "agent-toolbox %s: -egress-listen and -egress-socket go together\n%s", mode, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if os.Getpid() == 1 {
		// The sandbox's init: orphans whose subreaper (a session) is gone
		// end up here and must be reaped.
		go reap(ctx)
	}
	if *listen == "" {
		<-ctx.Done()
		return 0
	}
	// Listening is checked before idling: a sandbox whose egress cannot work
	// stops at once with the reason, instead of failing each command later.
	ln, err := toolbox.ListenForward(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "agent-toolbox %s: %v\n", mode, err)
		return 1
	}
	if err := toolbox.Forward(ctx, ln, *socket); err != nil {
		fmt.Fprintf(stderr, "agent-toolbox %s: %v\n", mode, err)
		if mode == "forward" {
			return 1
		}
		// The sandbox stays usable without egress; commands see the proxy
		// refuse connections, never a direct route.
		<-ctx.Done()
	}
	return 0
}

// reap waits for every child that exits, so that processes re-parented to
// the sandbox's init do not stay zombies. The idle toolbox is the init
// itself rather than a child of the engine's (docker-init): an init the
// commands could reach, as they could docker-init, would let them run code
// that no kill ever ends.
func reap(ctx context.Context) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
	}
}

// run runs the command and returns its exit code: 0 ok, 1 error, 2 usage.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	mode, rest := args[0], args[1:]
	switch mode {
	case "idle", "forward", "serve", "call", "freeze", "thaw":
		// Before anything else: the commands this process runs, and any
		// other process of the sandbox, share its uid and must not be able
		// to attach to it or open its /proc entries.
		if err := toolbox.Protect(); err != nil {
			fmt.Fprintf(stderr, "agent-toolbox %s: %v\n", mode, err)
			return 1
		}
		// Limits the engine could not apply (no cgroup of its own), set
		// here so that every command the toolbox runs inherits them.
		if err := toolbox.ApplyRlimits(os.Getenv(toolbox.RlimitsEnv)); err != nil {
			fmt.Fprintf(stderr, "agent-toolbox %s: %v\n", mode, err)
			return 1
		}
	}
	switch mode {
	case "idle", "forward":
		return idle(mode, rest, stderr)
	case "freeze", "thaw":
		return freeze(mode, rest, stderr)
	case "serve", "call":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "agent-toolbox: unknown mode %q\n%s", mode, usage)
		return 2
	}

	fs := flag.NewFlagSet("agent-toolbox "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", toolbox.WorkspaceRoot, "workspace directory")
	maxOutput := fs.Int("max-output", 0, "cap on a command's output in bytes")
	shell := fs.String("shell", "", "shell that runs the bash tool's commands as SHELL -c COMMAND (default /bin/bash if present, else /bin/sh)")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agent-toolbox %s: unexpected arguments %q\n", mode, fs.Args())
		return 2
	}
	if st, err := os.Stat(*root); err != nil || !st.IsDir() {
		// Not fatal: the file tools answer per call, and a missing
		// workspace is clearer to the model from there.
		fmt.Fprintf(stderr, "agent-toolbox: workspace %s is not a directory\n", *root)
	}
	// The binary starts no other children, so it may end every orphan.
	srv := &toolbox.Server{Root: *root, Shell: *shell, Limits: toolbox.Limits{OutputBytes: *maxOutput}, KillOrphans: true}

	// A closed stdout must become a write error (the session then cancels
	// its commands), not a silent death by SIGPIPE that leaves them running.
	// The signal is caught, not ignored: an ignored signal is inherited
	// across exec, and every command run by the bash tool would then see
	// SIGPIPE ignored, so `yes | head` would spin until its timeout. A caught
	// signal is reset to the default in children.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var err error
	if mode == "serve" {
		in, out := stdin, stdout
		if f, ok := stdin.(*os.File); ok {
			if p := pollable(f); p != nil {
				in = p
				// Both Files own the descriptor; the new one must not be
				// collected (and close it) while the session runs.
				defer runtime.KeepAlive(p)
			}
		}
		if f, ok := stdout.(*os.File); ok {
			if p := pollable(f); p != nil {
				out = p
				defer runtime.KeepAlive(p)
			}
		}
		err = srv.Serve(ctx, in, out)
	} else {
		err = srv.Call(ctx, stdin, stdout)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		return 0 // stopped by a signal: commands were killed, answers sent
	default:
		fmt.Fprintf(stderr, "agent-toolbox %s: %v\n", mode, err)
		return 1
	}
}

// freeze stops (or, as thaw, continues) every process of the sandbox but
// its init and itself: the freeze of an engine without a cgroup freezer.
func freeze(mode string, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent-toolbox "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long, continuing everything again")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agent-toolbox %s: unexpected arguments %q\n", mode, fs.Args())
		return 2
	}
	var err error
	if mode == "freeze" {
		err = toolbox.FreezeAll(*timeout)
	} else {
		err = toolbox.ThawAll()
	}
	if err != nil {
		fmt.Fprintf(stderr, "agent-toolbox %s: %v\n", mode, err)
		return 1
	}
	return 0
}
