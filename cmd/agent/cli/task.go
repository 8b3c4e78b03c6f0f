package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
)

// taskCommands builds `agent task` and the commands that manage tasks.
func taskCommands(f *Factory) []*cobra.Command {
	return []*cobra.Command{
		NewCmdTask(f, nil),
		NewCmdTasks(f, nil),
		NewCmdTaskDiff(f, nil),
		withFollow(f, NewCmdTaskLog(f, nil)),
		NewCmdTaskMerge(f, nil),
		NewCmdTaskDiscard(f, nil),
		NewCmdTaskShell(f, nil),
		NewCmdTaskResume(f, nil),
		NewCmdTaskGC(f, nil),
		NewCmdContinue(f, nil),
		NewCmdCheckout(f, nil),
		NewCmdChat(f, nil),
	}
}

// TaskOptions are the inputs of `agent task`.
type TaskOptions struct {
	IO      *IOStreams
	Factory *Factory

	Prompt             string
	PromptFile         string
	Repo               string
	Base               string
	Approve            string
	Run                RunFlags
	IncludeUncommitted bool
	GPUs               string // NVIDIA GPUs of the task's sandbox ("" none)
	JSON               bool
	Labels             []string
	// Plan starts in plan mode: only reading tools until the user
	// approves the agent's plan in a form.
	Plan bool
	// Test is the test command whose run after the agent's last turn is
	// the verdict ("" = config agent.test, else the environment's test:).
	Test string
}

// NewCmdTask builds `agent task`.
func NewCmdTask(f *Factory, runF func(context.Context, *TaskOptions) error) *cobra.Command {
	opts := &TaskOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "task PROMPT|-",
		Short: "Run a task in a sandbox and hand back a branch for review",
		Long: `Run a coding task: agent creates the branch agent/<slug>-<id> and a worktree
for it under the state directory, runs the agent in a hardened, network-less
container over that worktree, commits the result on the branch and shows a
review (commits, diffstat, commands run, tests). Then it asks what to do:
merge into the base branch, squash-merge, keep the branch (the default), or
discard it. Your checkout is never touched unless you merge.

The prompt is the argument, - for stdin, or --prompt-file FILE. The review
form's Request changes sends the agent a follow-up and comes back to the
review. Without a terminal no form can be shown: pass --approve; with
merge-if-green or squash-if-green the branch is merged only when the last
test command the agent ran passed, else it is kept and agent exits with
status 3.`,
		Example: `  agent task "add pagination to the users endpoint"
  agent task --llm script:demo/script.yaml --approve keep "fix the greeting"
  agent task --approve merge-if-green --prompt-file task.md
  agent task --isolation runsc "upgrade the parser"   # under gVisor`,
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := readPrompt(opts.IO, args, opts.PromptFile)
			if err != nil {
				return err
			}
			opts.Prompt = p
			if opts.Run.Isolation != "" {
				if _, err := sandbox.ParseIsolation(opts.Run.Isolation); err != nil {
					return UsageErrorf("--isolation: %v", err)
				}
			}
			opts.Run.changed(cmd)
			// The repository's .agent/config.yaml applies, not the one of
			// the directory agent was started in.
			f.SetProjectDir(projectDir(cmd.Context(), opts.Repo))
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return taskRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Repo, "repo", "", "`DIR` inside the git checkout to work on (default: the working directory)")
	fl.StringVar(&opts.Base, "base", "", "`REF` the task branches from (default: HEAD)")
	fl.StringVar(&opts.PromptFile, "prompt-file", "", "read the prompt from `FILE`")
	fl.StringVar(&opts.Approve, "approve", approveAsk, "decision after review: `ask|merge|squash|merge-if-green|squash-if-green|keep|discard`")
	_ = cmd.RegisterFlagCompletionFunc("approve", completeApprove)
	fl.BoolVar(&opts.IncludeUncommitted, "include-uncommitted", false, "start from a snapshot of the checkout's uncommitted changes")
	fl.StringVar(&opts.Run.Isolation, "isolation", "", "`runc|runsc`: run the task's sandboxes under runc (namespaces, seccomp) or gVisor; kept by continue, chat and shell (config sandbox.isolation)")
	fl.StringVar(&opts.GPUs, "gpus", "", "give the task's sandbox NVIDIA GPUs for CUDA tests, `all|IDS` (ids like 0,1; default: none; shown in the review)")
	fl.BoolVar(&opts.JSON, "json", false, "stream events as JSON lines on stdout; the last line is the result")
	fl.BoolVar(&opts.Plan, "plan", false, "plan mode: the agent may only read until you approve its plan (needs a terminal)")
	fl.StringVar(&opts.Test, "test", "", "test `COMMAND` run in the sandbox after the agent's last turn: its result is the verdict merge-if-green uses (config agent.test; default: test: of .agent/environment.yaml)")
	opts.Run.add(cmd)
	fl.StringArrayVar(&opts.Labels, "label", nil, "extra sandbox container label KEY=VALUE (repeatable)")
	_ = fl.MarkHidden("label")
	return cmd
}

// RunFlags choose the model and the sandbox. They override the
// configuration only when given. (They are not bound to viper keys: a key
// can be bound to one flag only, and other commands bind sandbox.image.)
type RunFlags struct {
	LLM, Model, Image          string
	LLMSet, ModelSet, ImageSet bool
	// AllowHosts are added to sandbox.egress for this run.
	AllowHosts []string
	// ShowThinking prints the model's thinking as it streams.
	ShowThinking bool
	// Isolation overrides sandbox.isolation when not empty (agent task
	// --isolation; a continued task keeps the one in its record).
	Isolation string
}

func (rf *RunFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&rf.LLM, "llm", "", "model endpoint: `URL` of an OpenAI-compatible server, or script:FILE for a scripted model (config llm.url; default: the managed llama-server)")
	fl.StringVar(&rf.Model, "model", "", "`NAME` of the served model to request (config llm.served_model)")
	fl.StringVar(&rf.Image, "image", "", "sandbox `IMAGE` (config sandbox.image)")
	fl.BoolVar(&rf.ShowThinking, "show-thinking", false, "show the model's thinking as it streams (it is always kept: agent log)")
	fl.StringArrayVar(&rf.AllowHosts, "allow-host", nil, "let the sandbox reach `HOST[:PORT]` through the logged egress proxy (repeatable; *.example.com for subdomains; config sandbox.egress; default: no network at all)")
}

// changed records which flags were given.
func (rf *RunFlags) changed(cmd *cobra.Command) {
	fl := cmd.Flags()
	rf.LLMSet, rf.ModelSet, rf.ImageSet = fl.Changed("llm"), fl.Changed("model"), fl.Changed("image")
}

// apply copies the given flags over cfg.
func (rf *RunFlags) apply(cfg *Config) {
	if rf.LLMSet {
		cfg.LLM.URL = rf.LLM
	}
	if rf.ModelSet {
		cfg.LLM.ServedModel = rf.Model
	}
	if rf.ImageSet {
		cfg.Sandbox.Image = rf.Image
	}
	cfg.Sandbox.Egress = append(cfg.Sandbox.Egress, rf.AllowHosts...)
	if rf.Isolation != "" {
		cfg.Sandbox.Isolation = rf.Isolation
	}
}

// projectDir is where a repository's .agent/config.yaml lives: the top of
// the checkout holding repo (the working directory when repo is ""), also
// when agent runs in one of its subdirectories; outside a checkout, the
// directory itself. It runs host git (rev-parse) to find the top: commands
// call it once, before the configuration loads, and hand the result to
// Factory.SetProjectDir, so that loading the configuration runs nothing.
func projectDir(ctx context.Context, repo string) string {
	dir := repo
	if dir == "" {
		dir, _ = os.Getwd()
	}
	if r, err := worktree.Open(ctx, dir); err == nil {
		return r.Root
	}
	return dir
}

// taskProjectDir is projectDir of a recorded task's repository. The
// command runs it before the configuration loads (its PreRunE), reading
// the state directory from the user's config, the environment and flags
// only (a project config cannot move the state directory); an unknown task
// falls back to the working directory, and the command then reports the
// unknown id itself.
func taskProjectDir(ctx context.Context, f *Factory, ref string) string {
	if st, err := store.Open(filepath.Join(f.conf.stateDir(), "tasks")); err == nil {
		if t, err := st.Resolve(ref); err == nil {
			return projectDir(ctx, t.Repo)
		}
	}
	return projectDir(ctx, "")
}

// newOrchestrator builds the orchestrator from the configuration. Docker is
// connected only when a command needs it.
func newOrchestrator(f *Factory, sink event.Sink, labels map[string]string, rf *RunFlags) (*orchestrator.Orchestrator, *Config, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, nil, err
	}
	if rf != nil {
		rf.apply(cfg)
	}
	spec, tbErr, err := sandboxSpec(cfg)
	if err != nil {
		return nil, nil, err
	}
	spec.Labels = labels
	egress, err := policy.ParseEgress(cfg.Sandbox.Egress)
	if err != nil {
		return nil, nil, fmt.Errorf("configuration sandbox.egress: %w", err)
	}
	envOpts, err := environmentOptions(cfg)
	if err != nil {
		return nil, nil, err
	}
	diskLimit, minFree, err := diskBounds(cfg)
	if err != nil {
		return nil, nil, err
	}
	o, err := orchestrator.New(orchestrator.Options{
		Environment:   envOpts,
		Test:          cfg.Agent.Test,
		TestTimeout:   cfg.Agent.TestTimeout,
		StateDir:      cfg.StateDir,
		DiskLimit:     diskLimit,
		MinFree:       minFree,
		Engine:        func(ctx context.Context) (sandbox.Backend, error) { return sandboxBackend(ctx, f) },
		Sandbox:       spec,
		ToolboxError:  tbErr,
		Sink:          sink,
		MaxIterations: cfg.Agent.MaxIterations,
		Hooks: agent.Hooks{
			SessionStart: cfg.Agent.Hooks.SessionStart, PreTool: cfg.Agent.Hooks.PreTool, PostTool: cfg.Agent.Hooks.PostTool,
		},
		LLMPort:         cfg.LLM.Port,
		LLMAddress:      managedLLMAddress(f),
		APIKey:          cfg.LLM.APIKey,
		LLMStallTimeout: cfg.LLM.StallTimeout,
		LLMReplyTimeout: cfg.LLM.ReplyTimeout,
		SubAgents:       cfg.Agent.SubAgents,
		AgentTypes:      cfg.Agent.Types,
		MCPServers:      cfg.MCP.Servers,
		Egress:          egress,
		ToolMode:        agent.ToolMode(cfg.Agent.ToolMode),
		Unsafe:          unsafeFromEnv(f),

		SpareCheckouts: cfg.Sandbox.SpareCheckouts,
		Pool:           cfg.Sandbox.Pool,
	})
	if err != nil {
		return nil, nil, err
	}
	return o, cfg, nil
}

// jsonResultOnError makes a --json task run that fails before it has a
// task (bad flags, no model, no repository) still end its JSON lines with
// a result line carrying the error.
func jsonResultOnError(ios *IOStreams, jsonOut bool, err *error) {
	if !jsonOut || *err == nil || ios.jsonDone {
		return
	}
	_ = writeJSONLine(ios.Out, newTaskResult(nil, nil, nil, *err))
	markJSONWritten(ios)
}

// approveFor parses --approve, and refuses at once to run when it asks for
// a decision nobody can give: failing after a long run would waste it.
func approveFor(ios *IOStreams, flag string, jsonOut bool, command string) (string, error) {
	approve, err := parseApprove(flag)
	if err != nil {
		return "", err
	}
	if approve == approveAsk && (jsonOut || !ios.CanPrompt()) {
		return "", errNeedApprove(command)
	}
	return approve, nil
}

// openRun parses the extra labels and opens the renderer a run reports to
// and the orchestrator it runs in. The caller closes the renderer; on an
// error it is already closed.
func openRun(f *Factory, ios *IOStreams, labelFlags []string, rf *RunFlags, jsonOut bool) (*eventRenderer, *orchestrator.Orchestrator, *Config, error) {
	labels, err := parseLabelFlags(labelFlags)
	if err != nil {
		return nil, nil, nil, err
	}
	r := newEventRenderer(ios, jsonOut)
	r.showThinking = rf.ShowThinking
	o, cfg, err := newOrchestrator(f, r, labels, rf)
	if err != nil {
		r.Close()
		return nil, nil, nil, err
	}
	return r, o, cfg, nil
}

func taskRun(ctx context.Context, opts *TaskOptions) (err error) {
	defer jsonResultOnError(opts.IO, opts.JSON, &err)
	approve, err := approveFor(opts.IO, opts.Approve, opts.JSON, "agent task")
	if err != nil {
		return err
	}
	if err := checkMergeable(ctx, approve, opts.Repo, opts.Base); err != nil {
		return err
	}
	if opts.Plan && (opts.JSON || !opts.IO.CanPrompt()) {
		return UsageErrorf("agent task --plan shows the plan in a form for approval, but stdin/stdout is not a terminal")
	}
	r, o, cfg, err := openRun(opts.Factory, opts.IO, opts.Labels, &opts.Run, opts.JSON)
	if err != nil {
		return err
	}
	defer r.Close()
	// The pool refill started once the sandbox was ready ends before exit.
	defer o.WaitPool()
	// So does the spare checkout the task started for the next one: the
	// process would otherwise end it halfway, leaving a half-made
	// directory and no spare for the next task.
	defer o.WaitSpares()
	gpuNote, err := gpuMemoryCheck(ctx, opts.GPUs, cfg.Sandbox.GPUReserve, func(ctx context.Context) (*llamaserver.Status, error) {
		m, err := llmManager(opts.Factory, nil)
		if err != nil {
			return nil, err
		}
		return m.Status(ctx, "")
	}, hostGPUMemory)
	if err != nil {
		return err
	}
	if gpuNote != "" {
		r.Emit(event.Event{Kind: event.Notice, Text: "warning: " + gpuNote})
	}
	run, err := o.NewTask(ctx, orchestrator.TaskOptions{
		Prompt: opts.Prompt, RepoDir: opts.Repo, Base: opts.Base, IncludeUncommitted: opts.IncludeUncommitted, GPUs: opts.GPUs, GPUNote: gpuNote, Test: opts.Test,
		LLM: cfg.LLM.URL, Model: cfg.LLM.ServedModel, Image: cfg.Sandbox.Image,
	})
	if err != nil {
		return err
	}
	defer run.Close()
	run.Plan = opts.Plan
	if strings.HasPrefix(cfg.LLM.URL, orchestrator.ScriptPrefix) {
		r.Emit(event.Event{Kind: event.Notice, Task: run.Task.ID,
			Text: "using a SCRIPTED model (" + cfg.LLM.URL + "): its replies are canned, not a real model's"})
	}
	return executeAndDecide(ctx, opts.IO, o, run, r, approve, opts.JSON)
}

// checkMergeable fails before a run that asks to merge when there is no
// branch to merge into (a detached HEAD, a tag, a commit): finding out
// after the whole run would waste it. Other problems with the repository
// or the base are left to NewTask, which explains them.
func checkMergeable(ctx context.Context, approve, repo, base string) error {
	if approve != string(orchestrator.Merge) && approve != string(orchestrator.Squash) {
		return nil
	}
	dir := repo
	if dir == "" {
		dir = "."
	}
	r, err := worktree.Open(ctx, dir)
	if err != nil {
		return nil
	}
	b, err := r.ResolveBase(ctx, base)
	if err != nil || b.Branch != "" {
		return nil
	}
	what := "HEAD is detached"
	if base != "" {
		what = fmt.Sprintf("the base %s is not a branch", termtext.Line(base))
	}
	return UsageErrorf("--approve %s: %s, so there is nothing to merge into: check out a branch, pass --base BRANCH, or use --approve keep", approve, what)
}

// executeAndDecide runs a task to its review and applies the decision.
// Request changes in the review continues the task with the user's
// message and comes back to the review. With --json its last line on
// stdout is always the result object (taskResult), also when the run or
// the decision failed.
func executeAndDecide(ctx context.Context, ios *IOStreams, o *orchestrator.Orchestrator, run *orchestrator.Run, r *eventRenderer, approve string, jsonOut bool) (err error) {
	t := run.Task
	var rv *orchestrator.Review
	var out *orchestrator.Outcome
	var gate *gateJSON
	var note string
	if jsonOut {
		defer func() {
			res := newTaskResult(t, rv, out, err)
			res.Gate = gate
			if res.Outcome != nil && note != "" {
				res.Outcome.Notes = append(res.Outcome.Notes, note)
			}
			if werr := writeJSONLine(ios.Out, res); werr != nil && err == nil {
				err = werr
			}
			markJSONWritten(ios)
		}()
	}
	human, tty, width := ios.Out, ios.OutTTY, ios.Width()
	if jsonOut {
		human, tty, width = ios.ErrOut, ios.ErrTTY, ios.ErrWidth()
	}
	if ios.CanPrompt() && !jsonOut {
		// ask_user and plan approval answer in forms; without a terminal
		// the agent is told that no user is available.
		o.SetUser(&formUser{ios: ios, r: r})
	}
	for {
		err := run.Execute(ctx)
		// A plan is approved once; a follow-up round works normally.
		run.Plan = false
		if err != nil {
			r.Close()
			if errors.Is(err, orchestrator.ErrInterrupted) {
				fmt.Fprintf(ios.ErrOut, "agent: task %s interrupted; its worktree keeps every change: `agent resume %s` continues it\n", t.ID, t.ID)
				return ErrCancelled
			}
			return err
		}
		rv, err = o.Review(ctx, t)
		if err != nil {
			return err
		}
		r.Close()
		printReview(human, rv, width, colors{on: ios.Color(tty)})
		printSpeed(human, t.Tokens, width)

		var d orchestrator.Decision
		var gateMsg string
		var gateErr, cancelled error
		switch approve {
		case approveAsk:
			unmerged, uncommitted, err := o.UnmergedWork(ctx, t)
			if err != nil {
				return err
			}
			// Ctrl-C or Esc on the form keeps the branch (nothing is
			// lost) and then exits 130 like any interrupted command.
			var changes string
			d, changes, cancelled = askReview(ios, rv, unmerged, len(uncommitted), true)
			if cancelled != nil && !errors.Is(cancelled, ErrCancelled) {
				return cancelled
			}
			if d == requestChanges {
				if err := continueAfterReview(human, run, changes); err != nil {
					return err
				}
				r.reopen()
				continue
			}
		case approveMergeIfGreen, approveSquashIfGreen:
			d, gateMsg, gateErr = gateDecision(approve, rv)
			gate = &gateJSON{Passed: gateErr == nil, Message: gateMsg}
		default:
			d = orchestrator.Decision(approve)
		}
		res, derr := o.Decide(ctx, t, d, true)
		if derr != nil {
			return derr
		}
		out = &res
		printOutcome(human, res.Message, width)
		if note = signingNote(ctx, t, &res); note != "" {
			printOutcome(human, "note: "+note, width)
		}
		if gateErr != nil {
			fmt.Fprintln(ios.ErrOut, "agent: "+termtext.Text(gateMsg))
			return gateErr
		}
		return cancelled
	}
}

// userSignsCommits reports whether the user's git signs commits in repo
// (commit.gpgsign from any of their config files). The orchestrator's own
// git overrides that setting on every run, so it is read here with plain
// git config, which runs no hook, filter or signing program.
func userSignsCommits(ctx context.Context, repo string) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "git", "-C", repo, "config", "--type=bool", "--get", "commit.gpgsign")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// signingNote says when a merge or squash commit is unsigned in a
// repository that signs its commits: host git never runs the user's
// signing program (DESIGN invariant 2), so the user should know and can
// sign it themselves.
func signingNote(ctx context.Context, t *store.Task, out *orchestrator.Outcome) string {
	if out.Commit == "" || (out.Decision != orchestrator.Merge && out.Decision != orchestrator.Squash) {
		return ""
	}
	if !userSignsCommits(ctx, t.Repo) {
		return ""
	}
	return fmt.Sprintf("the commit %.12s on %s is not signed although commit.gpgsign is set: agent never runs a signing program; "+
		"to sign it, on %s: git commit --amend --no-edit -S", out.Commit, t.BaseBranch, t.BaseBranch)
}

// TaskResumeOptions are the inputs of `agent resume`.
type TaskResumeOptions struct {
	IO      *IOStreams
	Factory *Factory
	Task    string
	Approve string
	JSON    bool
	Labels  []string
	Run     RunFlags
}

// NewCmdTaskResume builds `agent resume`.
func NewCmdTaskResume(f *Factory, runF func(context.Context, *TaskResumeOptions) error) *cobra.Command {
	opts := &TaskResumeOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "resume TASK",
		Short: "Continue an interrupted task in the same worktree",
		Long: `Continue a task whose run was interrupted (Ctrl-C, a killed process, a
crash) or failed: a fresh sandbox is created over the same worktree and the
agent continues the same transcript. --llm overrides the task's endpoint.`,
		Example: `  agent resume 3f2a
  agent resume 3f2a --llm http://127.0.0.1:8081 --approve keep`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeTaskIDs(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Task = args[0]
			opts.Run.changed(cmd)
			if opts.Run.ImageSet {
				// It would be ignored: the worktree goes on in the image
				// the task started with.
				return UsageErrorf("--image: a resumed task runs in the sandbox image it started with")
			}
			// The task's repository's .agent/config.yaml applies (its
			// hooks and limits), not the one of the directory agent was
			// started in.
			f.SetProjectDir(taskProjectDir(cmd.Context(), f, opts.Task))
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return taskResumeRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Approve, "approve", approveAsk, "decision after review: `ask|merge|squash|merge-if-green|squash-if-green|keep|discard`")
	_ = cmd.RegisterFlagCompletionFunc("approve", completeApprove)
	fl.BoolVar(&opts.JSON, "json", false, "stream events as JSON lines on stdout; the last line is the result")
	opts.Run.add(cmd)
	fl.StringArrayVar(&opts.Labels, "label", nil, "extra sandbox container label KEY=VALUE (repeatable)")
	_ = fl.MarkHidden("label")
	return cmd
}

// endpointOverride is the endpoint and served model a task that goes on
// (resume, continue) uses instead of those it started with: only what this
// run names, with a flag or an AGENT_* variable ("" keeps the task's own; a
// config file is not about this task).
func endpointOverride(rf *RunFlags, cfg *Config) (llm, model string) {
	if rf.LLMSet || os.Getenv(envVar("llm.url")) != "" {
		llm = cfg.LLM.URL
	}
	if rf.ModelSet || os.Getenv(envVar("llm.served_model")) != "" {
		model = cfg.LLM.ServedModel
	}
	return llm, model
}

func taskResumeRun(ctx context.Context, opts *TaskResumeOptions) (err error) {
	defer jsonResultOnError(opts.IO, opts.JSON, &err)
	approve, err := approveFor(opts.IO, opts.Approve, opts.JSON, "agent resume")
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
	ro := orchestrator.ResumeOptions{}
	ro.LLM, ro.Model = endpointOverride(&opts.Run, cfg)
	run, err := o.Resume(ctx, opts.Task, ro)
	if err != nil {
		return err
	}
	defer run.Close()
	noteScriptedModel(opts.IO, ro.LLM, run.Task.LLM)
	return executeAndDecide(ctx, opts.IO, o, run, r, approve, opts.JSON)
}
