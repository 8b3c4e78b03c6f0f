package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ConflictError says that merging would conflict; nothing was changed.
type ConflictError struct {
	Branch, Into string
	Files        []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("merging %s into %s conflicts in %s; both branches are left as they were (merge by hand: git merge %s)",
		e.Branch, e.Into, strings.Join(e.Files, ", "), e.Branch)
}

// DirtyError says that the user's checkout has uncommitted changes in files
// the merge would change; nothing was changed.
type DirtyError struct {
	Checkout string
	Files    []string
}

func (e *DirtyError) Error() string {
	return fmt.Sprintf("your checkout %s has uncommitted changes in files the merge would change (%s); commit or stash them and merge again with `agent merge`",
		e.Checkout, strings.Join(e.Files, ", "))
}

// ErrNotBranch: the base of the task is not a branch, so there is nothing
// to merge into.
var ErrNotBranch = errors.New("the task's base is not a branch")

// MergeOptions say what to merge where.
type MergeOptions struct {
	// Branch is the task branch.
	Branch string
	// Into is the branch to merge into (without refs/heads/).
	Into string
	// Squash makes one commit on Into with the task's changes instead of a
	// merge commit (--no-ff otherwise: a task always shows as a merge).
	Squash bool
	// Message of the merge or squash commit.
	Message string
}

// MergeResult says what a merge did.
type MergeResult struct {
	// Commit is the new tip of Into, or its old tip when there was nothing
	// to merge.
	Commit string `json:"commit"`
	// Checkout is the checkout whose files were updated ("" when Into is
	// checked out nowhere and only the branch moved).
	Checkout string `json:"checkout,omitempty"`
	// UpToDate is set when Into already contained the task branch.
	UpToDate bool `json:"up_to_date,omitempty"`
}

// Merge merges a task branch into another branch without ever leaving a
// half-done merge behind: the merge is computed in the object database
// (git merge-tree --write-tree), so a conflict changes nothing; when Into is
// checked out, the user's files are updated with a two-tree read-tree, which
// refuses to overwrite local changes, after an explicit check that names the
// files; the branch then moves with a compare-and-swap update-ref.
func (r *Repo) Merge(ctx context.Context, opts MergeOptions) (MergeResult, error) {
	ctx = noCancel(ctx)
	var res MergeResult
	if opts.Into == "" {
		return res, ErrNotBranch
	}
	if err := r.CheckBranchName(ctx, opts.Into); err != nil {
		return res, err
	}
	intoTip, err := r.BranchTip(ctx, opts.Into)
	if err != nil {
		return res, err
	}
	if intoTip == "" {
		return res, fmt.Errorf("branch %s no longer exists; the task branch %s is kept", opts.Into, opts.Branch)
	}
	taskTip, err := r.BranchTip(ctx, opts.Branch)
	if err != nil {
		return res, err
	}
	if taskTip == "" {
		return res, fmt.Errorf("task branch %s does not exist", opts.Branch)
	}
	if done, err := r.IsAncestor(ctx, taskTip, intoTip); err != nil {
		return res, err
	} else if done {
		return MergeResult{Commit: intoTip, UpToDate: true}, nil
	}

	out, err := r.g.out(ctx, r.CommonDir, "", "merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", intoTip, taskTip)
	fields := strings.Split(out, "\x00")
	if err != nil {
		if exitCode(err) == 1 && len(fields) > 1 {
			var files []string
			for _, f := range fields[1:] {
				if f != "" && !slices.Contains(files, f) {
					files = append(files, f)
				}
			}
			return res, &ConflictError{Branch: opts.Branch, Into: opts.Into, Files: files}
		}
		return res, fmt.Errorf("computing the merge (needs git >= 2.38): %w", err)
	}
	tree := fields[0]
	parents := []string{intoTip, taskTip}
	if opts.Squash {
		parents = parents[:1]
	}
	commit, err := r.commitTree(ctx, tree, opts.Message, parents...)
	if err != nil {
		return res, err
	}
	res.Commit = commit

	co, err := r.checkoutOf(ctx, opts.Into)
	if err != nil {
		return res, err
	}
	if co != nil {
		if err := r.updateCheckout(ctx, co, intoTip, commit); err != nil {
			return MergeResult{}, err
		}
		res.Checkout = co.path
	}
	if _, err := r.g.out(ctx, r.CommonDir, "", "update-ref", "-m", "agent: "+firstLine(opts.Message),
		"refs/heads/"+opts.Into, commit, intoTip); err != nil {
		if co != nil {
			// Put the user's files back as they were before the branch
			// moved under us.
			_, _ = r.g.out(context.WithoutCancel(ctx), co.gitDir, co.path, "read-tree", "-m", "-u", commit, intoTip)
		}
		return MergeResult{}, fmt.Errorf("branch %s moved during the merge; nothing was changed, try again: %w", opts.Into, err)
	}
	return res, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

type checkout struct{ path, gitDir string }

// checkoutOf finds the checkout (main or linked worktree) that has branch
// checked out, or nil.
func (r *Repo) checkoutOf(ctx context.Context, branch string) (*checkout, error) {
	out, err := r.g.out(ctx, r.CommonDir, "", "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return nil, fmt.Errorf("listing worktrees: %w", err)
	}
	var path string
	first := true
	for _, l := range strings.Split(out, "\x00") {
		switch {
		case strings.HasPrefix(l, "worktree "):
			path = strings.TrimPrefix(l, "worktree ")
		case l == "branch refs/heads/"+branch:
			if first {
				return &checkout{path: path, gitDir: r.CommonDir}, nil
			}
			gd, err := r.adminDirOf(path)
			if err != nil {
				return nil, err
			}
			return &checkout{path: path, gitDir: gd}, nil
		case l == "":
			if path != "" {
				first = false
			}
		}
	}
	return nil, nil
}

// adminDirOf maps a linked worktree's path to its admin directory by
// reading the admin directories' own `gitdir` records (never the
// worktree's .git file).
func (r *Repo) adminDirOf(path string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(r.CommonDir, "worktrees"))
	if err != nil {
		return "", fmt.Errorf("reading worktree admin directories: %w", err)
	}
	for _, e := range ents {
		dir := filepath.Join(r.CommonDir, "worktrees", e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "gitdir"))
		if err != nil {
			continue
		}
		if filepath.Dir(strings.TrimSpace(string(b))) == filepath.Clean(path) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no admin directory for worktree %s", path)
}

// updateCheckout moves a checkout's index and files from tree from to tree
// to, refusing when that would touch a file with uncommitted changes.
func (r *Repo) updateCheckout(ctx context.Context, co *checkout, from, to string) error {
	// Moving the branch under a merge, rebase, cherry-pick or revert in
	// progress would corrupt it.
	for _, f := range []string{"MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply"} {
		if _, err := os.Lstat(filepath.Join(co.gitDir, f)); err == nil {
			return fmt.Errorf("your checkout %s is in the middle of a %s; finish or abort it, then merge again with `agent merge`", co.path, inProgress(f))
		}
	}
	dirty, err := status(ctx, r.g, co.gitDir, co.path)
	if err != nil {
		return err
	}
	if len(dirty) > 0 {
		touched, err := r.g.out(ctx, r.CommonDir, "", "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-only", "-z", from, to, "--")
		if err != nil {
			return fmt.Errorf("listing files the merge changes: %w", err)
		}
		var clash []string
		tset := lines(touched, 0)
		for _, d := range dirty {
			d = strings.TrimSuffix(d, "/")
			for _, t := range tset {
				if t == d || strings.HasPrefix(t, d+"/") || strings.HasPrefix(d, t+"/") {
					clash = append(clash, d)
					break
				}
			}
		}
		if len(clash) > 0 {
			return &DirtyError{Checkout: co.path, Files: clash}
		}
	}
	if _, err := r.g.out(ctx, co.gitDir, co.path, "read-tree", "-m", "-u", from, to); err != nil {
		return fmt.Errorf("updating your checkout %s (nothing was changed): %w", co.path, err)
	}
	return nil
}

func inProgress(marker string) string {
	switch marker {
	case "MERGE_HEAD":
		return "merge"
	case "CHERRY_PICK_HEAD":
		return "cherry-pick"
	case "REVERT_HEAD":
		return "revert"
	}
	return "rebase"
}
