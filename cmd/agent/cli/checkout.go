package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
)

// NewCmdCheckout builds `agent checkout`.
func NewCmdCheckout(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "checkout TASK", "Check a task's branch out in your own checkout",
		`Hand a task's branch to you: work left uncommitted in the task's worktree
is committed on the branch, the worktree is released, and your checkout (the
one the task was started from) is switched to the branch, so you can build,
test and edit it with your own tools. It refuses, changing nothing, when an
uncommitted change in your checkout would be overwritten, or when a merge or
rebase is in progress there.

Switch back with `+"`git switch -`"+`; `+"`agent continue TASK \"...\"`"+` then re-creates the
task's worktree from the branch (with your commits) and goes on.`,
		checkoutRun, runF)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	return cmd
}

func checkoutRun(ctx context.Context, opts *TaskRefOptions) error {
	o, t, err := loadTask(opts)
	if err != nil {
		return err
	}
	res, err := o.Checkout(ctx, t.ID)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, res)
	}
	if res.Committed != "" {
		fmt.Fprintf(opts.IO.ErrOut, "committed the work left in the task's worktree (%.10s)\n", res.Committed)
	}
	fmt.Fprintln(opts.IO.Out, termtext.Text(res.Message))
	return nil
}
