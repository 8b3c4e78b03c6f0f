package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
)

// historyDir is where the history of one sandbox (a task's or a
// sub-agent's, by id) is exported for the git tools.
func (o *Orchestrator) historyDir(id string) string {
	return filepath.Join(o.opts.StateDir, "history", id)
}

// historyPacks is the repository's store of immutable history packs,
// exported once and hard-linked into each sandbox's history (beside the
// histories, on the same file system). It is derived data: a damaged or
// missing store is rebuilt by the next export.
func (o *Orchestrator) historyPacks(repo *worktree.Repo) string {
	sum := sha256.Sum256([]byte(repo.CommonDir))
	return filepath.Join(o.opts.StateDir, "history-packs", hex.EncodeToString(sum[:8]))
}

// exportHistory writes the read-only history the sandbox's git tools read
// (base = where the task started, head = the tip its sandbox starts from)
// and returns its directory, to mount, and a function that removes it once
// the sandbox is gone. It runs before the sandbox exists and reads only the
// user's object store, never a worktree. The directory is derived data,
// rebuilt for every sandbox, so it needs no journal entry: a leftover one is
// replaced by the next export or removed with the state directory. A failed
// export is a notice, not a failure: the task runs without the git tools'
// history (they say so).
func (o *Orchestrator) exportHistory(ctx context.Context, repo *worktree.Repo, t *store.Task, id, base, head string, sink event.Sink) (string, func()) {
	dir, err := filepath.Abs(o.historyDir(id))
	if err != nil {
		return "", func() {}
	}
	notice := func(msg string) {
		sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Task: t.ID, Text: msg})
	}
	if repo == nil {
		r, err := o.openRepo(ctx, t)
		if err != nil {
			notice("the git tools have no history: " + err.Error())
			return "", func() {}
		}
		repo = r
	}
	if head == "" {
		tip, err := repo.BranchTip(ctx, t.Branch)
		if err != nil {
			notice("the git tools have no history: " + err.Error())
			return "", func() {}
		}
		head = tip
	}
	if err := repo.ExportHistoryShared(ctx, o.historyPacks(repo), dir, base, head); err != nil {
		_ = os.RemoveAll(dir)
		notice("the git tools have no history: " + err.Error())
		return "", func() {}
	}
	return dir, func() { o.dropHistory(id) }
}

// dropHistory removes an exported history once its sandbox is gone.
func (o *Orchestrator) dropHistory(id string) { _ = os.RemoveAll(o.historyDir(id)) }
