package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/hostfs"
)

// Spare checkouts (see worktree.MakeSpare): after a task's worktree is
// populated at a commit, a complete checkout of the same commit, already
// owned by the sandbox user, is written in the background under
// <state>/spares; the next task or sub-agent on that commit takes it over
// instead of writing and handing over every file. They live in the state
// directory, are never mounted into a sandbox before a worktree claims
// them, and gc removes them.

// spares tracks the spare checkouts this process is making.
type spares struct {
	mu     sync.Mutex
	making map[string]bool
	wg     sync.WaitGroup
}

func (o *Orchestrator) sparesDir() string { return filepath.Join(o.opts.StateDir, "spares") }

// populateFast gives a new worktree its files (fillWorktree), then what a
// checkout leaves out (populateExtras), and the hand-over to the sandbox
// user. A spare's files are the sandbox user's already, so the hand-over
// walks the tree only when the extras may have written into it.
func (o *Orchestrator) populateFast(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task, u sandbox.UserChoice) error {
	claimed, err := o.fillWorktree(ctx, repo, wt, u)
	if err != nil {
		return err
	}
	ex := o.listExtras(ctx, repo, wt, t)
	extrasWrite := !claimed || o.extrasWrite(ex)
	if err := o.fillExtras(ctx, repo, wt, t, ex); err != nil {
		return err
	}
	if !u.Chown || !extrasWrite {
		return nil
	}
	return sandbox.HandOver(wt.Path, u)
}

// fillWorktree writes the files of a worktree created without them, owned
// by u: from the spare checkout of its commit when there is one, else from
// a spare of another commit of the repository brought to it (a cost that
// follows the difference between the commits), else with a checkout (which
// leaves the files this process's: fromSpare is false and the caller hands
// them over). Either way it then starts refilling the spare for the next
// worktree at that commit.
func (o *Orchestrator) fillWorktree(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, u sandbox.UserChoice) (fromSpare bool, err error) {
	if o.opts.SpareCheckouts > 0 {
		if tip, err := repo.BranchTip(ctx, wt.Branch); err == nil && tip != "" {
			if key, err := repo.SpareKey(ctx, tip, u.UID, u.GID); err == nil {
				defer o.refillSpare(repo, key, tip, u)
				err := repo.ClaimSpare(ctx, wt, filepath.Join(o.sparesDir(), key))
				if errors.Is(err, worktree.ErrNoSpare) {
					err = repo.ClaimOtherSpare(ctx, wt, o.sparesDir(), worktree.SpareFamilyOf(key), spareOwner(u))
				}
				if err == nil && u.Chown {
					// Everything inside came owned by the sandbox user;
					// the directory itself was made by git.
					err = os.Lchown(wt.Path, u.UID, u.GID)
				}
				fromSpare = err == nil
				if err != nil && !errors.Is(err, worktree.ErrNoSpare) {
					slog.Warn("spare checkout not used", "worktree", wt.Path, "err", err)
				}
			}
		}
	}
	if !fromSpare {
		if err := repo.Populate(ctx, wt); err != nil {
			return false, err
		}
	}
	return fromSpare, nil
}

// spareOwner hands a path a spare's update wrote (and the directories
// above it) to the sandbox user, never following a symlink; nil when the
// files stay this process's.
func spareOwner(u sandbox.UserChoice) func(root, rel string) error {
	if !u.Chown {
		return nil
	}
	return func(root, rel string) error { return hostfs.LchownChain(root, rel, u.UID, u.GID) }
}

// prepareSpare makes, in the background, the spare checkout of commit
// (the new tip of a branch tasks start from, after a merge) out of
// another spare of the repository, so that the first task on the new
// commit finds it ready. It never writes a whole checkout: when there is
// no other spare to update, the next task's refill makes one.
func (o *Orchestrator) prepareSpare(repo *worktree.Repo, commit string) {
	if o.opts.SpareCheckouts <= 0 || commit == "" {
		return
	}
	u := sandbox.ChooseUser(os.Geteuid(), os.Getegid(), os.Geteuid(), os.Getegid())
	key, err := repo.SpareKey(context.Background(), commit, u.UID, u.GID)
	if err != nil {
		return
	}
	o.background(key, func() {
		err := repo.RetargetSpare(context.Background(), o.sparesDir(), worktree.SpareFamilyOf(key), commit, spareOwner(u))
		if err != nil && !errors.Is(err, worktree.ErrNoSpare) {
			slog.Warn("preparing a spare checkout", "commit", commit, "err", err)
		}
	})
}

// extrasMayWrite reports whether populateExtras may write into the
// worktree (as this process's user): submodules, Git LFS files or
// approved untracked files. When unsure, yes.
func (o *Orchestrator) extrasMayWrite(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task) bool {
	return o.extrasWrite(o.listExtras(ctx, repo, wt, t))
}

func (o *Orchestrator) extrasWrite(ex extras) bool {
	return len(o.opts.Environment.Include) > 0 || ex.err != nil || len(ex.subs) > 0 || len(ex.lfs) > 0
}

// refillSpare makes the spare checkout key in the background, unless it
// exists or this process is already making it; then it trims the spares
// to the configured number, oldest first.
func (o *Orchestrator) refillSpare(repo *worktree.Repo, key, commit string, u sandbox.UserChoice) {
	dir := filepath.Join(o.sparesDir(), key)
	o.background(key, func() {
		if _, err := os.Lstat(dir); err == nil {
			return
		}
		var chown func(string) error
		if u.Chown {
			chown = func(root string) error { return sandbox.HandOver(root, u) }
		}
		if err := repo.MakeSpare(context.Background(), dir, commit, chown); err != nil {
			slog.Warn("making a spare checkout", "commit", commit, "err", err)
			return
		}
		o.trimSpares(o.opts.SpareCheckouts)
	})
}

// background runs fn, the making of spare key, in the background unless
// this process is making that spare already.
func (o *Orchestrator) background(key string, fn func()) {
	s := &o.spares
	s.mu.Lock()
	if s.making == nil {
		s.making = map[string]bool{}
	}
	if s.making[key] {
		s.mu.Unlock()
		return
	}
	s.making[key] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.making, key)
			s.mu.Unlock()
			s.wg.Done()
		}()
		fn()
	}()
}

// WaitSpares waits until the spare checkouts this process is making are
// done (a command that exits right after a task would otherwise leave a
// half-made one for gc).
func (o *Orchestrator) WaitSpares() { o.spares.wg.Wait() }

// trimSpares removes complete spares beyond keep, oldest first.
func (o *Orchestrator) trimSpares(keep int) {
	ents, err := os.ReadDir(o.sparesDir())
	if err != nil {
		return
	}
	type spare struct {
		path string
		mod  time.Time
	}
	var all []spare
	for _, e := range ents {
		if strings.Contains(e.Name(), ".") {
			continue // being made or being claimed
		}
		if fi, err := e.Info(); err == nil {
			all = append(all, spare{filepath.Join(o.sparesDir(), e.Name()), fi.ModTime()})
		}
	}
	slices.SortFunc(all, func(a, b spare) int { return b.mod.Compare(a.mod) })
	for _, s := range all[min(keep, len(all)):] {
		removeSpare(s.path)
	}
}

// removeSpare takes the spare at path by the same rename a claim uses, so
// that a task claiming it at this moment gets it whole or not at all, and
// then removes it. It reports whether it removed it.
func removeSpare(path string) bool {
	trash := fmt.Sprintf("%s.trash-%d-%d", path, os.Getpid(), time.Now().UnixNano())
	if err := os.Rename(path, trash); err != nil {
		return false // claimed (or removed) by someone else meanwhile
	}
	return hostfs.RemoveTree(trash) == nil
}

// staleSpareAge is how old a half-made or half-claimed spare must be
// before gc takes it for the leftover of a killed process.
const staleSpareAge = 10 * time.Minute

// gcSpares removes the spare checkouts (a cache: any of them can be made
// again) and the leftovers of killed processes; it returns what it removed.
func (o *Orchestrator) gcSpares() []string {
	ents, err := os.ReadDir(o.sparesDir())
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		p := filepath.Join(o.sparesDir(), e.Name())
		if strings.Contains(e.Name(), ".") {
			if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < staleSpareAge {
				continue
			}
		}
		if removeSpare(p) {
			removed = append(removed, p)
		}
	}
	return removed
}
