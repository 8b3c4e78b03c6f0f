package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// ContinueOptions say how to go on with a task.
type ContinueOptions struct {
	// Prompt is the user's next message.
	Prompt string
	// LLM overrides the task's recorded endpoint ("" keeps it).
	LLM   string
	Model string
	// Test replaces the task's test command ("" keeps it).
	Test string
}

// continuable reports whether a task in state s still has its branch and can
// take another message: anything but merged or discarded.
func continuable(s store.State) bool {
	switch s {
	case store.Running, store.Created, store.Interrupted, store.Failed, store.Review, store.Kept:
		return true
	}
	return false
}

// Continue claims a task to go on with its conversation: the same branch,
// worktree (re-created when it was handed back) and transcript, a fresh
// sandbox, and the new message after everything the model saw before.
// It works on a task under review, kept, failed, interrupted or stopped at
// a limit; the run ends in the usual review.
func (o *Orchestrator) Continue(ctx context.Context, ref string, opts ContinueOptions) (_ *Run, err error) {
	begin := time.Now()
	prompt := strings.TrimSpace(opts.Prompt)
	if prompt == "" {
		return nil, errors.New("the follow-up message is empty: say what the agent should do next")
	}
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
	// Re-read under the claim: the record may have moved on meanwhile.
	if t, err = o.store.Load(t.ID); err != nil {
		return nil, err
	}
	if !continuable(t.State) {
		return nil, fmt.Errorf("task %s is %s: its branch is gone, so there is nothing to continue; start a new task (with --base to build on its work)", t.ID, t.State)
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := o.preflightSandbox(ctx, t.Image, sandbox.Isolation(t.Isolation)); err != nil {
		return nil, err
	}
	spec, ep, err := o.reopenLLM(ctx, t, opts.LLM, opts.Model)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ep.close()
		}
	}()
	if err := o.ensureWorktree(ctx, repo, t); err != nil {
		return nil, err
	}
	t.LLM, t.Model, t.PID = spec, ep.model, os.Getpid()
	if opts.Test != "" {
		t.TestCommand = opts.Test
	}
	r := &Run{o: o, Task: t, ep: ep, release: release, begin: begin}
	if err := r.Continue(prompt); err != nil {
		return nil, err
	}
	return r, nil
}

// Continue prepares a run that has finished (or a claimed task) to go on
// with prompt as the user's next message; Execute then runs it. This is
// what Request changes in the review does, without letting go of the task.
func (r *Run) Continue(prompt string) error {
	t := r.Task
	prompt = strings.TrimSpace(prompt)
	if prompt == "" {
		return errors.New("the follow-up message is empty: say what the agent should do next")
	}
	if !continuable(t.State) {
		return fmt.Errorf("task %s is %s: there is nothing to continue", t.ID, t.State)
	}
	var from *store.FollowUpFrom
	if t.State == store.Review || t.State == store.Kept {
		// What the review showed is journalled before the follow-up
		// changes anything: one that fails having changed nothing puts
		// the task back (see unwindFollowUp).
		tip, err := r.branchTip(context.Background())
		if err != nil {
			return err
		}
		from = &store.FollowUpFrom{State: t.State, Decision: t.Decision, Tip: tip, Finished: t.Finished, HostTest: t.HostTest, SubAgents: len(t.SubAgents)}
	}
	r.resume, r.followUp, r.begin = true, prompt, time.Now()
	return r.update(func(t *store.Task) {
		if from != nil {
			t.FollowUpFrom = from
		}
		t.FollowUps = append(t.FollowUps, prompt)
		t.Decision, t.Error = "", ""
		t.HostTest = nil // this round's run decides
	})
}

// branchTip is the commit the task's branch points to.
func (r *Run) branchTip(ctx context.Context) (string, error) {
	repo, err := r.o.openRepo(ctx, r.Task)
	if err != nil {
		return "", err
	}
	tip, err := repo.BranchTip(ctx, r.Task.Branch)
	if err == nil && tip == "" {
		err = fmt.Errorf("task %s: its branch %s is gone", r.Task.ID, r.Task.Branch)
	}
	return tip, err
}

// unwindFollowUp is called when a run ended with err and its sandbox is
// gone. A follow-up of a reviewed task that failed (not interrupted by
// the user) having changed nothing, its branch still at the commit the
// review showed and its worktree without a change, puts the task back as
// it was: under review or kept, mergeable. Anything else leaves the task
// failed or interrupted, for resume. It returns the error to report.
func (r *Run) unwindFollowUp(ctx context.Context, err error) error {
	t := r.Task
	from := t.FollowUpFrom
	if from == nil || ctx.Err() != nil || t.SandboxID != "" || len(t.SubAgents) != from.SubAgents ||
		(t.State != store.Failed && t.State != store.Interrupted) {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if tip, terr := r.branchTip(ctx); terr != nil || tip != from.Tip {
		return err
	}
	repo, rerr := r.o.openRepo(ctx, t)
	if rerr != nil {
		return err
	}
	if wt := r.o.checkedOutWorktree(repo, t); wt != nil {
		if changes, cerr := repo.Changes(ctx, wt); cerr != nil || len(changes) != 0 {
			return err
		}
	} else if t.Populated {
		return err // the worktree should be there and is not: resume sorts it out
	}
	why := t.Error
	if uerr := r.update(func(t *store.Task) {
		t.State, t.Decision, t.Finished, t.HostTest = from.State, from.Decision, from.Finished, from.HostTest
		t.Error, t.FollowUpFrom = "", nil
	}); uerr != nil {
		return errors.Join(err, uerr)
	}
	verb := "under review"
	if from.State == store.Kept {
		verb = "kept"
	}
	return fmt.Errorf("task %s: the follow-up failed: %s; it changed nothing, so the task is %s as before: `agent merge %s` takes the reviewed work, `agent continue %s` tries the follow-up again", t.ID, why, verb, t.ID, t.ID)
}

// ensureWorktree re-creates the worktree of a task that was handed back
// with `agent checkout` (or whose worktree directory is gone), from its
// branch. The branch must not be checked out anywhere else.
func (o *Orchestrator) ensureWorktree(ctx context.Context, repo *worktree.Repo, t *store.Task) error {
	if !t.Released {
		if wt, err := o.taskWorktree(repo, t); err == nil && (wt.Exists() || !t.Populated) {
			return nil
		}
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return err
	}
	defer unlock()
	if at, err := repo.CheckedOutAt(ctx, t.Branch); err != nil {
		return err
	} else if at != "" {
		return fmt.Errorf("task %s: its branch %s is checked out in %s; switch that checkout to another branch (git switch -) and run the command again: the agent works in a worktree of its own", t.ID, t.Branch, at)
	}
	// What is about to happen is recorded first: a crash leaves a record
	// that says the worktree must be (re-)created, never one that points
	// at a worktree that is not there.
	t.Populated, t.Released = false, true
	if err := o.store.Save(t); err != nil {
		return err
	}
	if _, err := os.Lstat(t.Worktree); err == nil {
		// A leftover directory without its admin directory holds nothing
		// git knows of; it is not removed behind the user's back.
		return fmt.Errorf("task %s: %s exists but is not its worktree any more; move it away and continue again", t.ID, t.Worktree)
	}
	wt, err := repo.Reattach(ctx, t.Worktree, t.Branch, "agent task "+t.ID)
	if err != nil {
		return err
	}
	t.Worktree, t.WorktreeGit, t.Released = wt.Path, wt.GitDir, false
	if err := o.store.Save(t); err != nil {
		return err
	}
	o.emit(t, event.Progress, fmt.Sprintf("task %s: worktree %s re-created from branch %s", t.ID, wt.Path, t.Branch))
	return nil
}

// FollowUpCommitMessage is the message of the commit a follow-up produced:
// the follow-up's first line as the subject, the message and the agent's
// summary as the body, and the task's trailers.
func FollowUpCommitMessage(t *store.Task, followUp, summary string) string {
	var b strings.Builder
	b.WriteString(subjectLine(followUp, 72, 40) + "\n\n")
	if strings.Contains(followUp, "\n") || len(followUp) > 72 {
		b.WriteString("Follow-up:\n" + followUp + "\n\n")
	}
	b.WriteString("Continues the task: " + subjectLine(t.Prompt, 72, 40) + "\n\n")
	if s := strings.TrimSpace(summary); s != "" {
		b.WriteString("Agent summary:\n" + cutRunes(s, 2000) + "\n\n")
	}
	b.WriteString("Agent-Task: " + t.ID + "\n")
	b.WriteString("Agent-Model: " + t.Model + "\n")
	return b.String()
}

// ContextTokens is the model's per-slot context window.
func (r *Run) ContextTokens() int { return r.ep.ctxTokens }

// Undo reverts the last commit the agent made on the run's branch with a
// new commit (between turns: no sandbox runs then). It returns the
// reverted commit's subject.
func (r *Run) Undo(ctx context.Context) (string, error) {
	o, t := r.o, r.Task
	if len(t.Commits) == 0 {
		return "", errors.New("the agent has made no commit on this branch yet")
	}
	last := t.Commits[len(t.Commits)-1]
	if t.SandboxID != "" {
		return "", errors.New("the task's sandbox is still there; undo runs between turns")
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return "", err
	}
	wt, err := o.taskWorktree(repo, t)
	if err != nil {
		return "", err
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return "", err
	}
	defer unlock()
	subject := last
	if cs, err := repo.Log(ctx, last+"^", last); err == nil && len(cs) == 1 {
		subject = cs[0].Subject
	}
	var id string
	err = o.onWorktree(ctx, wt.Path, func() (err error) {
		id, err = repo.RevertTip(ctx, wt, last, fmt.Sprintf("Revert %q\n\nUndone by the user (agent chat /undo).\n\nAgent-Task: %s\n", subject, t.ID))
		return err
	})
	if err != nil {
		return "", err
	}
	if err := r.update(func(t *store.Task) { t.Commits = append(t.Commits, id) }); err != nil {
		return "", err
	}
	return subject, nil
}

// Settle brings a run that was stopped (Ctrl-C in a chat) to review: what
// the agent wrote until then is committed, so the task can be merged,
// kept or continued. The sandbox must be gone (Execute removes it).
func (r *Run) Settle(ctx context.Context) error {
	t := r.Task
	if t.State != store.Interrupted {
		return nil
	}
	if t.SandboxID != "" {
		return errors.New("the stopped turn's sandbox is still there")
	}
	derr, err := r.commit(context.WithoutCancel(ctx), nil, agent.Result{Text: "(stopped by the user)"})
	if err != nil {
		return err
	}
	if derr != nil {
		return r.diskStop(nil, derr)
	}
	return r.update(func(t *store.Task) { t.State, t.Error = store.Review, "" })
}

// CompactNext makes the next turn start by compacting the conversation
// (chat /compact).
func (r *Run) CompactNext() { r.compactNext = true }
