package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
)

// CheckoutResult says what `agent checkout` did.
type CheckoutResult struct {
	Task     string `json:"task"`
	Branch   string `json:"branch"`
	Checkout string `json:"checkout"`
	// Previous is the branch (or commit, when detached) the checkout was on.
	Previous string `json:"previous"`
	// Committed is the commit made of work left uncommitted in the task's
	// worktree before it was released ("" when there was none).
	Committed string `json:"committed,omitempty"`
	Message   string `json:"message"`
}

// Checkout hands a task's branch to the user: work left in its worktree
// is committed on the branch, the worktree is released, and the user's
// checkout (the one the task was started from) is switched to the branch.
// It refuses, changing nothing, when the switch would overwrite anything
// in that checkout. `agent continue` re-creates the worktree later (once
// the checkout is on another branch again).
func (o *Orchestrator) Checkout(ctx context.Context, ref string) (CheckoutResult, error) {
	var res CheckoutResult
	t, err := o.store.Resolve(ref)
	if err != nil {
		return res, err
	}
	release, err := o.claimForDecision(t, false)
	if err != nil {
		return res, err
	}
	defer release()
	if t, err = o.store.Load(t.ID); err != nil {
		return res, err
	}
	if !continuable(t.State) {
		return res, fmt.Errorf("task %s is %s: its branch is gone, there is nothing to check out", t.ID, t.State)
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return res, err
	}
	res = CheckoutResult{Task: t.ID, Branch: t.Branch, Checkout: repo.Root}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return res, err
	}
	defer unlock()

	// An open shell could write the worktree after the commit below and
	// lose that work with the released worktree.
	if o.store.InUse(t.ID) {
		return res, fmt.Errorf("an `agent shell %s` is open on the task's worktree; exit it, then check out again", t.ID)
	}
	// A sandbox left by a killed run could still write the worktree: it
	// goes before any host step reads it.
	if t.SandboxID != "" {
		e, err := o.engine(ctx)
		if err != nil {
			return res, fmt.Errorf("task %s still has a sandbox (%s) that must be removed first: %w", t.ID, short(t.SandboxID), err)
		}
		if err := e.Remove(ctx, t.SandboxID); err != nil {
			return res, fmt.Errorf("removing the task's old sandbox: %w", err)
		}
		t.SandboxID = ""
		if err := o.store.Save(t); err != nil {
			return res, err
		}
	}

	wt, werr := o.taskWorktree(repo, t)
	if werr != nil {
		if !errors.Is(werr, fs.ErrNotExist) {
			return res, werr
		}
		wt = nil
	}
	// Check the user's side before touching anything.
	if at, err := repo.CheckedOutAt(ctx, t.Branch); err != nil {
		return res, err
	} else if at != "" && (wt == nil || at != wt.Path) {
		if at == repo.Root {
			res.Message = fmt.Sprintf("branch %s is already checked out in %s", t.Branch, at)
			return res, nil
		}
		return res, fmt.Errorf("branch %s is checked out in %s: git checks a branch out in one place only", t.Branch, at)
	}
	plan, err := repo.PlanSwitch(ctx, t.Branch)
	if err != nil {
		return res, err
	}
	res.Previous = plan.Branch
	if res.Previous == "" {
		res.Previous = short(plan.From)
	}

	if wt != nil && !t.Released && wt.Exists() && t.Populated {
		var ch, nested []string
		var id string
		// Read and commit with any sandbox over the worktree (an `agent
		// shell`) frozen, and never more than the disk bound.
		err := o.onWorktree(ctx, wt.Path, func() (err error) {
			if ch, err = repo.Changes(ctx, wt); err != nil || len(ch) == 0 {
				return err
			}
			if _, _, derr := o.boundedExclusions(wt.Path); derr != nil {
				return fmt.Errorf("%w: remove what it does not need with `agent shell %s`, or discard it", derr, t.ID)
			}
			if id, err = repo.CommitAll(ctx, wt, fmt.Sprintf("Work left uncommitted by task %s\n\nCommitted by `agent checkout` before handing the branch over.\n\nAgent-Task: %s\nAgent-Model: %s\n", t.ID, t.ID, t.Model)); err != nil {
				return err
			}
			nested, _ = repo.NestedRepos(ctx, wt)
			return nil
		})
		if err != nil {
			return res, err
		}
		if len(ch) > 0 {
			if id != "" {
				t.Commits = append(t.Commits, id)
				res.Committed = id
			}
			// The branch moved: plan again from its new tip.
			if plan, err = repo.PlanSwitch(ctx, t.Branch); err != nil {
				return res, err
			}
		}
		if len(nested) > 0 {
			return res, fmt.Errorf("the worktree %s holds git repositories of its own that are in no commit (%v); copy what you need out of them, then `agent discard` or continue the task", wt.Path, nested)
		}
	}
	// Journal, then release the worktree.
	t.Released, t.Populated = true, false
	if err := o.store.Save(t); err != nil {
		return res, err
	}
	if wt != nil {
		if err := repo.Remove(ctx, wt); err != nil {
			return res, err
		}
	}
	if err := repo.Switch(ctx, t.Branch, plan); err != nil {
		return res, fmt.Errorf("%w; the task's worktree was released, `agent continue %s` re-creates it", err, t.ID)
	}
	if t.State == store.Review {
		t.State, t.Decision = store.Kept, string(Keep)
	}
	t.Finished = time.Now().UTC()
	if err := o.store.Save(t); err != nil {
		return res, err
	}
	res.Message = fmt.Sprintf("your checkout %s is on branch %s now (it was on %s); the task's worktree is released. `git switch %s` goes back; after that `agent continue %s \"...\"` goes on with the task, `agent merge %s` merges it",
		repo.Root, t.Branch, res.Previous, res.Previous, t.ID, t.ID)
	return res, nil
}

// branchInUse names the checkout other than the task's own worktree that
// has the task's branch checked out (after `agent checkout`), or "".
// Deleting a branch checked out there would leave that checkout's HEAD
// pointing at nothing.
func (o *Orchestrator) branchInUse(ctx context.Context, repo *worktree.Repo, t *store.Task) string {
	at, err := repo.CheckedOutAt(ctx, t.Branch)
	if err != nil || at == "" || filepath.Clean(at) == filepath.Clean(t.Worktree) {
		return ""
	}
	return at
}
