package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// TaskRefOptions are the inputs of the commands that act on one task.
type TaskRefOptions struct {
	IO      *IOStreams
	Factory *Factory
	Task    string
	JSON    bool
	Squash  bool
	Yes     bool
	Labels  []string
}

func taskRefCmd(f *Factory, use, short, long string, run func(context.Context, *TaskRefOptions) error, runF func(context.Context, *TaskRefOptions) error) (*cobra.Command, *TaskRefOptions) {
	opts := &TaskRefOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Task = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return run(cmd.Context(), opts)
		},
	}
	return cmd, opts
}

// loadTask opens the orchestrator (no Docker) and resolves a task.
func loadTask(opts *TaskRefOptions) (*orchestrator.Orchestrator, *store.Task, error) {
	labels, err := parseLabelFlags(opts.Labels)
	if err != nil {
		return nil, nil, err
	}
	o, _, err := newOrchestrator(opts.Factory, event.Discard, labels, nil)
	if err != nil {
		return nil, nil, err
	}
	if _, err := o.Reconcile(); err != nil {
		return nil, nil, err
	}
	t, err := o.Task(opts.Task)
	if err != nil {
		return nil, nil, err
	}
	return o, t, nil
}

// TasksOptions are the inputs of `agent tasks`.
type TasksOptions struct {
	IO      *IOStreams
	Factory *Factory
	JSON    bool
}

// NewCmdTasks builds `agent tasks`.
func NewCmdTasks(f *Factory, runF func(context.Context, *TasksOptions) error) *cobra.Command {
	opts := &TasksOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List tasks: id, state, branch, age, changes",
		Long: `List the tasks of this state directory, newest first. A task whose agent
process died is shown (and recorded) as interrupted: continue it with
` + "`agent resume ID`" + `. Task ids may be abbreviated to any unique prefix.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return tasksRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the task records as a JSON array")
	return cmd
}

func tasksRun(ctx context.Context, opts *TasksOptions) error {
	o, _, err := newOrchestrator(opts.Factory, event.Discard, nil, nil)
	if err != nil {
		return err
	}
	if _, err := o.Reconcile(); err != nil {
		return err
	}
	ts, err := o.Store().List()
	if err != nil {
		return err
	}
	if opts.JSON {
		if ts == nil {
			ts = []*store.Task{}
		}
		return writeJSON(opts.IO.Out, ts)
	}
	if len(ts) == 0 {
		fmt.Fprintln(opts.IO.ErrOut, `no tasks yet: start one with agent task "PROMPT"`)
		return nil
	}
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tBRANCH\tAGE\tCHANGES\tPROMPT")
	for _, t := range ts {
		changes := "-"
		if !t.State.Final() {
			if rv, err := o.Review(ctx, t); err == nil {
				changes = fmt.Sprintf("%d files +%d -%d", len(rv.Stat.Files), rv.Stat.Added, rv.Stat.Deleted)
				if n := len(rv.Uncommitted); n > 0 {
					changes += fmt.Sprintf(" (%d uncommitted)", n)
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.State, t.Branch, age(t.Created), changes, oneLine(t.Prompt, 40))
	}
	return tw.Flush()
}

// NewCmdTaskDiff builds `agent diff`.
func NewCmdTaskDiff(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, _ := taskRefCmd(f, "diff TASK", "Show a task's changes against its base",
		"Show the task branch's changes against the commit it started from; for a\ntask still in progress (or interrupted), its uncommitted changes too.",
		func(ctx context.Context, opts *TaskRefOptions) error {
			o, t, err := loadTask(opts)
			if err != nil {
				return err
			}
			return o.Diff(ctx, t, opts.IO.Out)
		}, runF)
	return cmd
}

// NewCmdTaskLog builds `agent log`.
func NewCmdTaskLog(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "log TASK", "Show a task's transcript and the commands it ran", "",
		taskLogRun, runF)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the record and the transcript messages as JSON")
	return cmd
}

func taskLogRun(_ context.Context, opts *TaskRefOptions) error {
	_, t, err := loadTask(opts)
	if err != nil {
		return err
	}
	var msgs []llm.Message
	if t.Session != "" {
		if _, m, err := session.Load(t.Session); err == nil {
			msgs = m
		}
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"task": t, "messages": msgs})
	}
	w := opts.IO.Out
	fmt.Fprintf(w, "task %s (%s) on %s, model %s\n", t.ID, t.State, t.Branch, t.Model)
	if t.Error != "" {
		fmt.Fprintf(w, "error: %s\n", t.Error)
	}
	printSpeed(w, t.Tokens)
	fmt.Fprintln(w, "\n== transcript ==")
	if len(msgs) == 0 {
		fmt.Fprintln(w, "(no transcript)")
	}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			fmt.Fprintf(w, "\n[system] (%d characters)\n", len(m.Content))
		case llm.RoleTool:
			fmt.Fprintf(w, "\n[tool result %s]\n%s\n", m.ToolCallID, clip(m.Content, 2000))
		default:
			fmt.Fprintf(w, "\n[%s]\n", m.Role)
			if m.Reasoning != "" {
				fmt.Fprintf(w, "(thinking) %s\n", termSafe(m.Reasoning))
			}
			if m.Content != "" {
				fmt.Fprintln(w, m.Content)
			}
			for _, c := range m.ToolCalls {
				fmt.Fprintf(w, "-> %s %s\n", c.Function.Name, clip(c.Function.Arguments, 500))
			}
		}
	}
	fmt.Fprintln(w, "\n== commands ==")
	printCommands(w, t.Commands, opts.IO.Width(), colors{on: opts.IO.Color(opts.IO.OutTTY)})
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("\n... (%d more bytes)", len(s)-n)
}

// NewCmdTaskMerge builds `agent merge`.
func NewCmdTaskMerge(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "merge TASK", "Merge a task's branch into its base branch",
		`Merge the task branch into the branch it started from (a --no-ff merge
commit, or one commit with --squash). If that branch is checked out, your
files are updated, but never where you have uncommitted changes: then
nothing happens and you are told which files are in the way. A conflict
also changes nothing and names the files.`,
		func(ctx context.Context, opts *TaskRefOptions) error {
			o, t, err := loadTask(opts)
			if err != nil {
				return err
			}
			d := orchestrator.Merge
			if opts.Squash {
				d = orchestrator.Squash
			}
			out, err := o.Decide(ctx, t, d, false)
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(opts.IO.Out, out)
			}
			fmt.Fprintln(opts.IO.Out, out.Message)
			return nil
		}, runF)
	cmd.Flags().BoolVar(&opts.Squash, "squash", false, "make one commit instead of a merge commit")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the outcome as JSON")
	return cmd
}

// NewCmdTaskDiscard builds `agent discard`.
func NewCmdTaskDiscard(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "discard TASK", "Remove a task's sandbox, worktree and branch",
		`Remove the task's sandbox, worktree and branch. On a terminal you are asked
again when the branch has unmerged commits or the worktree uncommitted
changes (--yes skips that).`,
		func(ctx context.Context, opts *TaskRefOptions) error {
			o, t, err := loadTask(opts)
			if err != nil {
				return err
			}
			if !opts.Yes && opts.IO.CanPrompt() && !t.State.Final() {
				commits, uncommitted, err := o.UnmergedWork(ctx, t)
				if err != nil {
					return err
				}
				if commits > 0 || len(uncommitted) > 0 {
					var sure bool
					if err := runForm(newDiscardConfirm(commits, len(uncommitted), &sure), opts.IO.In, opts.IO.ErrOut); err != nil && !errors.Is(err, ErrCancelled) {
						return err
					}
					if !sure {
						fmt.Fprintf(opts.IO.ErrOut, "kept task %s\n", t.ID)
						return nil
					}
				}
			}
			out, err := o.Decide(ctx, t, orchestrator.Discard, false)
			if err != nil {
				return err
			}
			fmt.Fprintln(opts.IO.Out, out.Message)
			return nil
		}, runF)
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// NewCmdTaskShell builds `agent shell`.
func NewCmdTaskShell(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "shell TASK", "Open an interactive shell in a task's sandbox",
		`Open a shell in the task's sandbox (the same hardened, network-less
container, over the task's worktree at /workspace). When the task is not
running, a sandbox is created for the shell and removed after it.`,
		taskShellRun, runF)
	cmd.Flags().StringArrayVar(&opts.Labels, "label", nil, "extra sandbox container label KEY=VALUE (repeatable)")
	_ = cmd.Flags().MarkHidden("label")
	return cmd
}

func taskShellRun(ctx context.Context, opts *TaskRefOptions) error {
	o, t, err := loadTask(opts)
	if err != nil {
		return err
	}
	sb, created, err := o.ShellSandbox(ctx, t)
	if err != nil {
		return err
	}
	if created {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = sb.Remove(cctx)
		}()
	}
	shell := "/bin/sh"
	if res, err := sb.Run(ctx, "/bin/sh", "-c", "command -v bash"); err == nil && res.ExitCode == 0 {
		if p := strings.TrimSpace(string(res.Stdout)); p != "" {
			shell = p
		}
	} else if err != nil {
		return fmt.Errorf("the sandbox image %s has no /bin/sh for a shell: %w", t.Image, err)
	}
	fmt.Fprintf(opts.IO.ErrOut, "shell in the sandbox of task %s (%s at /workspace; no network); exit to leave\n", t.ID, t.Worktree)
	return execAttached(ctx, opts.IO, sb, sandbox.ExecOptions{Cmd: []string{shell}}, "-i")
}

// GCOptions are the inputs of `agent gc`.
type GCOptions struct {
	IO      *IOStreams
	Factory *Factory
	JSON    bool
}

// NewCmdTaskGC builds `agent gc`.
func NewCmdTaskGC(f *Factory, runF func(context.Context, *GCOptions) error) *cobra.Command {
	opts := &GCOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Reconcile sandboxes and worktrees with task records",
		Long: `Mark tasks whose agent process died as interrupted, remove sandbox
containers of this state directory that no running task uses, and finish
removing worktrees of merged or discarded tasks. gc never deletes a branch,
a worktree with uncommitted changes or unmerged commits, or anything that
belongs to another state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return gcRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the report as JSON")
	return cmd
}

func gcRun(ctx context.Context, opts *GCOptions) error {
	o, _, err := newOrchestrator(opts.Factory, event.Discard, nil, nil)
	if err != nil {
		return err
	}
	rep, err := o.GC(ctx)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, rep)
	}
	w := opts.IO.Out
	for _, id := range rep.Interrupted {
		fmt.Fprintf(w, "task %s: its process died; marked interrupted (agent resume %s)\n", id, id)
	}
	for _, id := range rep.RemovedContainers {
		fmt.Fprintf(w, "removed sandbox container %s\n", id)
	}
	for _, p := range rep.RemovedWorktrees {
		fmt.Fprintf(w, "removed worktree %s\n", p)
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(w, "kept %s\n", k)
	}
	if len(rep.Interrupted)+len(rep.RemovedContainers)+len(rep.RemovedWorktrees) == 0 {
		fmt.Fprintln(w, "nothing to clean up")
	}
	return nil
}
