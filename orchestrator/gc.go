package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// Reconcile marks tasks whose process died as interrupted (a record says
// running or created, but no live process holds its claim). It returns the
// ids it marked. It needs no Docker engine.
func (o *Orchestrator) Reconcile() ([]string, error) {
	ts, err := o.store.List()
	if err != nil {
		return nil, err
	}
	var marked []string
	for _, t := range ts {
		if t.State != store.Running && t.State != store.Created {
			continue
		}
		release, err := o.store.Claim(t.ID)
		if err != nil {
			continue // alive
		}
		// Re-read under the claim: the record may have moved on.
		cur, lerr := o.store.Load(t.ID)
		if lerr == nil && (cur.State == store.Running || cur.State == store.Created) {
			cur.State = store.Interrupted
			cur.Error = fmt.Sprintf("the agent process (pid %d) died while the task was %s", cur.PID, t.State)
			if err := o.store.Save(cur); err == nil {
				marked = append(marked, cur.ID)
			}
		}
		release()
	}
	return marked, nil
}

// GCReport says what gc did and what it left alone.
type GCReport struct {
	// Interrupted are tasks marked interrupted (their process died).
	Interrupted []string `json:"interrupted"`
	// RemovedContainers are sandboxes of this state directory that no live
	// task uses.
	RemovedContainers []string `json:"removed_containers"`
	// RemovedWorktrees are worktrees of merged or discarded tasks whose
	// removal had not finished (they held no uncommitted work).
	RemovedWorktrees []string `json:"removed_worktrees"`
	// Kept lists what gc deliberately left alone, with why.
	Kept []string `json:"kept"`
}

// GC reconciles containers and worktrees with the task records: it marks
// dead tasks interrupted, removes sandboxes of this state directory that no
// running task uses, and finishes the cleanup of merged or discarded tasks.
// It never deletes a branch, never removes a worktree with uncommitted
// changes or unmerged commits, and never touches containers of another
// state directory.
func (o *Orchestrator) GC(ctx context.Context) (GCReport, error) {
	var rep GCReport
	marked, err := o.Reconcile()
	if err != nil {
		return rep, err
	}
	rep.Interrupted = marked
	ts, err := o.store.List()
	if err != nil {
		return rep, err
	}
	byID := map[string]*store.Task{}
	for _, t := range ts {
		byID[t.ID] = t
	}

	e, err := o.engine(ctx)
	if err != nil {
		return rep, err
	}
	sbs, err := e.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelState + "=" + o.stateID}})
	if err != nil {
		return rep, err
	}
	for _, sb := range sbs {
		// Belt and braces: the filter already asked for our label.
		if sb.Labels[sandbox.LabelState] != o.stateID {
			continue
		}
		id := sb.Labels[sandbox.LabelTask]
		if t, ok := byID[id]; ok && o.store.Alive(t.ID) {
			rep.Kept = append(rep.Kept, fmt.Sprintf("container %s: task %s is running", short(sb.ID), id))
			continue
		}
		if err := e.Remove(ctx, sb.ID); err != nil {
			return rep, err
		}
		rep.RemovedContainers = append(rep.RemovedContainers, short(sb.ID))
		if t, ok := byID[id]; ok && t.SandboxID == sb.ID {
			t.SandboxID = ""
			_ = o.store.Save(t)
		}
	}

	known := map[string]bool{}
	for _, t := range ts {
		known[filepath.Clean(t.Worktree)] = true
		if !t.State.Final() || o.store.Alive(t.ID) {
			continue
		}
		if _, err := os.Lstat(t.Worktree); err != nil {
			continue
		}
		repo, err := o.openRepo(ctx, t)
		if err != nil {
			rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s (task %s, %s): %v", t.Worktree, t.ID, t.State, err))
			continue
		}
		wt, err := o.taskWorktree(repo, t)
		if err != nil {
			rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s (task %s): %v", t.Worktree, t.ID, err))
			continue
		}
		if ch, err := repo.Changes(ctx, wt); err != nil || len(ch) > 0 {
			rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s (task %s, %s): it has uncommitted changes", t.Worktree, t.ID, t.State))
			continue
		}
		if err := repo.Remove(ctx, wt); err != nil {
			return rep, err
		}
		rep.RemovedWorktrees = append(rep.RemovedWorktrees, t.Worktree)
	}

	ents, _ := os.ReadDir(filepath.Join(o.opts.StateDir, "worktrees"))
	for _, e := range ents {
		p := filepath.Join(o.opts.StateDir, "worktrees", e.Name())
		if !known[p] {
			rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s has no task record; left alone (remove it with git worktree remove if it is not needed)", p))
		}
	}
	return rep, nil
}
