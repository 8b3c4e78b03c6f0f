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

// UntrackedError says that the merge would write over files of the user's
// checkout that git does not track (untracked or ignored, such as a .env
// that a task un-ignored and created); nothing was changed.
type UntrackedError struct {
	Checkout string
	Files    []string
}

func (e *UntrackedError) Error() string {
	return fmt.Sprintf("the merge would overwrite files in your checkout %s that git does not track (untracked or ignored): %s; nothing was changed: move them away (or delete them) and merge again with `agent merge`",
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
	// Journal, when set, is called with the plan after every check passed
	// and before anything changes (the user's files, then the branch). An
	// error stops the merge with nothing changed. After a kill, the
	// journalled plan is what RecoverMerge finishes or undoes.
	Journal func(MergePlan) error
	// AfterCheckout, when set, runs between the checkout update and the
	// branch update (fault-injection tests stop the process there).
	AfterCheckout func()
}

// MergePlan is a merge about to change the user's checkout and branch.
type MergePlan struct {
	// Into is the branch that moves from From to To.
	Into string `json:"into"`
	From string `json:"from"`
	To   string `json:"to"`
	// BranchTip is the task branch's tip that was merged.
	BranchTip string `json:"branch_tip"`
	// Checkout and CheckoutGitDir are the checkout whose files move with
	// the branch ("" when Into is checked out nowhere).
	Checkout       string `json:"checkout,omitempty"`
	CheckoutGitDir string `json:"checkout_git_dir,omitempty"`
	// Paths are the files the merge changes in that checkout.
	Paths []string `json:"paths,omitempty"`
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
	// BranchTip is the task branch's tip that was merged.
	BranchTip string `json:"branch_tip,omitempty"`
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
		return MergeResult{Commit: intoTip, UpToDate: true, BranchTip: taskTip}, nil
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
	res.Commit, res.BranchTip = commit, taskTip

	co, err := r.checkoutOf(ctx, opts.Into)
	if err != nil {
		return res, err
	}
	plan := MergePlan{Into: opts.Into, From: intoTip, To: commit, BranchTip: taskTip}
	if co != nil {
		paths, err := r.checkCheckout(ctx, co, intoTip, commit)
		if err != nil {
			return MergeResult{}, err
		}
		plan.Checkout, plan.CheckoutGitDir, plan.Paths = co.path, co.gitDir, paths
	}
	if opts.Journal != nil {
		if err := opts.Journal(plan); err != nil {
			return MergeResult{}, fmt.Errorf("recording the merge before it starts (nothing was changed): %w", err)
		}
	}
	if co != nil {
		if _, err := r.g.out(ctx, co.gitDir, co.path, "read-tree", "-m", "-u", intoTip, commit); err != nil {
			return MergeResult{}, fmt.Errorf("updating your checkout %s (nothing was changed): %w", co.path, err)
		}
		res.Checkout = co.path
	}
	if opts.AfterCheckout != nil {
		opts.AfterCheckout()
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

// checkCheckout checks that a checkout's index and files can move from
// tree from to tree to without touching anything of the user's: no
// operation in progress, no uncommitted change in a file the merge changes,
// and no untracked or ignored file where the merge writes one (git's
// read-tree would silently replace an ignored file). It returns the paths
// the merge changes.
func (r *Repo) checkCheckout(ctx context.Context, co *checkout, from, to string) ([]string, error) {
	// Moving the branch under a merge, rebase, cherry-pick or revert in
	// progress would corrupt it.
	for _, f := range []string{"MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply"} {
		if _, err := os.Lstat(filepath.Join(co.gitDir, f)); err == nil {
			return nil, fmt.Errorf("your checkout %s is in the middle of a %s; finish or abort it, then merge again with `agent merge`", co.path, inProgress(f))
		}
	}
	out, err := r.g.out(ctx, r.CommonDir, "", "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-status", "-z", from, to, "--")
	if err != nil {
		return nil, fmt.Errorf("listing files the merge changes: %w", err)
	}
	var tset, added []string
	f := lines(out, 0)
	for i := 0; i+1 < len(f); i += 2 {
		tset = append(tset, f[i+1])
		if strings.HasPrefix(f[i], "A") {
			added = append(added, f[i+1])
		}
	}
	dirty, err := status(ctx, r.g, co.gitDir, co.path)
	if err != nil {
		return nil, err
	}
	var clash []string
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
		return nil, &DirtyError{Checkout: co.path, Files: clash}
	}
	// A file the merge adds must find its place empty; git status does not
	// list ignored files, so look on disk (never following a symlink).
	for _, a := range added {
		if p := r.occupied(co.path, a, tset); p != "" && !slices.Contains(clash, p) {
			clash = append(clash, p)
		}
	}
	if len(clash) > 0 {
		return nil, &UntrackedError{Checkout: co.path, Files: clash}
	}
	return tset, nil
}

// occupied returns what stands where the merge would create path in the
// checkout root: the path itself, or a leading component that is not a
// directory (unless the merge itself removes it); "" when the place is
// free.
func (r *Repo) occupied(root, path string, touched []string) string {
	parts := strings.Split(path, "/")
	for i := 1; i <= len(parts); i++ {
		rel := strings.Join(parts[:i], "/")
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return ""
		}
		if i == len(parts) || !fi.IsDir() {
			if i < len(parts) && slices.Contains(touched, rel) {
				return ""
			}
			return rel
		}
	}
	return ""
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
