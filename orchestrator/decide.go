package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
)

// Decision is what the user chose for a reviewed task.
type Decision string

// Decisions.
const (
	Merge   Decision = "merge"
	Squash  Decision = "squash"
	Keep    Decision = "keep"
	Discard Decision = "discard"
)

// ParseDecision checks a decision name.
func ParseDecision(s string) (Decision, error) {
	switch d := Decision(strings.ToLower(strings.TrimSpace(s))); d {
	case Merge, Squash, Keep, Discard:
		return d, nil
	}
	return "", fmt.Errorf("unknown decision %q: want merge, squash, keep or discard", s)
}

// Outcome says what a decision did.
type Outcome struct {
	Decision Decision `json:"decision"`
	State    string   `json:"state"`
	// Commit is the merge or squash commit.
	Commit string `json:"commit,omitempty"`
	// Checkout is the user's checkout that was updated by a merge.
	Checkout string `json:"checkout,omitempty"`
	// Message says in a sentence what happened.
	Message string `json:"message"`
}

// ErrBusy: the task is being run by another process.
var ErrBusy = errors.New("the task is running")

// claimForDecision makes sure no process is running the task while it is
// merged or discarded. When the caller already runs the task it passes
// held=true.
func (o *Orchestrator) claimForDecision(t *store.Task, held bool) (func(), error) {
	if held {
		return func() {}, nil
	}
	release, err := o.store.Claim(t.ID)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w in another agent process (pid %d); wait for it or stop it first", t.ID, ErrBusy, t.PID)
	}
	return release, nil
}

// Decide applies d to task t. held says the calling process already holds
// the task's claim (it just ran it).
func (o *Orchestrator) Decide(ctx context.Context, t *store.Task, d Decision, held bool) (Outcome, error) {
	release, err := o.claimForDecision(t, held)
	if err != nil {
		return Outcome{}, err
	}
	defer release()
	switch d {
	case Merge, Squash:
		return o.merge(ctx, t, d == Squash)
	case Keep:
		if t.State.Final() {
			return Outcome{}, fmt.Errorf("task %s is already %s", t.ID, t.State)
		}
		t.State, t.Decision = store.Kept, string(Keep)
		if err := o.store.Save(t); err != nil {
			return Outcome{}, err
		}
		return Outcome{Decision: Keep, State: string(t.State),
			Message: fmt.Sprintf("kept branch %s (worktree %s); later: `agent merge %s` or `agent discard %s`", t.Branch, t.Worktree, t.ID, t.ID)}, nil
	case Discard:
		return o.discard(ctx, t)
	}
	return Outcome{}, fmt.Errorf("unknown decision %q", d)
}

func (o *Orchestrator) merge(ctx context.Context, t *store.Task, squash bool) (Outcome, error) {
	d := Merge
	if squash {
		d = Squash
	}
	switch t.State {
	case store.Review, store.Kept:
	case store.Merged:
		return Outcome{}, fmt.Errorf("task %s is already merged (%s)", t.ID, short(t.MergeCommit))
	case store.Discarded:
		return Outcome{}, fmt.Errorf("task %s was discarded", t.ID)
	default:
		return Outcome{}, fmt.Errorf("task %s is %s: only a finished task can be merged (resume it with `agent resume %s`, or look at it with `agent diff %s`)", t.ID, t.State, t.ID, t.ID)
	}
	if t.BaseBranch == "" {
		o.keepUnmerged(t)
		return Outcome{}, fmt.Errorf("task %s started from %s, which is not a branch: there is nothing to merge into; merge its branch yourself: git merge %s", t.ID, t.BaseRef, t.Branch)
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return Outcome{}, err
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return Outcome{}, err
	}
	defer unlock()
	msg := mergeMessage(ctx, t, squash, repo)
	res, err := repo.Merge(ctx, worktree.MergeOptions{Branch: t.Branch, Into: t.BaseBranch, Squash: squash, Message: msg})
	if err != nil {
		// Nothing changed: the branch and worktree stay for review.
		o.keepUnmerged(t)
		var ce *worktree.ConflictError
		if errors.As(err, &ce) {
			return Outcome{}, fmt.Errorf("%w; task %s is kept", err, t.ID)
		}
		return Outcome{}, fmt.Errorf("merging task %s: %w (the branch %s is kept)", t.ID, err, t.Branch)
	}
	t.State, t.Decision, t.MergeCommit = store.Merged, string(d), res.Commit
	t.Finished = time.Now().UTC()
	if err := o.store.Save(t); err != nil {
		return Outcome{}, err
	}
	out := Outcome{Decision: d, State: string(t.State), Commit: res.Commit, Checkout: res.Checkout}
	verb := "merged"
	if squash {
		verb = "squash-merged"
	}
	out.Message = fmt.Sprintf("%s %s into %s (%s)", verb, t.Branch, t.BaseBranch, short(res.Commit))
	if res.UpToDate {
		out.Message = fmt.Sprintf("%s was already part of %s", t.Branch, t.BaseBranch)
	}
	if res.Checkout != "" {
		out.Message += "; your checkout " + res.Checkout + " was updated"
	}
	// The branch is merged: its worktree and branch can go, unless the
	// worktree holds uncommitted work.
	if note := o.cleanupMerged(ctx, repo, t, res.Commit, squash); note != "" {
		out.Message += "; " + note
	}
	return out, nil
}

// keepUnmerged records a task under review that could not be merged as
// kept: its branch and worktree stay for a later merge or discard.
func (o *Orchestrator) keepUnmerged(t *store.Task) {
	if t.State == store.Review {
		t.State, t.Decision = store.Kept, string(Keep)
		_ = o.store.Save(t)
	}
}

// cleanupMerged removes a merged task's worktree and branch, keeping both
// when the worktree has uncommitted changes.
func (o *Orchestrator) cleanupMerged(ctx context.Context, repo *worktree.Repo, t *store.Task, merged string, squash bool) string {
	wt, err := o.taskWorktree(repo, t)
	if err == nil && wt.Exists() {
		ch, err := repo.Changes(ctx, wt)
		if err != nil || len(ch) > 0 {
			return fmt.Sprintf("the worktree %s has uncommitted changes, so it and the branch are kept", t.Worktree)
		}
		if err := repo.Remove(ctx, wt); err != nil {
			return "could not remove the worktree: " + err.Error()
		}
	}
	tip, err := repo.BranchTip(ctx, t.Branch)
	if err != nil || tip == "" {
		return ""
	}
	if at := o.branchInUse(ctx, repo, t); at != "" {
		return "the branch " + t.Branch + " is kept: it is checked out in " + at
	}
	if !squash {
		if ok, _ := repo.IsAncestor(ctx, tip, merged); !ok {
			return "the branch " + t.Branch + " is kept: it has commits that were not merged"
		}
	}
	if err := repo.DeleteBranch(ctx, t.Branch, tip); err != nil {
		return "could not delete the branch: " + err.Error()
	}
	return "branch " + t.Branch + " deleted"
}

func mergeMessage(ctx context.Context, t *store.Task, squash bool, repo *worktree.Repo) string {
	return mergeCommitMessage(ctx, t, squash, repo)
}

// discard removes a task's sandbox, worktree and branch.
func (o *Orchestrator) discard(ctx context.Context, t *store.Task) (Outcome, error) {
	if t.State == store.Discarded {
		return Outcome{}, fmt.Errorf("task %s is already discarded", t.ID)
	}
	if t.State == store.Merged {
		return Outcome{}, fmt.Errorf("task %s is merged; nothing to discard", t.ID)
	}
	if t.SandboxID != "" {
		if e, err := o.engine(ctx); err == nil {
			_ = e.Remove(ctx, t.SandboxID)
		}
		t.SandboxID = ""
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return Outcome{}, err
	}
	if at := o.branchInUse(ctx, repo, t); at != "" {
		return Outcome{}, fmt.Errorf("task %s: its branch %s is checked out in %s; switch that checkout to another branch first", t.ID, t.Branch, at)
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return Outcome{}, err
	}
	defer unlock()
	if wt, err := o.taskWorktree(repo, t); err == nil {
		if err := repo.Remove(ctx, wt); err != nil {
			return Outcome{}, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		// Only a worktree whose admin directory is already gone may be
		// skipped; one that is not this repository's must stop the discard.
		return Outcome{}, err
	}
	tip, err := repo.BranchTip(ctx, t.Branch)
	if err != nil {
		return Outcome{}, err
	}
	if tip != "" {
		if err := repo.DeleteBranch(ctx, t.Branch, tip); err != nil {
			return Outcome{}, err
		}
	}
	t.State, t.Decision = store.Discarded, string(Discard)
	t.Finished = time.Now().UTC()
	if err := o.store.Save(t); err != nil {
		return Outcome{}, err
	}
	msg := fmt.Sprintf("discarded task %s: worktree and branch %s removed", t.ID, t.Branch)
	if tip != "" {
		msg += " (its last commit was " + short(tip) + ")"
	}
	return Outcome{Decision: Discard, State: string(t.State), Message: msg}, nil
}

// UnmergedWork says what discarding a task would lose: commits not in its
// base branch and uncommitted files in its worktree.
func (o *Orchestrator) UnmergedWork(ctx context.Context, t *store.Task) (commits int, uncommitted []string, err error) {
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return 0, nil, err
	}
	tip, err := repo.BranchTip(ctx, t.Branch)
	if err != nil {
		return 0, nil, err
	}
	if tip != "" {
		into := t.BaseCommit
		if t.BaseBranch != "" {
			if bt, _ := repo.BranchTip(ctx, t.BaseBranch); bt != "" {
				into = bt
			}
		}
		if commits, err = repo.CountCommits(ctx, into, tip); err != nil {
			return 0, nil, err
		}
	}
	if wt := o.checkedOutWorktree(repo, t); wt != nil {
		uncommitted, _ = repo.Changes(ctx, wt)
	}
	return commits, uncommitted, nil
}
