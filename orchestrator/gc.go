package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
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
	// RemovedPool are idle warm pool members that had to go (the pool is
	// off, their image or toolbox changed, they stopped, or their state
	// directory is gone).
	RemovedPool []string `json:"removed_pool,omitempty"`
	// RemovedSpares are spare checkouts (a cache of checked-out commits)
	// and leftovers of spare checkouts a killed process was making.
	RemovedSpares []string `json:"removed_spares,omitempty"`
	// RemovedRecords are empty id reservations of processes that died
	// before they wrote the task's record (nothing else of it existed).
	RemovedRecords []string `json:"removed_records,omitempty"`
	// Recovered are interrupted merges that gc finished or undid.
	Recovered []string `json:"recovered,omitempty"`
	// RemovedBranches are branches of merged tasks whose cleanup had not
	// finished (they point where the merge took them from).
	RemovedBranches []string `json:"removed_branches,omitempty"`
	// Kept lists what gc deliberately left alone, with why and the command
	// that removes it.
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
	// Ids reserved by a process that died before writing the record.
	if ids, err := o.store.PruneReservations(time.Minute); err == nil {
		rep.RemovedRecords = ids
	}
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
		if sb.Pool == sandbox.PoolIdle {
			continue // the pool's own (gcPool below)
		}
		id := sb.Labels[sandbox.LabelTask]
		if t, ok := byID[id]; ok && o.store.Alive(t.ID) {
			rep.Kept = append(rep.Kept, fmt.Sprintf("container %s: task %s is running in process %d (stop it there with Ctrl-C, or `kill %d`)", short(sb.ID), id, t.PID, t.PID))
			continue
		}
		if o.store.InUse(id) {
			rep.Kept = append(rep.Kept, fmt.Sprintf("container %s: an `agent shell %s` is open on it (it goes when the shell exits)", short(sb.ID), id))
			continue
		}
		if err := e.Remove(ctx, sb.ID); err != nil {
			return rep, err
		}
		rep.RemovedContainers = append(rep.RemovedContainers, short(sb.ID))
		if t, ok := byID[id]; ok && t.SandboxID == sb.ID {
			o.clearSandboxID(t.ID, sb.ID)
		}
	}

	// Interrupted merges are finished or undone; merged tasks whose
	// branch removal was cut short lose the branch.
	for _, t := range ts {
		if o.store.Alive(t.ID) {
			continue
		}
		if note, err := o.settle(ctx, t); err != nil {
			rep.Kept = append(rep.Kept, fmt.Sprintf("task %s: %v", t.ID, err))
		} else if note != "" {
			rep.Recovered = append(rep.Recovered, "task "+t.ID+": "+note)
		}
		if b := o.dropMergedBranch(ctx, t); b != "" {
			rep.RemovedBranches = append(rep.RemovedBranches, b)
		}
	}

	known := map[string]bool{}
	for _, t := range ts {
		known[filepath.Clean(t.Worktree)] = true
		for _, sa := range t.SubAgents {
			known[filepath.Clean(sa.Worktree)] = true
			if sa.State == store.SubRunning {
				if _, err := os.Lstat(sa.Worktree); err == nil {
					rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s: sub-agent %s of task %s was interrupted; `agent resume %s` commits its work, `agent discard %s` deletes it", sa.Worktree, sa.Name, t.ID, t.ID, t.ID))
				}
			}
		}
		if !t.State.Final() || o.store.Alive(t.ID) {
			continue
		}
		if o.store.InUse(t.ID) {
			rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s (task %s, %s): an `agent shell %s` is open on it (gc removes it after the shell exits)", t.Worktree, t.ID, t.State, t.ID))
			continue
		}
		if _, err := os.Lstat(t.Worktree); err != nil {
			// The files are gone (removed by hand, as gc advises for a
			// worktree it keeps); git's record of the worktree goes too.
			if t.WorktreeGit != "" {
				if _, err := os.Stat(t.WorktreeGit); err == nil {
					if repo, err := o.openRepo(ctx, t); err == nil {
						if wt, err := o.taskWorktree(repo, t); err == nil && repo.Remove(ctx, wt) == nil {
							rep.RemovedWorktrees = append(rep.RemovedWorktrees, t.Worktree)
						}
						if b := o.dropMergedBranch(ctx, t); b != "" {
							rep.RemovedBranches = append(rep.RemovedBranches, b)
						}
					}
				}
			}
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
		// Checked and removed with any sandbox over it (an `agent shell`
		// opened since the check above) frozen.
		var ch []string
		var rerr error
		// A removal journalled and cut short (RemovingWorktree) is
		// finished: its missing files are not changes.
		if err := o.onWorktree(ctx, wt.Path, func() (err error) {
			if !t.RemovingWorktree {
				if ch, err = repo.Changes(ctx, wt); err != nil || len(ch) > 0 {
					return err
				}
			}
			rerr = o.removeWorktree(ctx, repo, t, wt)
			return nil
		}); err != nil || len(ch) > 0 {
			rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s (task %s, %s): it has uncommitted changes (copy what you need out of it, then remove it: rm -rf %s)", t.Worktree, t.ID, t.State, shellQuote(t.Worktree)))
			continue
		}
		if rerr != nil {
			return rep, rerr
		}
		rep.RemovedWorktrees = append(rep.RemovedWorktrees, t.Worktree)
		// A merged task's branch waited for its worktree (see
		// dropMergedBranch): it goes in the same run.
		if b := o.dropMergedBranch(ctx, t); b != "" {
			rep.RemovedBranches = append(rep.RemovedBranches, b)
		}
	}

	ents, _ := os.ReadDir(filepath.Join(o.opts.StateDir, "worktrees"))
	for _, e := range ents {
		p := filepath.Join(o.opts.StateDir, "worktrees", e.Name())
		if !known[p] {
			rep.Kept = append(rep.Kept, fmt.Sprintf("worktree %s has no task record; left alone (look at it, then remove it: %s)", p, o.orphanRemoval(ts, p)))
		}
	}
	rep.RemovedSpares = o.gcSpares()
	rep.RemovedPool = o.gcPool(ctx)
	return rep, nil
}

// settle finishes a merge of t that was interrupted (see
// finishPendingMerge), under the task's claim and the repository lock.
func (o *Orchestrator) settle(ctx context.Context, t *store.Task) (string, error) {
	if t.Pending == nil || t.Pending.Op != store.PendingMerge {
		return "", nil
	}
	release, err := o.store.Claim(t.ID)
	if err != nil {
		return "", nil //nolint:nilerr // alive again: its own process settles it
	}
	defer release()
	cur, err := o.store.Load(t.ID)
	if err != nil || cur.Pending == nil {
		return "", err
	}
	repo, err := o.openRepo(ctx, cur)
	if err != nil {
		return "", err
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return "", err
	}
	defer unlock()
	finished, note, err := o.finishPendingMerge(ctx, repo, cur)
	if err != nil {
		return "", err
	}
	if finished {
		if n := o.cleanupMerged(context.WithoutCancel(ctx), repo, cur, cur.MergeCommit, cur.Decision == string(Squash)); n != "" {
			note += "; " + n
		}
	} else if note == "" {
		note = "an interrupted merge had changed nothing; `agent merge " + cur.ID + "` merges it"
	}
	*t = *cur
	return note, nil
}

// dropMergedBranch deletes the branch of a merged task when it still
// points where the merge took it from and its worktree is gone (a merge
// stopped during its cleanup). It returns the branch deleted, or "".
func (o *Orchestrator) dropMergedBranch(ctx context.Context, t *store.Task) string {
	if t.State != store.Merged || t.MergedTip == "" {
		return ""
	}
	if _, err := os.Lstat(t.Worktree); err == nil {
		return ""
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return ""
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return ""
	}
	defer unlock()
	if tip, err := repo.BranchTip(ctx, t.Branch); err != nil || tip != t.MergedTip {
		return ""
	}
	if err := repo.DeleteBranch(ctx, t.Branch, t.MergedTip); err != nil {
		return ""
	}
	return t.Branch
}

// orphanRemoval is a command that removes a task worktree without a
// record: git refuses `git worktree remove` on it (it is locked and has no
// .git pointer), so the admin directory is unlocked and pruned after the
// files go.
func (o *Orchestrator) orphanRemoval(ts []*store.Task, path string) string {
	seen := map[string]bool{}
	for _, t := range ts {
		if seen[t.RepoGitDir] {
			continue
		}
		seen[t.RepoGitDir] = true
		if worktree.HasAdminDir(t.RepoGitDir, path) {
			return fmt.Sprintf("git -C %s worktree unlock %s && rm -rf %s && git -C %s worktree prune", shellQuote(t.Repo), shellQuote(path), shellQuote(path), shellQuote(t.Repo))
		}
	}
	return "rm -rf " + shellQuote(path) + ", then `git worktree prune` after `git worktree unlock " + shellQuote(path) + "` in its repository"
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// clearSandboxID forgets a removed sandbox in task id's record, under the
// task's claim and on a fresh read, so that a run that started meanwhile
// (and owns the record) is never overwritten by gc's stale copy.
func (o *Orchestrator) clearSandboxID(id, sandboxID string) {
	release, err := o.store.Claim(id)
	if err != nil {
		return // a live run owns the record
	}
	defer release()
	if cur, err := o.store.Load(id); err == nil && cur.SandboxID == sandboxID {
		cur.SandboxID = ""
		_ = o.store.Save(cur)
	}
}
