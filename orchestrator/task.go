package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/failpoint"
	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// TaskOptions describe a new task.
type TaskOptions struct {
	Prompt string
	// RepoDir is a directory inside the user's checkout ("" = working directory).
	RepoDir string
	// Base is the ref the task branches from ("" = HEAD).
	Base string
	// IncludeUncommitted starts from a snapshot of the checkout's
	// uncommitted changes instead of the base commit alone.
	IncludeUncommitted bool
	// LLM is "script:FILE", a URL, or "" for the managed llama-server.
	LLM string
	// Model is the model name sent to the server ("" = the server's).
	Model string
	// Image overrides the sandbox image.
	Image string
	// GPUs gives the task's sandbox (and its sub-agents') NVIDIA GPUs:
	// "all" or ids like "0,1"; "" or "none": none (the default).
	GPUs string
	// GPUNote is what the review says about the GPUs' memory check ("" when
	// there is nothing to say).
	GPUNote string
	// Isolation of the task's sandboxes ("" = the orchestrator's
	// Sandbox.Isolation); recorded in the task so that every later sandbox
	// of the task keeps it.
	Isolation sandbox.Isolation
	// Test is the test command run after the agent's last turn, whose
	// result is the verdict ("" = Options.Test, else the project
	// environment's test:).
	Test string
}

// Run is a task being worked on by this process. Close it when done.
type Run struct {
	o       *Orchestrator
	Task    *store.Task
	ep      *endpoint
	release func()
	begin   time.Time
	resume  bool
	// followUp is the user's next message when the run continues the
	// conversation (agent continue, Request changes).
	followUp string
	// compactNext compacts the conversation before the next turn.
	compactNext bool
	// Plan starts the agent in plan mode (agent.Options.PlanMode).
	Plan bool
	// egressDir is the socket directory of the run's egress proxy; "" when
	// the sandbox has no network at all.
	egressDir string
	// mu guards Task while the run's goroutines (event recorder,
	// sub-agents, the new worktree's fill) change and save it.
	mu sync.Mutex
	// filled is closed when a new worktree's files are all written
	// (nil when they were there before the run); fillErr (under mu) is
	// the error of writing them.
	filled  chan struct{}
	fillErr error
	// dirtyNote reads the user's uncommitted changes and returns the
	// notice about them ("" for none), for a new task.
	dirtyNote func() string
}

// Close releases the task's claim and the model endpoint.
func (r *Run) Close() {
	if r.ep != nil {
		r.ep.close()
	}
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// Model is the model the run talks to.
func (r *Run) Model() string { return r.ep.model }

// NewTask checks the inputs (repository, base, model endpoint, image,
// toolbox) and only then creates the task branch, its worktree and its
// record, under the repository lock. Bad input creates nothing.
func (o *Orchestrator) NewTask(ctx context.Context, opts TaskOptions) (_ *Run, err error) {
	begin := time.Now()
	prompt := strings.TrimSpace(opts.Prompt)
	if prompt == "" {
		return nil, errors.New("the task prompt is empty: say what the agent should do")
	}
	dir := opts.RepoDir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	if abs, err := filepath.Abs(dir); err == nil && o.insideStateDir(abs) {
		return nil, fmt.Errorf("%s is inside the agent's state directory (a task worktree): run tasks from your own checkout", abs)
	}
	repo, err := worktree.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	repo.UnsafeAddSpecial = o.opts.Unsafe.AddSpecial
	if o.insideStateDir(repo.Root) {
		return nil, fmt.Errorf("%s is inside the agent's state directory (a task worktree): run tasks from your own checkout", repo.Root)
	}
	base, err := repo.ResolveBase(ctx, opts.Base)
	if err != nil {
		return nil, err
	}
	image := opts.Image
	if image == "" {
		image = o.opts.Sandbox.Image
	}
	gpus, err := taskGPUs(opts.GPUs)
	if err != nil {
		return nil, err
	}
	isolation := opts.Isolation
	if isolation == "" {
		isolation = o.opts.Sandbox.Isolation
	}
	if isolation, err = sandbox.ParseIsolation(string(isolation)); err != nil {
		return nil, err
	}
	if err := o.preflightSandbox(ctx, image, isolation); err != nil {
		return nil, err
	}
	env, envImage, err := o.prepareEnvironment(ctx, repo, base.Commit)
	if err != nil {
		return nil, err
	}
	test, err := o.testCommand(ctx, repo, base.Commit, opts.Test)
	if err != nil {
		return nil, err
	}
	if env != nil {
		image = envImage
	}
	ep, err := o.openLLM(ctx, opts.LLM, opts.Model)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ep.close()
		}
	}()

	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return nil, err
	}
	defer unlock()

	o.pruneLost(repo, func(text string) { o.opts.Sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Text: text}) })
	id, err := o.store.NewID()
	if err != nil {
		return nil, err
	}
	release, err := o.store.Claim(id)
	if err != nil {
		_ = o.store.Delete(id)
		return nil, err
	}
	defer func() {
		if err != nil {
			release()
			_ = o.store.Delete(id)
		}
	}()
	now := time.Now().UTC()
	t := &store.Task{
		ID: id, Prompt: prompt, State: store.Created,
		Repo: repo.Root, RepoGitDir: repo.CommonDir,
		BaseRef: base.Ref, BaseBranch: base.Branch, BaseCommit: base.Commit, StartCommit: base.Commit,
		Branch: "agent/" + Slug(prompt) + "-" + id,
		Image:  image, Environment: env, GPUs: gpus, GPUNote: opts.GPUNote, Isolation: string(isolation), LLM: opts.LLM, Model: ep.model, PID: os.Getpid(),
		Session: o.sessionPath(id), Events: o.eventsPath(id),
		Created: now, TestCommand: test,
	}
	if err := repo.CheckBranchName(ctx, t.Branch); err != nil {
		t.Branch = "agent/task-" + id
	}

	var dirtyNote func() string
	if opts.IncludeUncommitted {
		dirty, err := repo.Dirty(ctx)
		if err != nil {
			return nil, err
		}
		if len(dirty) > 0 {
			snap, err := repo.Snapshot(ctx, base, "Snapshot of uncommitted changes\n\nThe task started from these changes on top of "+short(base.Commit)+".\n\nAgent-Task: "+id+"\n")
			if err != nil {
				return nil, err
			}
			t.StartCommit = snap
			o.emit(t, event.Notice, fmt.Sprintf("your checkout has %d uncommitted change(s); the task starts from a snapshot of them (commit %s on its branch)", len(dirty), short(snap)))
		}
	} else {
		// Only a notice depends on the user's uncommitted changes: on a
		// big checkout, git status takes a second or more (and most of a
		// small machine), so the run reads them once its sandbox is ready
		// and shows the notice then (runDirtyNote).
		dirtyNote = func() string {
			dirty, err := repo.Dirty(context.WithoutCancel(ctx))
			if err != nil || len(dirty) == 0 {
				return ""
			}
			return fmt.Sprintf("your checkout has %d uncommitted change(s); they are left alone and the task starts from the base commit %s (pass --include-uncommitted to start from them)", len(dirty), short(base.Commit))
		}
	}

	// Journal first: a kill while the branch and worktree are created
	// leaves a record that tasks, resume, discard and gc can see.
	t.Worktree = o.worktreePath(id)
	t.Pending = &store.Pending{Op: store.PendingCreate, Started: now}
	if err := o.store.Save(t); err != nil {
		return nil, err
	}
	failpoint.Hit("task-record-saved")
	wstart := time.Now()
	wt, err := repo.Add(ctx, worktree.AddOptions{Path: t.Worktree, Branch: t.Branch, Start: t.StartCommit, Reason: "agent task " + id, NoCheckout: true})
	if err != nil {
		return nil, err
	}
	failpoint.Hit("task-worktree-added")
	t.Worktree, t.WorktreeGit, t.Pending = wt.Path, wt.GitDir, nil
	t.Timings.Worktree = time.Since(wstart).Milliseconds()
	if err := o.store.Save(t); err != nil {
		cctx := context.WithoutCancel(ctx)
		_ = repo.Remove(cctx, wt)
		_ = repo.DeleteBranch(cctx, t.Branch, "")
		return nil, err
	}
	o.emit(t, event.Progress, fmt.Sprintf("task %s: branch %s from %s, worktree %s", id, t.Branch, describeBase(t), wt.Path))
	return &Run{o: o, Task: t, ep: ep, release: release, begin: begin, dirtyNote: dirtyNote}, nil
}

// runDirtyNote reads the user's uncommitted changes and shows the notice
// about them, in the background; the returned wait waits for it.
func (r *Run) runDirtyNote() (wait func()) {
	note := r.dirtyNote
	r.dirtyNote = nil
	if note == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if msg := note(); msg != "" {
			r.o.emit(r.Task, event.Notice, msg)
		}
	}()
	return func() { <-done }
}

// ResumeOptions say how to continue a task.
type ResumeOptions struct {
	// LLM overrides the task's recorded endpoint ("" keeps it).
	LLM   string
	Model string
}

// Resume claims an interrupted or failed task to continue it in the same
// worktree with the same transcript.
func (o *Orchestrator) Resume(ctx context.Context, ref string, opts ResumeOptions) (_ *Run, err error) {
	begin := time.Now()
	t, err := o.store.Resolve(ref)
	if err != nil {
		return nil, err
	}
	release, err := o.store.Claim(t.ID)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	switch t.State {
	case store.Running, store.Created, store.Interrupted, store.Failed:
	default:
		return nil, fmt.Errorf("task %s is %s, not interrupted: nothing to resume; `agent continue %s \"...\"` sends it a follow-up message", t.ID, t.State, t.ID)
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := o.recoverWorktree(ctx, repo, t); err != nil {
		return nil, err
	}
	if err := o.preflightSandbox(ctx, t.Image, sandbox.Isolation(t.Isolation)); err != nil {
		return nil, err
	}
	spec, ep, err := o.reopenLLM(ctx, t, opts.LLM, opts.Model)
	if err != nil {
		return nil, err
	}
	t.LLM, t.Model, t.PID, t.Error = spec, ep.model, os.Getpid(), ""
	return &Run{o: o, Task: t, ep: ep, release: release, begin: begin, resume: true}, nil
}

func (o *Orchestrator) emit(t *store.Task, kind event.Kind, text string) {
	o.opts.Sink.Emit(event.Event{Time: time.Now(), Kind: kind, Task: t.ID, Text: text})
}

func describeBase(t *store.Task) string {
	if t.BaseBranch != "" {
		return t.BaseBranch + " (" + short(t.BaseCommit) + ")"
	}
	return short(t.BaseCommit)
}

func short(id string) string {
	if len(id) > 10 {
		return id[:10]
	}
	return id
}

// Slug turns a prompt into a short branch-name part: its first
// lower-case ASCII words joined by dashes, at most 32 characters, cut at a
// word boundary.
func Slug(prompt string) string {
	words := strings.FieldsFunc(strings.ToLower(prompt), func(r rune) bool {
		return r >= unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r))
	})
	var b strings.Builder
	for _, w := range words {
		if b.Len() > 0 && b.Len()+1+len(w) > 32 {
			break
		}
		if b.Len() > 0 {
			b.WriteByte('-')
		}
		if len(w) > 32 {
			w = w[:32]
		}
		b.WriteString(w)
	}
	if b.Len() == 0 {
		return "task"
	}
	return b.String()
}

// taskGPUs checks --gpus of a task: NVIDIA GPUs only ("all" or ids), as
// device requests; "" when the sandbox gets none.
func taskGPUs(s string) (string, error) {
	if s == "" || s == "none" {
		return "", nil
	}
	g, err := llamaserver.ParseGPUs(s)
	if err != nil {
		return "", err
	}
	if g.Mode != llamaserver.GPUNvidia {
		return "", fmt.Errorf("--gpus %s: a task's sandbox takes NVIDIA GPUs only: all, or ids like 0,1", s)
	}
	return g.String(), nil
}

// reopenLLM opens the endpoint a resumed or continued task talks to: the
// one it started with and its model, unless llm (and model) name others.
// It returns the endpoint's spec as the record keeps it.
func (o *Orchestrator) reopenLLM(ctx context.Context, t *store.Task, llm, model string) (string, *endpoint, error) {
	spec := t.LLM
	if llm != "" {
		spec = llm
	}
	if model == "" && !strings.HasPrefix(spec, ScriptPrefix) && spec == t.LLM {
		model = t.Model
	}
	ep, err := o.openLLM(ctx, spec, model)
	return spec, ep, err
}
