package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/localagent/agent/orchestrator/failpoint"
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
		out, err := o.merge(ctx, t, d == Squash)
		if err == nil && t.State == store.Merged {
			out.Message = o.settleNotes(t, true, out.Message)
		}
		return out, err
	case Keep:
		if t.State.Final() {
			return Outcome{}, fmt.Errorf("task %s is already %s", t.ID, t.State)
		}
		t.State, t.Decision = store.Kept, string(Keep)
		if err := o.store.Save(t); err != nil {
			return Outcome{}, err
		}
		return Outcome{Decision: Keep, State: string(t.State),
			Message: o.settleNotes(t, true, fmt.Sprintf("kept branch %s (worktree %s); later: `agent merge %s` or `agent discard %s`", t.Branch, t.Worktree, t.ID, t.ID))}, nil
	case Discard:
		out, err := o.discard(ctx, t)
		if err == nil {
			out.Message = o.settleNotes(t, false, out.Message)
		}
		return out, err
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
	// A merge of this task that was interrupted is finished or undone
	// first: the user's checkout and branch are never left between.
	finished, note, err := o.finishPendingMerge(ctx, repo, t)
	if err != nil {
		return Outcome{}, err
	}
	if finished {
		out := Outcome{Decision: Decision(t.Decision), State: string(t.State), Commit: t.MergeCommit, Message: note}
		if n := o.cleanupMerged(context.WithoutCancel(ctx), repo, t, t.MergeCommit, t.Decision == string(Squash)); n != "" {
			out.Message += "; " + n
		}
		return out, nil
	}
	msg := mergeCommitMessage(ctx, t, squash, repo)
	res, err := repo.Merge(ctx, worktree.MergeOptions{Branch: t.Branch, Into: t.BaseBranch, Squash: squash, Message: msg,
		Journal: func(p worktree.MergePlan) error {
			if err := o.journalMerge(t, squash, p); err != nil {
				return err
			}
			failpoint.Hit("merge-before-checkout")
			return nil
		},
		AfterCheckout: func() { failpoint.Hit("merge-checkout-updated") },
	})
	if err != nil {
		if t.Pending != nil {
			// Settle whatever the failed merge left (normally nothing).
			if _, _, rerr := o.finishPendingMerge(context.WithoutCancel(ctx), repo, t); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		// Nothing changed: the branch and worktree stay for review.
		o.keepUnmerged(t)
		var ce *worktree.ConflictError
		if errors.As(err, &ce) {
			return Outcome{}, fmt.Errorf("%w; task %s is kept", err, t.ID)
		}
		return Outcome{}, fmt.Errorf("merging task %s: %w (the branch %s is kept)", t.ID, err, t.Branch)
	}
	failpoint.Hit("merge-ref-updated")
	t.State, t.Decision, t.MergeCommit, t.MergedTip, t.Pending = store.Merged, string(d), res.Commit, res.BranchTip, nil
	t.Finished = time.Now().UTC()
	if err := o.store.Save(t); err != nil {
		return Outcome{}, err
	}
	if note != "" {
		note += "; "
	}
	out := Outcome{Decision: d, State: string(t.State), Commit: res.Commit, Checkout: res.Checkout}
	verb := "merged"
	if squash {
		verb = "squash-merged"
	}
	out.Message = note + fmt.Sprintf("%s %s into %s (%s)", verb, t.Branch, t.BaseBranch, short(res.Commit))
	if res.UpToDate {
		out.Message = fmt.Sprintf("%s was already part of %s", t.Branch, t.BaseBranch)
	}
	if res.Checkout != "" {
		out.Message += "; your checkout " + res.Checkout + " was updated"
	}
	// The branch is merged: its worktree and branch can go, unless the
	// worktree holds uncommitted work. A Ctrl-C now must not leave them
	// half-removed with a false note.
	failpoint.Hit("merge-before-cleanup")
	if note := o.cleanupMerged(context.WithoutCancel(ctx), repo, t, res.Commit, squash); note != "" {
		out.Message += "; " + note
	}
	// The next task on the branch starts from the merge: its checkout is
	// made ready now, from a spare of an earlier commit.
	if !res.UpToDate {
		o.prepareSpare(repo, res.Commit)
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

// removeWorktreeHook, when set (by tests), runs after a worktree's removal
// is journalled and before it starts; an error stops the removal there, as
// a kill would.
var removeWorktreeHook func(path string) error

// removeWorktree removes the worktree of a finished task that was found
// without uncommitted changes (the caller checked, with nothing able to
// write it). The removal is journalled first (RemovingWorktree): files
// half deleted by a kill are then a removal for gc to finish, not changes
// to keep.
func (o *Orchestrator) removeWorktree(ctx context.Context, repo *worktree.Repo, t *store.Task, wt *worktree.Worktree) error {
	if !t.RemovingWorktree {
		t.RemovingWorktree = true
		if err := o.store.Save(t); err != nil {
			return err
		}
	}
	if removeWorktreeHook != nil {
		if err := removeWorktreeHook(wt.Path); err != nil {
			return err
		}
	}
	if err := repo.Remove(ctx, wt); err != nil {
		return err
	}
	t.RemovingWorktree = false
	return o.store.Save(t)
}

// cleanupMerged removes a merged task's worktree and branch, keeping both
// when the worktree has uncommitted changes.
func (o *Orchestrator) cleanupMerged(ctx context.Context, repo *worktree.Repo, t *store.Task, merged string, squash bool) string {
	wt, err := o.taskWorktree(repo, t)
	if err == nil && wt.Exists() {
		if o.store.InUse(t.ID) {
			return fmt.Sprintf("the worktree %s and the branch are kept while an `agent shell %s` is open on it; `agent gc` removes them afterwards", t.Worktree, t.ID)
		}
		// Checked and removed with any sandbox over it (an `agent shell`
		// opened since) frozen: nothing can change the files between the
		// check and the removal, nor race host git.
		var ch []string
		var rerr error
		err := o.onWorktree(ctx, wt.Path, func() (err error) {
			if !t.RemovingWorktree {
				if ch, err = repo.Changes(ctx, wt); err != nil || len(ch) > 0 {
					return err
				}
			}
			rerr = o.removeWorktree(ctx, repo, t, wt)
			return nil
		})
		if err != nil {
			return fmt.Sprintf("the worktree %s and the branch are kept: checking it for uncommitted changes failed (%v); `agent gc` finishes the cleanup", t.Worktree, err)
		}
		if len(ch) > 0 {
			return fmt.Sprintf("the worktree %s has uncommitted changes, so it and the branch are kept", t.Worktree)
		}
		if rerr != nil {
			return "could not remove the worktree: " + rerr.Error() + "; `agent gc` finishes the removal"
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

// discard removes a task's sandbox, worktree and branch.
func (o *Orchestrator) discard(ctx context.Context, t *store.Task) (Outcome, error) {
	if t.State == store.Discarded {
		return Outcome{}, fmt.Errorf("task %s is already discarded", t.ID)
	}
	if t.State == store.Merged {
		return Outcome{}, fmt.Errorf("task %s is merged; nothing to discard", t.ID)
	}
	if o.store.InUse(t.ID) {
		return Outcome{}, fmt.Errorf("an `agent shell %s` is open on the task's worktree; exit it, then discard again", t.ID)
	}
	if t.SandboxID != "" {
		if e, err := o.engine(ctx); err == nil {
			_ = e.Remove(ctx, t.SandboxID)
		}
		t.SandboxID = ""
	}
	// Sub-agents' sandboxes of a killed run (not in the record) go too:
	// their processes could otherwise go on in worktrees being removed.
	if _, err := o.engine(ctx); err == nil {
		_ = o.removeStaleSandboxes(ctx, t)
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		if _, serr := os.Stat(t.RepoGitDir); errors.Is(serr, fs.ErrNotExist) {
			return o.discardOrphan(t)
		}
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
	// Journal first: a kill halfway leaves a task still marked to be
	// discarded, which `agent discard` finishes. From here on the steps
	// are short and run to the end: a Ctrl-C must not leave the worktree
	// gone and the branch still there.
	ctx = context.WithoutCancel(ctx)
	t.Decision = string(Discard)
	if err := o.store.Save(t); err != nil {
		return Outcome{}, err
	}
	var wt *worktree.Worktree
	if t.WorktreeGit == "" {
		// Its creation was interrupted before the admin directory was
		// recorded.
		if wt, err = repo.FindWorktree(t.Worktree, t.Branch); err != nil {
			return Outcome{}, err
		}
	} else if wt, err = o.taskWorktree(repo, t); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			// Only a worktree whose admin directory is already gone may be
			// skipped; one that is not this repository's must stop the discard.
			return Outcome{}, err
		}
		wt = nil
	}
	if wt != nil {
		if err := repo.Remove(ctx, wt); err != nil {
			return Outcome{}, err
		}
	} else if o.insideStateDir(t.Worktree) {
		if err := repo.RemoveStale(ctx, t.Worktree, "", ""); err != nil {
			return Outcome{}, err
		}
	}
	failpoint.Hit("discard-worktree-removed")
	tip, err := repo.BranchTip(ctx, t.Branch)
	if err != nil {
		return Outcome{}, err
	}
	if tip != "" {
		if err := repo.DeleteBranch(ctx, t.Branch, tip); err != nil {
			return Outcome{}, err
		}
	}
	// Sub-agents' branches (work kept because it could not be applied,
	// or of a run that was killed) go with the task; their worktrees too.
	var subsGone []string
	for _, sa := range t.SubAgents {
		if o.insideStateDir(sa.Worktree) {
			if w, _ := repo.FindWorktree(sa.Worktree, sa.Branch); w != nil {
				_ = repo.Remove(ctx, w)
			}
			_ = repo.RemoveStale(ctx, sa.Worktree, "", "")
		}
	}
	subs, err := repo.SubBranches(ctx, t.Branch)
	if err != nil {
		return Outcome{}, err
	}
	for b, stip := range subs {
		if err := repo.DeleteBranch(ctx, b, stip); err != nil {
			return Outcome{}, err
		}
		subsGone = append(subsGone, b+" (last commit "+short(stip)+")")
	}
	slices.Sort(subsGone)
	t.State, t.Decision = store.Discarded, string(Discard)
	t.Finished = time.Now().UTC()
	if err := o.store.Save(t); err != nil {
		return Outcome{}, err
	}
	msg := fmt.Sprintf("discarded task %s: worktree and branch %s removed", t.ID, t.Branch)
	if tip != "" {
		msg += " (its last commit was " + short(tip) + ")"
	}
	if len(subsGone) > 0 {
		msg += "; sub-agent branches deleted: " + strings.Join(subsGone, ", ")
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
		_ = o.onWorktree(ctx, wt.Path, func() (err error) {
			uncommitted, err = repo.Changes(ctx, wt)
			return err
		})
	}
	return commits, uncommitted, nil
}

// discardOrphan discards a task whose repository is gone (deleted or
// moved): its branch went with it, so only the worktree files under the
// state directory are left to remove. Without this, such a task could
// never leave the task list.
func (o *Orchestrator) discardOrphan(t *store.Task) (Outcome, error) {
	t.Decision = string(Discard)
	if err := o.store.Save(t); err != nil {
		return Outcome{}, err
	}
	if o.insideStateDir(t.Worktree) {
		if err := worktree.RemoveFiles(t.Worktree); err != nil {
			return Outcome{}, err
		}
	}
	for _, sa := range t.SubAgents {
		if o.insideStateDir(sa.Worktree) {
			_ = worktree.RemoveFiles(sa.Worktree)
		}
	}
	t.State = store.Discarded
	t.Finished = time.Now().UTC()
	if err := o.store.Save(t); err != nil {
		return Outcome{}, err
	}
	return Outcome{Decision: Discard, State: string(t.State),
		Message: fmt.Sprintf("discarded task %s: its repository %s is gone (with its branch); removed its worktree %s", t.ID, t.Repo, t.Worktree)}, nil
}

// settleNotes keeps (adopt) or drops the notes task t proposed to its
// repository's memory, saying so in msg.
func (o *Orchestrator) settleNotes(t *store.Task, adopt bool, msg string) string {
	n := len(o.ProposedNotes(t))
	if n == 0 {
		return msg
	}
	if adopt {
		if err := o.adoptNotes(t); err != nil {
			return msg + fmt.Sprintf("; its %d proposed memory note(s) could not be kept: %v", n, err)
		}
		return msg + fmt.Sprintf("; its %d proposed memory note(s) are kept (`agent memory`)", n)
	}
	if err := o.dropNotes(t); err != nil {
		return msg + fmt.Sprintf("; its %d proposed memory note(s) could not be dropped: %v", n, err)
	}
	return msg + fmt.Sprintf("; its %d proposed memory note(s) were dropped", n)
}
