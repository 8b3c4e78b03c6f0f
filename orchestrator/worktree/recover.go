package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Recovery says what RecoverMerge found and did.
type Recovery int

// Outcomes of RecoverMerge.
const (
	// RecoveredNothing: the merge never touched the checkout or the branch
	// (or the user moved the branch since); it may be run again.
	RecoveredNothing Recovery = iota
	// RecoveredUndone: the checkout was partly updated; those files were
	// put back as they were and the merge may be run again.
	RecoveredUndone
	// RecoveredFinished: the merge is complete (the branch is at plan.To),
	// possibly after this call moved it.
	RecoveredFinished
)

// RecoverMerge brings a merge that was journalled with plan and then
// interrupted (the process was killed) to a consistent end: the user's
// checkout and branch are either both before the merge or both after it.
//
//   - branch at To: the merge finished; nothing to do.
//   - branch at From and the checkout's index at To: the checkout was
//     updated (git writes files before the index); the branch is moved.
//   - branch at From and the index at From: some files may have been
//     written; each file the merge touches that holds exactly the merge's
//     content is put back, and the merge can be run again.
//
// A file the user changed since is never touched; an index that matches
// neither tree is an error that names the checkout.
func (r *Repo) RecoverMerge(ctx context.Context, plan MergePlan) (Recovery, error) {
	ctx = noCancel(ctx)
	tip, err := r.BranchTip(ctx, plan.Into)
	if err != nil {
		return RecoveredNothing, err
	}
	if tip == plan.To {
		return RecoveredFinished, nil
	}
	if tip != plan.From || plan.Checkout == "" {
		return RecoveredNothing, nil
	}
	co := &checkout{path: plan.Checkout, gitDir: plan.CheckoutGitDir}
	if cur, err := r.checkoutOf(ctx, plan.Into); err != nil {
		return RecoveredNothing, err
	} else if cur == nil || filepath.Clean(cur.path) != filepath.Clean(co.path) {
		// The checkout switched branches since: its files are its own now.
		return RecoveredNothing, nil
	}
	// Only the merge's own paths tell how far it got: the user may have
	// staged changes of their own beside it (the merge refuses to start
	// over a change in one of its paths, so those are all elsewhere), and
	// they are theirs to keep.
	if r.indexIs(ctx, co, plan.To, plan.Paths) {
		if _, err := r.g.out(ctx, r.CommonDir, "", "update-ref", "-m", "agent: finish an interrupted merge",
			"refs/heads/"+plan.Into, plan.To, plan.From); err != nil {
			return RecoveredNothing, fmt.Errorf("finishing the interrupted merge into %s: %w", plan.Into, err)
		}
		return RecoveredFinished, nil
	}
	if !r.indexIs(ctx, co, plan.From, plan.Paths) {
		return RecoveredNothing, fmt.Errorf("your checkout %s was being updated by a merge that was interrupted, and its index matches neither the state before nor after it in the files the merge changes (%s); look at `git status` there, then run `agent merge` again", co.path, strings.Join(plan.Paths, ", "))
	}
	undone := false
	var kept []string
	for _, p := range plan.Paths {
		switch r.fileState(ctx, co, plan, p) {
		case fileIsTo:
			if err := r.restoreFile(ctx, co, plan, p); err != nil {
				return RecoveredNothing, err
			}
			undone = true
		case fileChanged:
			kept = append(kept, p)
		}
	}
	if len(kept) > 0 {
		return RecoveredNothing, fmt.Errorf("the interrupted merge into %s left your checkout %s partly updated, and these files changed since, so they were left alone: %s; look at `git status` there", plan.Into, co.path, strings.Join(kept, ", "))
	}
	if undone {
		return RecoveredUndone, nil
	}
	return RecoveredNothing, nil
}

// indexIs reports whether the checkout's index records each of paths as
// tree-ish rev does (present with the same content, or absent in both);
// what it records elsewhere does not matter.
func (r *Repo) indexIs(ctx context.Context, co *checkout, rev string, paths []string) bool {
	out, err := r.g.out(ctx, co.gitDir, co.path, "diff-index", "--cached", "--no-renames", "--name-only", "-z", rev, "--")
	if err != nil {
		return false
	}
	differ := map[string]bool{}
	for _, p := range lines(out, 0) {
		differ[p] = true
	}
	// Both lists name files (a file replaced by a directory shows as
	// both paths), so equality is enough.
	for _, p := range paths {
		if differ[p] {
			return false
		}
	}
	return true
}

type fileState int

const (
	fileIsFrom  fileState = iota // as before the merge (nothing to undo)
	fileIsTo                     // as the merge wrote it
	fileChanged                  // neither: the user's
)

// blobOf returns the blob id of path in rev, "" when rev has no such path.
func (r *Repo) blobOf(ctx context.Context, rev, path string) string {
	out, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "-q", rev+":"+path)
	if err != nil {
		return ""
	}
	return out
}

// diskBlob hashes the checkout's file at path the way git add would; ""
// when there is no regular file there.
func (r *Repo) diskBlob(ctx context.Context, co *checkout, path string) (string, bool) {
	fi, err := os.Lstat(filepath.Join(co.path, filepath.FromSlash(path)))
	if errors.Is(err, os.ErrNotExist) {
		return "", true
	}
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	out, err := r.g.out(ctx, co.gitDir, co.path, "hash-object", "--path="+path, "--", filepath.Join(co.path, filepath.FromSlash(path)))
	if err != nil {
		return "", false
	}
	return out, true
}

func (r *Repo) fileState(ctx context.Context, co *checkout, plan MergePlan, path string) fileState {
	from, to := r.blobOf(ctx, plan.From, path), r.blobOf(ctx, plan.To, path)
	disk, ok := r.diskBlob(ctx, co, path)
	switch {
	case !ok:
		return fileChanged
	case disk == from:
		return fileIsFrom
	case disk == to:
		return fileIsTo
	}
	return fileChanged
}

// restoreFile puts path back as it was in plan.From (which the index
// holds): from the index when it was there, else by removing the file the
// merge added.
func (r *Repo) restoreFile(ctx context.Context, co *checkout, plan MergePlan, path string) error {
	if r.blobOf(ctx, plan.From, path) == "" {
		if err := os.Remove(filepath.Join(co.path, filepath.FromSlash(path))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("undoing the interrupted merge: %w", err)
		}
		return nil
	}
	if _, err := r.g.out(ctx, co.gitDir, co.path, "checkout-index", "-f", "-q", "--", path); err != nil {
		return fmt.Errorf("undoing the interrupted merge in %s: %w", path, err)
	}
	return nil
}

// FindWorktree finds this repository's worktree at path through the admin
// directories' own records (never the worktree's .git file), for a task
// whose `git worktree add` was interrupted before its admin directory was
// recorded. It returns nil when there is none. A `.git` pointer that the
// interrupted add left in path is deleted, as Add would have done.
func (r *Repo) FindWorktree(path, branch string) (*Worktree, error) {
	gd, err := r.adminDirOf(path)
	if err != nil {
		return nil, nil //nolint:nilerr // no admin directory: no worktree
	}
	if _, err := os.Stat(filepath.Join(gd, "HEAD")); err != nil {
		return nil, nil //nolint:nilerr // half-written admin directory
	}
	dotgit := filepath.Join(path, ".git")
	if fi, err := os.Lstat(dotgit); err == nil && fi.Mode().IsRegular() {
		if err := os.Remove(dotgit); err != nil {
			return nil, fmt.Errorf("removing worktree's .git pointer: %w", err)
		}
	}
	return &Worktree{Path: path, GitDir: gd, Branch: branch}, nil
}

// RemoveStale removes what an interrupted Add may have left for path and
// branch: an admin directory that names path, the directory itself when it
// holds nothing but git's pointer file, and the branch when it still points
// at start (so it holds no work; branch "" leaves branches alone).
// Anything else is left and reported.
func (r *Repo) RemoveStale(ctx context.Context, path, branch, start string) error {
	ctx = noCancel(ctx)
	if w, err := r.FindWorktree(path, branch); err != nil {
		return err
	} else if w != nil {
		if err := r.Remove(ctx, w); err != nil {
			return err
		}
	} else if ents, err := os.ReadDir(path); err == nil {
		if len(ents) > 1 || (len(ents) == 1 && ents[0].Name() != ".git") {
			return fmt.Errorf("%s holds files but is no worktree of %s; move it away", path, r.Root)
		}
		if err := os.RemoveAll(path); err != nil {
			return err
		}
	}
	if branch == "" {
		return nil
	}
	tip, err := r.BranchTip(ctx, branch)
	if err != nil || tip == "" {
		return err
	}
	if tip != start {
		return fmt.Errorf("branch %s has commits of its own; it is left alone", branch)
	}
	return r.DeleteBranch(ctx, branch, tip)
}

// HasAdminDir reports whether the repository with common directory
// commonDir has a worktree admin directory for path.
func HasAdminDir(commonDir, path string) bool {
	r := &Repo{CommonDir: commonDir}
	_, err := r.adminDirOf(path)
	return err == nil
}

// PruneLost removes the admin directories of this repository's task
// worktrees that are gone from disk under dir (the state directory was
// deleted) and that known does not claim. git's own prune skips them
// because Add locks every task worktree. Only worktrees locked with a
// reason starting "agent " (Add's) are touched; branches are left alone.
// It returns the worktree paths whose admin directories it removed.
func (r *Repo) PruneLost(dir string, known func(path string) bool) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(r.CommonDir, "worktrees"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var pruned []string
	for _, e := range ents {
		admin := filepath.Join(r.CommonDir, "worktrees", e.Name())
		b, err := os.ReadFile(filepath.Join(admin, "gitdir"))
		if err != nil {
			continue
		}
		path := filepath.Dir(strings.TrimSpace(string(b)))
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			continue
		}
		if reason, err := os.ReadFile(filepath.Join(admin, "locked")); err != nil || !strings.HasPrefix(string(reason), "agent ") {
			continue
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) || known(path) {
			continue
		}
		if err := os.RemoveAll(admin); err != nil {
			return pruned, err
		}
		pruned = append(pruned, path)
	}
	return pruned, nil
}
