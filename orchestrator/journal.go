package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// The task record is the journal of a task: every step that changes state
// on disk is recorded in it before the step starts (a merge's plan in
// Task.Pending, a sub-agent in Task.SubAgents, the branch and worktree
// paths before they are created), and each step is idempotent or can be
// undone, so that after a kill `agent resume`, `agent merge` or `agent gc`
// bring the task to a consistent state.

// journalMerge records a merge plan before the merge changes anything.
func (o *Orchestrator) journalMerge(t *store.Task, squash bool, p worktree.MergePlan) error {
	t.Pending = &store.Pending{Op: store.PendingMerge, Started: time.Now().UTC(),
		Into: p.Into, From: p.From, To: p.To, BranchTip: p.BranchTip, Squash: squash,
		Checkout: p.Checkout, CheckoutGitDir: p.CheckoutGitDir, Paths: p.Paths}
	return o.store.Save(t)
}

// finishPendingMerge brings a journalled merge that was interrupted to a
// consistent end (see worktree.RecoverMerge): finished, the task is
// recorded as merged; otherwise the user's checkout is as before it and
// the journal entry is dropped. The caller holds the task's claim and the
// repository lock.
func (o *Orchestrator) finishPendingMerge(ctx context.Context, repo *worktree.Repo, t *store.Task) (finished bool, note string, err error) {
	p := t.Pending
	if p == nil || p.Op != store.PendingMerge {
		return false, "", nil
	}
	rec, err := repo.RecoverMerge(ctx, worktree.MergePlan{Into: p.Into, From: p.From, To: p.To, BranchTip: p.BranchTip,
		Checkout: p.Checkout, CheckoutGitDir: p.CheckoutGitDir, Paths: p.Paths})
	if err != nil {
		return false, "", err
	}
	t.Pending = nil
	switch rec {
	case worktree.RecoveredFinished:
		d := Merge
		if p.Squash {
			d = Squash
		}
		t.State, t.Decision, t.MergeCommit, t.MergedTip = store.Merged, string(d), p.To, p.BranchTip
		t.Finished = time.Now().UTC()
		note = "finished the merge into " + p.Into + " that was interrupted (" + short(p.To) + ")"
		finished = true
	case worktree.RecoveredUndone:
		note = "put back the files of your checkout that an interrupted merge had changed"
	}
	if err := o.store.Save(t); err != nil {
		return false, "", err
	}
	return finished, note, nil
}

// recoverWorktree makes sure a task being resumed has its worktree: one
// whose creation was interrupted is adopted when git finished it, else
// what was left is removed and the worktree created again. It also clears
// git's stale index lock of the worktree (left by a kill during a commit)
// when no process holds it.
func (o *Orchestrator) recoverWorktree(ctx context.Context, repo *worktree.Repo, t *store.Task) error {
	if t.Released {
		// Handed back with `agent checkout`: re-created from the branch,
		// as `agent continue` does.
		return o.ensureWorktree(ctx, repo, t)
	}
	if t.WorktreeGit != "" {
		wt, err := o.taskWorktree(repo, t)
		if err != nil {
			return err
		}
		return worktree.ClearStaleLock(wt.GitDir)
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return err
	}
	defer unlock()
	wt, err := repo.FindWorktree(t.Worktree, t.Branch)
	if err != nil {
		return err
	}
	if wt == nil {
		if err := repo.RemoveStale(ctx, t.Worktree, t.Branch, t.StartCommit); err != nil {
			return err
		}
		if wt, err = repo.Add(ctx, worktree.AddOptions{Path: t.Worktree, Branch: t.Branch, Start: t.StartCommit, Reason: "agent task " + t.ID, NoCheckout: true}); err != nil {
			return err
		}
	}
	t.Worktree, t.WorktreeGit, t.Populated, t.Pending = wt.Path, wt.GitDir, false, nil
	return o.store.Save(t)
}

// change is the one way the record of a running task changes: f runs
// under the run's lock, and the record is saved (still under it) when f
// returns true. The run's own steps, the event recorder (fed by the agent
// loop, sub-agents and the egress proxy), sub-agents and the disk guard run
// in goroutines of their own; each read-modify-write of the record, and
// each save (which reads all of it), goes through here, so none is lost
// and a save never writes a record halfway through a change.
func (r *Run) change(f func(t *store.Task) (save bool)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !f(r.Task) {
		return nil
	}
	if err := r.o.store.Save(r.Task); err != nil {
		r.o.emit(r.Task, event.Error, "saving the task record: "+err.Error())
		return err
	}
	return nil
}

// update changes the record (see change) and saves it.
func (r *Run) update(f func(t *store.Task)) error {
	return r.change(func(t *store.Task) bool { f(t); return true })
}

// tally changes the record (see change) without saving it: counters the
// next save writes.
func (r *Run) tally(f func(t *store.Task)) {
	_ = r.change(func(t *store.Task) bool { f(t); return false })
}

// save writes the run's task record.
func (r *Run) save() { _ = r.update(func(*store.Task) {}) }

// journalSub records a sub-agent before its branch and worktree exist.
func (r *Run) journalSub(sa store.SubAgent) {
	_ = r.update(func(t *store.Task) { t.SubAgents = append(t.SubAgents, sa) })
}

// updateSub changes the record of sub-agent id and saves it.
func (r *Run) updateSub(id string, f func(*store.SubAgent)) {
	_ = r.update(func(t *store.Task) {
		for i := range t.SubAgents {
			if t.SubAgents[i].ID == id {
				f(&t.SubAgents[i])
			}
		}
	})
}

// dropUnfilled removes a sub-agent's worktree (nil: none) whose files
// were never all written, and its branch while it has no commit of its
// own, and records the sub-agent as having done nothing: no sandbox ever
// ran over it.
func (r *Run) dropUnfilled(ctx context.Context, repo *worktree.Repo, cwt *worktree.Worktree, id, branch, start string) {
	cctx := context.WithoutCancel(ctx)
	if cwt != nil {
		_ = repo.Remove(cctx, cwt)
	}
	if tip, _ := repo.BranchTip(cctx, branch); tip != "" && tip == start {
		_ = repo.DeleteBranch(cctx, branch, tip)
	}
	r.finishSub(id, store.SubEmpty, "")
}

// finishSub records how a sub-agent ended.
func (r *Run) finishSub(id, state, note string) {
	r.updateSub(id, func(sa *store.SubAgent) { sa.State, sa.Note = state, note })
}

// removeStaleSandboxes removes every container of the task in this state
// directory that a killed run left (one created just before the kill is
// not in the record), except the sandbox of an open `agent shell`. The
// caller holds the task's claim, so no run of it is live.
func (o *Orchestrator) removeStaleSandboxes(ctx context.Context, t *store.Task) error {
	e, err := o.engine(ctx)
	if err != nil {
		return err
	}
	sbs, err := e.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelState + "=" + o.stateID, sandbox.LabelTask + "=" + t.ID}})
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		if sb.Labels[sandbox.LabelState] != o.stateID || sb.Labels[sandbox.LabelTask] != t.ID {
			continue
		}
		if sb.Labels[sandbox.LabelUse] == useShell && o.store.InUse(t.ID) {
			continue
		}
		if err := e.Remove(ctx, sb.ID); err != nil {
			return fmt.Errorf("removing the sandbox %s a killed run left: %w", short(sb.ID), err)
		}
	}
	return nil
}

// recoverSubAgents brings back the work of sub-agents that a killed run
// left running: each one's files are committed on its branch (its sandbox
// is gone: removeStaleSandboxes ran first), applied to the task's worktree
// when they apply cleanly, and its worktree removed; a branch whose work
// could not be applied is kept and listed in the review. The task's own
// sandbox must not be running.
func (r *Run) recoverSubAgents(ctx context.Context, sink event.Sink) error {
	o, t := r.o, r.Task
	var open []store.SubAgent
	for _, sa := range t.SubAgents {
		if sa.State == store.SubRunning {
			open = append(open, sa)
		}
	}
	if len(open) == 0 {
		return nil
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return err
	}
	pwt, err := o.taskWorktree(repo, t)
	if err != nil {
		return err
	}
	s := &spawner{r: r, sink: sink}
	for _, sa := range open {
		cwt, err := repo.FindWorktree(sa.Worktree, sa.Branch)
		if err != nil {
			return err
		}
		if sa.Unfilled {
			r.dropUnfilled(ctx, repo, cwt, sa.ID, sa.Branch, sa.Start)
			continue
		}
		if cwt == nil {
			// Never created, or removed after its work was committed:
			// bring that work in (again: applying is idempotent).
			tip, _ := repo.BranchTip(ctx, sa.Branch)
			switch {
			case tip == "" || tip == sa.Start:
				if tip != "" {
					_ = repo.DeleteBranch(ctx, sa.Branch, tip)
				}
				r.finishSub(sa.ID, store.SubEmpty, "")
			default:
				// Written and handed over with any sandbox over the task's
				// worktree (an open `agent shell`) frozen, as bring does.
				err := o.whileFrozen(ctx, pwt.Path, nil, func() error {
					paths, err := repo.ApplyDiff(ctx, pwt, sa.Start, tip)
					if err != nil {
						return err
					}
					return s.giveToParent(pwt.Path, paths)
				})
				if err != nil {
					r.finishSub(sa.ID, store.SubKept, fmt.Sprintf("its work is committed on branch %s; it could not be applied to the task's worktree: %v", sa.Branch, err))
				} else {
					_ = repo.DeleteBranch(ctx, sa.Branch, tip)
					r.finishSub(sa.ID, store.SubDone, "")
				}
			}
			continue
		}
		paths, note, err := s.bring(ctx, repo, pwt, cwt, sa.ID, sa.Branch, sa.Start,
			CommitMessage(&store.Task{ID: t.ID, Prompt: sa.Prompt, Model: t.Model}, "Work of a sub-agent whose run was interrupted."))
		msg := fmt.Sprintf("sub-agent %s was interrupted: ", sa.Name)
		switch {
		case err != nil:
			msg += note
		case len(paths) > 0:
			msg += fmt.Sprintf("its work (%d file(s)) was committed and applied to the task's worktree", len(paths))
		default:
			msg += note
		}
		sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Task: t.ID, Agent: sa.Name, Text: msg})
	}
	return nil
}

// markCutShort marks the commands still recorded as running as cut short:
// the run that started them ended (or was killed) before they finished.
func (r *Run) markCutShort() {
	r.tally(func(t *store.Task) {
		for i := range t.Commands {
			if c := &t.Commands[i]; c.Running {
				c.Running, c.CutShort = false, true
			}
		}
	})
}

// pruneLost removes the repository's admin directories of task worktrees
// that vanished from this state directory with no record left (the state
// directory was deleted): git's prune skips them because they are locked.
// The caller holds the repository lock.
func (o *Orchestrator) pruneLost(repo *worktree.Repo, notice func(string)) {
	ts, err := o.store.List()
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, t := range ts {
		known[filepath.Clean(t.Worktree)] = true
		for _, sa := range t.SubAgents {
			known[filepath.Clean(sa.Worktree)] = true
		}
	}
	pruned, _ := repo.PruneLost(filepath.Join(o.opts.StateDir, "worktrees"), func(p string) bool { return known[filepath.Clean(p)] })
	for _, p := range pruned {
		notice("removed the git records of worktree " + p + ", which was deleted with no task left (its branch is kept)")
	}
}
