package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes (DESIGN.md: stable, scripts rely on them).
const (
	ExitOK          = 0
	ExitError       = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// ErrCancelled is returned when the user backs out (Esc/Ctrl-C in a form,
// SIGINT during a run).
var ErrCancelled = errors.New("cancelled")

// ExitCodeError carries a specific exit code out of a command (e.g. the exit
// code of a command run in a sandbox) without printing anything more.
type ExitCodeError struct{ Code int }

func (e *ExitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// usageError marks bad flags or arguments (exit code 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// UsageErrorf returns an error that exits with code 2.
func UsageErrorf(format string, a ...any) error {
	return &usageError{fmt.Errorf(format, a...)}
}

// Main runs the agent command line and returns the process exit code.
func Main(args []string, ios *IOStreams) int {
	f := NewFactory(ios)
	defer f.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetIn(ios.In)
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	err := root.ExecuteContext(ctx)
	return exitCode(ios, err, ctx.Err() != nil)
}

func exitCode(ios *IOStreams, err error, interrupted bool) int {
	if err == nil {
		return ExitOK
	}
	var ec *ExitCodeError
	if errors.As(err, &ec) {
		return ec.Code
	}
	if errors.Is(err, ErrCancelled) || (interrupted && errors.Is(err, context.Canceled)) {
		fmt.Fprintln(ios.ErrOut, "agent: interrupted")
		return ExitInterrupted
	}
	fmt.Fprintf(ios.ErrOut, "agent: %v\n", err)
	var ue *usageError
	// cobra reports unknown sub-commands with an untyped error; its text is
	// the only thing to go on.
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintln(ios.ErrOut, "Run 'agent --help' for usage.")
		return ExitUsage
	}
	return ExitError
}

// NewCmdRoot builds the whole command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "agent",
		Short: "A sandboxed local coding agent",
		Long: `agent runs a coding agent against a local model (llama-server) inside a
hardened, network-less container per task, and hands back a git branch for
review. It never touches your checkout without your consent.

  agent llm up --model ~/models/model.gguf     start the local model server
  agent task "add pagination"                  run a task -> reviewable branch
  agent tasks                                  list tasks`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(
		NewCmdVersion(f),
		NewCmdDoctor(f),
		NewCmdImages(f),
		NewCmdSandbox(f),
		NewCmdLLM(f),
		NewCmdCompose(f),
		NewCmdBench(f),
		NewCmdEnv(f),
		NewCmdMemory(f, nil),
	)
	root.AddCommand(taskCommands(f)...)
	// Unknown sub-commands and wrong argument counts are usage errors.
	for _, c := range allCommands(root) {
		if c.Args != nil {
			args := c.Args
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &usageError{err}
				}
				return nil
			}
		}
	}
	return root
}

func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, s := range c.Commands() {
		out = append(out, allCommands(s)...)
	}
	return out
}
