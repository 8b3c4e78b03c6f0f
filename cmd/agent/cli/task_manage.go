package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// TaskRefOptions are the inputs of the commands that act on one task.
type TaskRefOptions struct {
	IO      *IOStreams
	Factory *Factory
	Task    string
	// Tasks are the ids of commands that take several (discard).
	Tasks   []string
	JSON    bool
	NoPager bool
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
		// Task ids complete from the records.
		ValidArgsFunction: completeTaskIDs(f),
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
	Quiet   bool
	All     bool
	States  []string
	Repo    string
}

// NewCmdTasks builds `agent tasks`.
func NewCmdTasks(f *Factory, runF func(context.Context, *TasksOptions) error) *cobra.Command {
	opts := &TasksOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List tasks: id, state, repository, age, changes, prompt",
		Long: `List tasks, newest first. By default: the tasks of the repository you are in
(all repositories outside one), without discarded ones. --all lists every
task of every repository, discarded ones too; --state and --repo filter.

A task whose agent process died is shown (and recorded) as interrupted:
continue it with ` + "`agent resume ID`" + `. Task ids may be abbreviated to any
unique prefix. Records of discarded tasks are removed by ` + "`agent tasks prune`" + `.`,
		Example: `  agent tasks
  agent tasks --state kept,review
  agent tasks --all --json
  agent discard $(agent tasks -q --state failed) --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, st := range opts.States {
				if !slices.Contains(taskStates, st) {
					return UsageErrorf("--state %q: want one of %s", st, strings.Join(taskStates, ", "))
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return tasksRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.JSON, "json", false, `print {"tasks": [...]} as JSON`)
	fl.BoolVarP(&opts.Quiet, "quiet", "q", false, "print task ids only")
	fl.BoolVarP(&opts.All, "all", "a", false, "every repository and every state, discarded tasks included")
	fl.StringSliceVarP(&opts.States, "state", "s", nil, "only tasks in these `STATES`: "+strings.Join(taskStates, ", ")+" (repeatable or comma-separated)")
	fl.StringVar(&opts.Repo, "repo", "", "only tasks of the git checkout holding `DIR`")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(taskStates, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(NewCmdTasksPrune(f, nil))
	return cmd
}

// taskStates are the states --state accepts.
var taskStates = []string{
	string(store.Created), string(store.Running), string(store.Interrupted), string(store.Review),
	string(store.Merged), string(store.Kept), string(store.Discarded), string(store.Failed),
}

// filterTasks applies the --all/--state/--repo rules; repoDir is the
// common git directory of the repository to show ("" for all).
func filterTasks(ts []*store.Task, opts *TasksOptions, repoDir string) []*store.Task {
	out := []*store.Task{}
	for _, t := range ts {
		if repoDir != "" && !sameDir(t.RepoGitDir, repoDir) {
			continue
		}
		if len(opts.States) > 0 {
			if !slices.Contains(opts.States, string(t.State)) {
				continue
			}
		} else if !opts.All && t.State == store.Discarded {
			continue
		}
		out = append(out, t)
	}
	return out
}

func sameDir(a, b string) bool {
	ca, err1 := filepath.EvalSymlinks(a)
	cb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ca == cb
}

// tasksRepo is the common git directory whose tasks are listed: --repo's,
// else the working directory's unless --all; "" lists every repository.
func tasksRepo(ctx context.Context, opts *TasksOptions) (string, error) {
	dir := opts.Repo
	if dir == "" {
		if opts.All {
			return "", nil
		}
		dir = "."
	}
	r, err := worktree.Open(ctx, dir)
	if err != nil {
		if opts.Repo != "" {
			return "", UsageErrorf("--repo %s: %v", opts.Repo, err)
		}
		return "", nil // outside a checkout: every repository
	}
	return r.CommonDir, nil
}

func tasksRun(ctx context.Context, opts *TasksOptions) error {
	o, _, err := newOrchestrator(opts.Factory, event.Discard, nil, nil)
	if err != nil {
		return err
	}
	if _, err := o.Reconcile(); err != nil {
		return err
	}
	all, err := o.Store().List()
	if err != nil {
		return err
	}
	repoDir, err := tasksRepo(ctx, opts)
	if err != nil {
		return err
	}
	ts := filterTasks(all, opts, repoDir)
	if opts.JSON {
		list := make([]*taskJSON, 0, len(ts))
		for _, t := range ts {
			list = append(list, newTaskJSON(t))
		}
		return writeJSON(opts.IO.Out, map[string]any{"tasks": list})
	}
	if opts.Quiet {
		for _, t := range ts {
			fmt.Fprintln(opts.IO.Out, t.ID)
		}
		return nil
	}
	if len(ts) == 0 {
		switch {
		case len(all) == 0:
			fmt.Fprintln(opts.IO.ErrOut, `no tasks yet: start one with agent task "PROMPT"`)
		default:
			fmt.Fprintf(opts.IO.ErrOut, "no tasks match (%d in all: agent tasks --all)\n", len(all))
		}
		return nil
	}
	width := opts.IO.Width()
	c := colors{on: opts.IO.Color(opts.IO.OutTTY)}
	wide := width == 0 || width >= 120
	tb := &table{w: opts.IO.Out, width: width}
	if wide {
		tb.row("ID", "STATE", "AGE", "REPO", "BRANCH", "CHANGES", "PROMPT")
	} else {
		tb.row("ID", "STATE", "AGE", "REPO", "CHANGES", "PROMPT")
	}
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
		repo := termtext.Path(filepath.Base(t.Repo))
		prompt := oneLine(t.Prompt, 200)
		if wide {
			tb.row(t.ID, c.State(string(t.State)), age(t.Created), repo, termtext.Line(t.Branch), changes, prompt)
		} else {
			tb.row(t.ID, c.State(string(t.State)), age(t.Created), repo, changes, prompt)
		}
	}
	return tb.flush()
}

// TasksPruneOptions are the inputs of `agent tasks prune`.
type TasksPruneOptions struct {
	IO        *IOStreams
	Factory   *Factory
	OlderThan time.Duration
	Merged    bool
	Repo      string
	DryRun    bool
	JSON      bool
}

// NewCmdTasksPrune builds `agent tasks prune`.
func NewCmdTasksPrune(f *Factory, runF func(context.Context, *TasksPruneOptions) error) *cobra.Command {
	opts := &TasksPruneOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove the records of old discarded (and, with --merged, merged) tasks",
		Long: `Remove the records, transcripts and event logs of discarded tasks last
changed more than --older-than ago (and of merged ones with --merged). Their
branches and worktrees are already gone; nothing in a repository changes.`,
		Example: `  agent tasks prune
  agent tasks prune --older-than 0 --merged --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return tasksPruneRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&opts.OlderThan, "older-than", 7*24*time.Hour, "only tasks last changed longer ago than `DURATION` (e.g. 72h, 0 for all)")
	fl.BoolVar(&opts.Merged, "merged", false, "prune merged tasks too")
	fl.StringVar(&opts.Repo, "repo", "", "only tasks of the git checkout holding `DIR`")
	fl.BoolVarP(&opts.DryRun, "dry-run", "n", false, "only say what would be removed")
	fl.BoolVar(&opts.JSON, "json", false, `print {"pruned": [ids], "dry_run": bool} as JSON`)
	return cmd
}

func tasksPruneRun(ctx context.Context, opts *TasksPruneOptions) error {
	o, cfg, err := newOrchestrator(opts.Factory, event.Discard, nil, nil)
	if err != nil {
		return err
	}
	ts, err := o.Store().List()
	if err != nil {
		return err
	}
	repoDir := ""
	if opts.Repo != "" {
		r, err := worktree.Open(ctx, opts.Repo)
		if err != nil {
			return UsageErrorf("--repo %s: %v", opts.Repo, err)
		}
		repoDir = r.CommonDir
	}
	pruned := []string{}
	for _, t := range ts {
		if repoDir != "" && !sameDir(t.RepoGitDir, repoDir) {
			continue
		}
		if !(t.State == store.Discarded || (opts.Merged && t.State == store.Merged)) || time.Since(t.Updated) < opts.OlderThan {
			continue
		}
		pruned = append(pruned, t.ID)
		if opts.DryRun {
			continue
		}
		if err := o.Store().Delete(t.ID); err != nil {
			return err
		}
		// The transcript and the event log go with the record, when they
		// are the state directory's own files.
		for _, p := range []string{t.Session, t.Events} {
			if p != "" && strings.HasPrefix(filepath.Clean(p), cfg.StateDir+string(filepath.Separator)) {
				_ = os.Remove(p)
			}
		}
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"pruned": pruned, "dry_run": opts.DryRun})
	}
	verb := "removed"
	if opts.DryRun {
		verb = "would remove"
	}
	for _, id := range pruned {
		fmt.Fprintf(opts.IO.Out, "%s task %s\n", verb, id)
	}
	if len(pruned) == 0 {
		fmt.Fprintln(opts.IO.ErrOut, "nothing to prune")
	}
	return nil
}

// NewCmdTaskDiff builds `agent diff`.
func NewCmdTaskDiff(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "diff TASK", "Show a task's changes against its base",
		"Show the task branch's changes against the commit it started from; for a\ntask still in progress (or interrupted), its uncommitted changes too.\nOn a terminal the diff is coloured and paged (AGENT_PAGER, PAGER, less).",
		taskDiffRun, runF)
	cmd.Example = `  agent diff 3f2a
  agent diff 3f2a --no-pager | git apply --check
  agent diff 3f2a --json | jq -r .diff`
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"task", "branch", "base_commit", "diff"} as JSON`)
	cmd.Flags().BoolVar(&opts.NoPager, "no-pager", false, "do not page the output on a terminal")
	return cmd
}

func taskDiffRun(ctx context.Context, opts *TaskRefOptions) error {
	o, t, err := loadTask(opts)
	if err != nil {
		return err
	}
	if opts.JSON {
		var b strings.Builder
		if err := o.Diff(ctx, t, &b); err != nil {
			return err
		}
		return writeJSON(opts.IO.Out, map[string]any{"task": t.ID, "branch": t.Branch, "base_commit": t.BaseCommit, "diff": b.String()})
	}
	if !opts.NoPager {
		if err := opts.IO.StartPager(); err != nil {
			return err
		}
		defer opts.IO.StopPager()
	}
	// The diff holds the repository's and the agent's bytes: escaped line
	// by line (git already quotes file names), coloured on a terminal.
	c := colors{on: opts.IO.Color(opts.IO.OutTTY)}
	w := newLineWriter(opts.IO.Out, func(l string) string { return c.DiffLine(termtext.Text(l)) })
	err = o.Diff(ctx, t, w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// NewCmdTaskLog builds `agent log`.
func NewCmdTaskLog(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "log TASK", "Show a task's transcript and the commands it ran",
		"Show a task's record, its transcript (the model's messages and tool calls)\nand the commands it ran. On a terminal the output is paged.",
		taskLogRun, runF)
	cmd.Example = `  agent log 3f2a
  agent log 3f2a --json | jq '.messages | length'`
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"task": {...}, "messages": [...]} as JSON`)
	cmd.Flags().BoolVar(&opts.NoPager, "no-pager", false, "do not page the output on a terminal")
	return cmd
}

func taskLogRun(_ context.Context, opts *TaskRefOptions) error {
	_, t, err := loadTask(opts)
	if err != nil {
		return err
	}
	msgs := []llm.Message{}
	if t.Session != "" {
		if _, m, err := session.Load(t.Session); err == nil && m != nil {
			msgs = m
		}
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"task": newTaskJSON(t), "messages": msgs})
	}
	if !opts.NoPager {
		if err := opts.IO.StartPager(); err != nil {
			return err
		}
		defer opts.IO.StopPager()
	}
	w := opts.IO.Out
	c := colors{on: opts.IO.Color(opts.IO.OutTTY)}
	fmt.Fprintf(w, "task %s (%s) on %s, model %s\n", t.ID, c.State(string(t.State)), termtext.Line(t.Branch), termtext.Line(t.Model))
	if t.Error != "" {
		fmt.Fprintf(w, "%s %s\n", c.Red("error:"), termtext.Text(t.Error))
	}
	printSpeed(w, t.Tokens, opts.IO.Width())
	fmt.Fprintln(w, "\n"+c.Bold("== transcript =="))
	if len(msgs) == 0 {
		fmt.Fprintln(w, "(no transcript)")
	}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			fmt.Fprintf(w, "\n%s (%d characters)\n", c.Dim("[system]"), len(m.Content))
		case llm.RoleTool:
			fmt.Fprintf(w, "\n%s\n%s\n", c.Dim("[tool result "+termtext.Line(m.ToolCallID)+"]"), termtext.Text(clip(m.Content, 2000)))
		default:
			fmt.Fprintf(w, "\n%s\n", c.Cyan("["+termtext.Line(string(m.Role))+"]"))
			if m.Reasoning != "" {
				fmt.Fprintf(w, "%s %s\n", c.Dim("(thinking)"), termtext.Text(m.Reasoning))
			}
			if m.Content != "" {
				fmt.Fprintln(w, termtext.Text(m.Content))
			}
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(w, "-> %s %s\n", termtext.Line(tc.Function.Name), termtext.Line(clip(tc.Function.Arguments, 500)))
			}
		}
	}
	fmt.Fprintln(w, "\n"+c.Bold("== commands =="))
	printCommands(w, t.Commands, opts.IO.Width(), c)
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
			// The merge brings a spare checkout to the new tip in the
			// background: it ends before exit, not halfway.
			defer o.WaitSpares()
			d := orchestrator.Merge
			if opts.Squash {
				d = orchestrator.Squash
			}
			out, err := o.Decide(ctx, t, d, false)
			if err != nil {
				return err
			}
			note := signingNote(ctx, t, &out)
			if opts.JSON {
				oj := newOutcomeJSON(t.ID, &out)
				if note != "" {
					oj.Notes = append(oj.Notes, note)
				}
				return writeJSON(opts.IO.Out, oj)
			}
			fmt.Fprintln(opts.IO.Out, termtext.Text(out.Message))
			if note != "" {
				fmt.Fprintln(opts.IO.ErrOut, "note: "+termtext.Text(note))
			}
			return nil
		}, runF)
	cmd.Example = `  agent merge 3f2a
  agent merge 3f2a --squash`
	cmd.Flags().BoolVar(&opts.Squash, "squash", false, "make one commit instead of a merge commit")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print the outcome {"task", "decision", "state", "commit", "checkout", "message"} as JSON`)
	return cmd
}

// NewCmdTaskDiscard builds `agent discard`.
func NewCmdTaskDiscard(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	opts := &TaskRefOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "discard TASK...",
		Short: "Remove tasks' sandboxes, worktrees and branches",
		Long: `Remove each task's sandbox, worktree and branch. On a terminal you are asked
again when a branch has unmerged commits or a worktree uncommitted changes;
without a terminal nobody can be asked, so --yes is required.`,
		Example: `  agent discard 3f2a
  agent discard 3f2a 9c01 --yes
  agent discard $(agent tasks -q --state failed) --yes`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeTaskIDs(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Tasks = args
			if !opts.Yes && !opts.IO.CanPrompt() {
				return UsageErrorf("discarding deletes work that may exist nowhere else, and no terminal is there to confirm it: pass --yes")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return taskDiscardRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "do not ask for confirmation (required without a terminal)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"discarded": [outcomes], "kept": [ids]} as JSON`)
	return cmd
}

func taskDiscardRun(ctx context.Context, opts *TaskRefOptions) error {
	discarded, kept := []*outcomeJSON{}, []string{}
	var errs []error
	for _, ref := range opts.Tasks {
		opts.Task = ref
		o, t, err := loadTask(opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !opts.Yes && !t.State.Final() {
			commits, uncommitted, err := o.UnmergedWork(ctx, t)
			unknown := err != nil
			if unknown {
				// Its repository may be gone: say so, and still ask.
				fmt.Fprintf(opts.IO.ErrOut, "cannot tell what discarding task %s would lose: %s\n", t.ID, termtext.Text(err.Error()))
			}
			subs, _ := o.SubBranchesWithWork(ctx, t)
			for _, sb := range subs {
				fmt.Fprintf(opts.IO.ErrOut, "discarding also deletes sub-agent branch %s (%d commit(s) of its own)\n", termtext.Text(sb.Branch), sb.Commits)
			}
			if unknown || commits > 0 || len(uncommitted) > 0 || len(subs) > 0 {
				var sure bool
				if err := runForm(newDiscardConfirm(commits, len(uncommitted), &sure), opts.IO.In, opts.IO.ErrOut); err != nil {
					if errors.Is(err, ErrCancelled) {
						fmt.Fprintf(opts.IO.ErrOut, "kept task %s\n", t.ID)
						return err
					}
					return err
				}
				if !sure {
					fmt.Fprintf(opts.IO.ErrOut, "kept task %s\n", t.ID)
					kept = append(kept, t.ID)
					continue
				}
			}
		}
		out, err := o.Decide(ctx, t, orchestrator.Discard, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", t.ID, err))
			continue
		}
		discarded = append(discarded, newOutcomeJSON(t.ID, &out))
		if !opts.JSON {
			fmt.Fprintln(opts.IO.Out, termtext.Text(out.Message))
		}
	}
	if opts.JSON {
		if len(errs) > 0 {
			// The error object says what failed; the rest is on stderr.
			for _, d := range discarded {
				fmt.Fprintln(opts.IO.ErrOut, termtext.Text(d.Message))
			}
			return errors.Join(errs...)
		}
		return writeJSON(opts.IO.Out, map[string]any{"discarded": discarded, "kept": kept})
	}
	return errors.Join(errs...)
}

// NewCmdTaskShell builds `agent shell`.
func NewCmdTaskShell(f *Factory, runF func(context.Context, *TaskRefOptions) error) *cobra.Command {
	cmd, opts := taskRefCmd(f, "shell TASK", "Open an interactive shell in a task's sandbox",
		`Open a shell in the task's sandbox (the same hardened, network-less
container, over the task's worktree at /workspace). When the task is not
running, a sandbox is created for the shell and removed after it.`,
		taskShellRun, runF)
	cmd.Example = "  agent shell 3f2a"
	cmd.Flags().StringArrayVar(&opts.Labels, "label", nil, "extra sandbox container label KEY=VALUE (repeatable)")
	_ = cmd.Flags().MarkHidden("label")
	return cmd
}

func taskShellRun(ctx context.Context, opts *TaskRefOptions) error {
	o, t, err := loadTask(opts)
	if err != nil {
		return err
	}
	// Held for the whole shell: gc and resume leave its sandbox alone.
	release, err := o.UseTask(t)
	if err != nil {
		return err
	}
	defer release()
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
	fmt.Fprintf(opts.IO.ErrOut, "shell in the sandbox of task %s (%s at /workspace; no network); exit to leave\n", t.ID, termtext.Path(t.Worktree))
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
		Example: `  agent gc
  agent gc --json`,
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
		return writeJSON(opts.IO.Out, map[string]any{
			"interrupted": nonNil(rep.Interrupted), "removed_containers": nonNil(rep.RemovedContainers),
			"removed_worktrees": nonNil(rep.RemovedWorktrees), "removed_pool": nonNil(rep.RemovedPool), "kept": nonNil(rep.Kept)})
	}
	w := opts.IO.Out
	for _, id := range rep.Interrupted {
		fmt.Fprintf(w, "task %s: its process died; marked interrupted (agent resume %s)\n", id, id)
	}
	for _, id := range rep.RemovedContainers {
		fmt.Fprintf(w, "removed sandbox container %s\n", termtext.Line(id))
	}
	for _, id := range rep.RemovedPool {
		fmt.Fprintf(w, "removed warm pool sandbox %s\n", termtext.Line(id))
	}
	for _, p := range rep.RemovedWorktrees {
		fmt.Fprintf(w, "removed worktree %s\n", termtext.Path(p))
	}
	for _, n := range rep.Recovered {
		fmt.Fprintf(w, "recovered %s\n", termtext.Line(n))
	}
	for _, b := range rep.RemovedBranches {
		fmt.Fprintf(w, "deleted branch %s (merged)\n", termtext.Line(b))
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(w, "kept %s\n", termtext.Line(k))
	}
	if len(rep.Interrupted)+len(rep.RemovedContainers)+len(rep.RemovedPool)+len(rep.RemovedWorktrees)+len(rep.Recovered)+len(rep.RemovedBranches) == 0 {
		fmt.Fprintln(w, "nothing to clean up")
	}
	return nil
}
