package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
)

// Headless quality gates for --approve.
const (
	approveMergeIfGreen  = "merge-if-green"
	approveSquashIfGreen = "squash-if-green"
)

// ExitNotGreen is the exit code of a run whose --approve merge-if-green or
// squash-if-green did not merge because the last test run did not pass
// (or no tests ran): the branch is kept.
const ExitNotGreen = 3

// maxPromptBytes bounds a prompt read from stdin or a file.
const maxPromptBytes = 1 << 20

// gateDecision turns a gated --approve into a decision: merge (or squash)
// when the last recorded test run passed, else keep, with an error that
// carries ExitNotGreen and says why.
func gateDecision(approve string, rv *orchestrator.Review) (orchestrator.Decision, string, error) {
	d := orchestrator.Merge
	if approve == approveSquashIfGreen {
		d = orchestrator.Squash
	}
	if rv.Tests != nil && rv.Tests.Passed {
		return d, "", nil
	}
	why := "the agent ran no tests (verdict unknown)"
	if rv.Tests != nil {
		why = rv.Tests.Problem()
		if rv.Tests.ExitCode != nil {
			why += fmt.Sprintf(" (exit %d)", *rv.Tests.ExitCode)
		}
	}
	msg := fmt.Sprintf("not merged (--approve %s): %s; the branch %s is kept", approve, why, rv.Branch)
	return orchestrator.Keep, msg, &ExitCodeError{Code: ExitNotGreen}
}

// readPrompt picks the prompt of a command: the argument, or stdin when it
// is "-", or the file of --prompt-file (then no argument may be given).
func readPrompt(ios *IOStreams, args []string, file string) (string, error) {
	switch {
	case file != "" && len(args) > 0:
		return "", UsageErrorf("give the prompt either as an argument or with --prompt-file, not both")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--prompt-file: %w", err)
		}
		defer f.Close()
		return readBounded(f, "--prompt-file "+file)
	case len(args) == 0:
		return "", UsageErrorf("no prompt: give it as an argument, as - to read it from stdin, or with --prompt-file FILE")
	case args[0] == "-":
		if ios.InTTY {
			fmt.Fprintln(ios.ErrOut, "reading the prompt from stdin; end it with Ctrl-D")
		}
		return readBounded(ios.In, "stdin")
	}
	return args[0], nil
}

func readBounded(r io.Reader, what string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxPromptBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the prompt from %s: %w", what, err)
	}
	if len(b) > maxPromptBytes {
		return "", fmt.Errorf("the prompt from %s is longer than %d bytes", what, maxPromptBytes)
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", fmt.Errorf("the prompt from %s is empty", what)
	}
	return string(b), nil
}

// ContinueOptions are the inputs of `agent continue`.
type ContinueOptions struct {
	IO         *IOStreams
	Factory    *Factory
	Task       string
	Prompt     string
	PromptFile string
	Approve    string
	// Test replaces the task's test command ("" keeps it).
	Test   string
	JSON   bool
	Labels []string
	Run    RunFlags
}

// NewCmdContinue builds `agent continue`.
func NewCmdContinue(f *Factory, runF func(context.Context, *ContinueOptions) error) *cobra.Command {
	opts := &ContinueOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "continue TASK PROMPT|-",
		Short: "Go on with a task: a follow-up message in the same branch and conversation",
		Long: `Send the agent a follow-up message on a task: same branch, same worktree,
same transcript (the model sees the whole earlier conversation, compacted as
usual, then the new message), in a fresh sandbox. It works on a task under
review, kept, failed, interrupted or stopped at agent.max_iterations; the run
ends in the usual review and decision. A task handed over with
` + "`agent checkout`" + ` gets its worktree back (once your checkout is on another branch).

The prompt is the argument, - for stdin, or --prompt-file FILE.`,
		Example: `  agent continue 3f2a1c "also add tests"
  agent continue 3f2a1c - < followup.txt`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Task = args[0]
			p, err := readPrompt(opts.IO, args[1:], opts.PromptFile)
			if err != nil {
				return err
			}
			opts.Prompt = p
			opts.Run.changed(cmd)
			if opts.Run.ImageSet {
				return UsageErrorf("--image: a continued task runs in the sandbox image it started with")
			}
			f.SetProjectDir(taskProjectDir(cmd.Context(), f, opts.Task))
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return continueRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.PromptFile, "prompt-file", "", "read the follow-up message from `FILE`")
	fl.StringVar(&opts.Approve, "approve", approveAsk, "decision after review: ask, merge, squash, merge-if-green, squash-if-green, keep or discard")
	fl.StringVar(&opts.Test, "test", "", "replace the task's test `COMMAND`, run in the sandbox after the agent's last turn: its result is the verdict")
	fl.BoolVar(&opts.JSON, "json", false, "stream events as JSON lines on stdout; the last line is the result")
	opts.Run.add(cmd)
	fl.StringArrayVar(&opts.Labels, "label", nil, "extra sandbox container label KEY=VALUE (repeatable)")
	_ = fl.MarkHidden("label")
	return cmd
}

func continueRun(ctx context.Context, opts *ContinueOptions) (err error) {
	defer jsonResultOnError(opts.IO, opts.JSON, &err)
	approve, err := approveFor(opts.IO, opts.Approve, opts.JSON, "agent continue")
	if err != nil {
		return err
	}
	r, o, cfg, err := openRun(opts.Factory, opts.IO, opts.Labels, &opts.Run, opts.JSON)
	if err != nil {
		return err
	}
	defer r.Close()
	// The pool refill and the spare checkouts begun here end before exit,
	// not halfway.
	defer o.WaitPool()
	defer o.WaitSpares()
	if _, err := o.Reconcile(); err != nil {
		return err
	}
	co := orchestrator.ContinueOptions{Prompt: opts.Prompt, Test: opts.Test}
	co.LLM, co.Model = endpointOverride(&opts.Run, cfg)
	run, err := o.Continue(ctx, opts.Task, co)
	if err != nil {
		return err
	}
	defer run.Close()
	noteScriptedModel(opts.IO, co.LLM, run.Task.LLM)
	return executeAndDecide(ctx, opts.IO, o, run, r, approve, opts.JSON)
}

// noteScriptedModel says that a follow-up goes to the task's recorded
// scripted model (a file of canned replies, not a model) when no --llm
// chose another: its script may not expect the new message.
func noteScriptedModel(ios *IOStreams, override, spec string) {
	if override == "" && strings.HasPrefix(spec, "script:") {
		fmt.Fprintf(ios.ErrOut, "agent: the task's model is scripted (%s): its replies come from that file; --llm URL sends this to a real model\n", termtext.Text(spec))
	}
}

// continueAfterReview starts the next round of a task from the review's
// Request changes.
func continueAfterReview(w io.Writer, run *orchestrator.Run, changes string) error {
	if err := run.Continue(changes); err != nil {
		if errors.Is(err, context.Canceled) {
			return ErrCancelled
		}
		return err
	}
	fmt.Fprintf(w, "continuing task %s with your message: %s\n", run.Task.ID, termtext.Text(oneLine(changes, 100)))
	return nil
}
