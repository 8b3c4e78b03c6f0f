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

	"github.com/localagent/agent/cmd/agent/internal/termtext"
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

// usageError marks bad flags or arguments (exit code 2). cmd is the path
// of the command whose usage was wrong ("agent task"), filled in by the
// root when the command returns it.
type usageError struct {
	err error
	cmd string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// UsageErrorf returns an error that exits with code 2.
func UsageErrorf(format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...)}
}

// Main runs the agent command line and returns the process exit code.
func Main(args []string, ios *IOStreams) int {
	f := NewFactory(ios)
	defer f.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A reader that goes away (`agent task ... | head`) must not kill the
	// process between a task's review and its decision: writes then fail
	// with EPIPE instead, and the task still reaches a recorded state.
	signal.Ignore(syscall.SIGPIPE)

	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetIn(ios.In)
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	cmd, err := root.ExecuteContextC(ctx)
	interrupted := ctx.Err() != nil
	if err != nil && !ios.jsonDone && cmd != nil {
		// A --json command that fails still prints one object on stdout.
		if j, _ := cmd.Flags().GetBool("json"); j {
			_ = writeJSON(ios.Out, map[string]any{"error": newErrorJSON(err, interrupted)})
		}
	}
	return exitCode(ios, err, interrupted)
}

func exitCode(ios *IOStreams, err error, interrupted bool) int {
	if err == nil {
		return ExitOK
	}
	code := exitCodeOf(err, interrupted)
	var ec *ExitCodeError
	switch {
	case errors.As(err, &ec):
	case code == ExitInterrupted:
		fmt.Fprintln(ios.ErrOut, "agent: interrupted")
	default:
		// Error texts can quote file names, branches and command output.
		fmt.Fprintf(ios.ErrOut, "%s: %s\n", commandPathOf(err), termtext.Text(err.Error()))
		if code == ExitUsage {
			fmt.Fprintf(ios.ErrOut, "Run '%s --help' for usage.\n", commandPathOf(err))
		}
	}
	return code
}

// commandPathOf names the command a usage error is about ("agent task"),
// "agent" for any other error.
func commandPathOf(err error) string {
	var ue *usageError
	if errors.As(err, &ue) && ue.cmd != "" {
		return ue.cmd
	}
	return "agent"
}

// exitCodeOf maps an error to the process exit code (DESIGN.md).
func exitCodeOf(err error, interrupted bool) int {
	var ec *ExitCodeError
	if errors.As(err, &ec) {
		return ec.Code
	}
	if errors.Is(err, ErrCancelled) || (interrupted && errors.Is(err, context.Canceled)) {
		return ExitInterrupted
	}
	var ue *usageError
	// cobra reports unknown sub-commands with an untyped error; its text is
	// the only thing to go on.
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
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
		Example: `  agent doctor
  agent task "fix the failing test in pkg/parse"
  agent tasks --state kept`,
		Version:       currentVersion().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err: err, cmd: c.CommandPath()} })
	root.AddCommand(
		NewCmdVersion(f),
		NewCmdDoctor(f),
		NewCmdConfig(f, nil),
		NewCmdImages(f),
		NewCmdSandbox(f),
		NewCmdLLM(f),
		NewCmdCompose(f),
		NewCmdBench(f),
		NewCmdEnv(f),
		NewCmdMemory(f, nil),
	)
	root.AddCommand(taskCommands(f)...)
	// cobra's completion command, made now so it gets an example too.
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "completion":
			c.Example = `  source <(agent completion bash)
  agent completion zsh > "${fpath[1]}/_agent"`
			for _, sh := range c.Commands() {
				sh.Example = "  agent completion " + sh.Name() + " > agent." + sh.Name()
			}
		case "help":
			c.Example = "  agent help task"
		}
	}
	for _, c := range allCommands(root) {
		if c.Example == "" {
			c.Example = fallbackExamples[c.CommandPath()]
		}
	}
	// Wrong argument counts are usage errors that name the missing or
	// extra argument and the command's own help, as gh does; so are usage
	// errors a command returns itself.
	for _, c := range allCommands(root) {
		c := c
		if c.Args != nil {
			args := c.Args
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &usageError{err: argsError(cmd, a, err), cmd: cmd.CommandPath()}
				}
				return nil
			}
		}
		if c.RunE != nil {
			run := c.RunE
			c.RunE = func(cmd *cobra.Command, a []string) error {
				err := run(cmd, a)
				var ue *usageError
				if errors.As(err, &ue) && ue.cmd == "" {
					ue.cmd = cmd.CommandPath()
				}
				return err
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

// argsError rewrites cobra's "accepts 1 arg(s), received 0" as "missing
// PROMPT" or "unexpected argument "x"", naming the arguments of the
// command's Use line.
func argsError(cmd *cobra.Command, args []string, err error) error {
	if !strings.Contains(err.Error(), "arg(s)") {
		return err // a command's own check: its text says it better
	}
	var names []string
	required := 0
	prevFlag := false
	for _, f := range strings.Fields(cmd.Use)[1:] {
		if f == "--" {
			prevFlag = false
			continue
		}
		n := strings.Trim(f, "[]")
		isFlag := strings.HasPrefix(n, "-")
		if isFlag || prevFlag || strings.ToUpper(n) != n || strings.Trim(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_.|") != "" {
			prevFlag = isFlag && !strings.HasSuffix(f, "]")
			continue
		}
		prevFlag = false
		names = append(names, n)
		if !strings.HasPrefix(f, "[") {
			required = len(names)
		}
	}
	if len(args) < required {
		return fmt.Errorf("missing %s", strings.Join(names[len(args):required], " "))
	}
	if len(names) == 0 && len(args) > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes none", args[0], cmd.CommandPath())
	}
	if len(args) > len(names) && !strings.HasSuffix(names[len(names)-1], "...") {
		return fmt.Errorf("unexpected argument %q", args[len(names)])
	}
	return err
}

// fallbackExamples are the examples of commands that do not set their own
// (every --help shows one; TestEveryCommandHasExample keeps it so).
var fallbackExamples = map[string]string{
	"agent chat": `  agent chat
  agent chat 3f2a
  printf 'fix the test\n/review\n/keep\n' | agent chat --line`,
	"agent checkout":     "  agent checkout 3f2a\n  git switch -   # back; agent continue 3f2a \"...\" goes on",
	"agent env":          "  agent env init --write\n  agent env show\n  agent env build",
	"agent env init":     "  agent env init\n  agent env init --write",
	"agent env show":     "  agent env show\n  agent env show --json",
	"agent env build":    "  agent env build\n  agent env build --force",
	"agent env cache":    "  agent env cache ls\n  agent env cache rm --all",
	"agent env cache ls": "  agent env cache ls",
	"agent env cache rm": "  agent env cache rm ~/src/project\n  agent env cache rm --all",
}
