package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrCheckedOut: the branch is checked out in another worktree or checkout.
type ErrCheckedOut struct {
	Branch string
	Path   string
}

func (e *ErrCheckedOut) Error() string {
	return fmt.Sprintf("branch %s is checked out in %s", e.Branch, e.Path)
}

// CheckedOutAt returns the checkout (the main one or a linked worktree)
// that has branch checked out, or "" when none has.
func (r *Repo) CheckedOutAt(ctx context.Context, branch string) (string, error) {
	co, err := r.checkoutOf(ctx, branch)
	if err != nil || co == nil {
		return "", err
	}
	return co.path, nil
}

// Reattach creates a worktree for an existing branch at path (a task whose
// worktree was handed back), without its files (Populate writes them), and
// locked and stripped of its .git pointer like one made by Add. It refuses
// when the branch is checked out anywhere: two checkouts of one branch
// would each see the other's commits as changes.
func (r *Repo) Reattach(ctx context.Context, path, branch, reason string) (*Worktree, error) {
	ctx = noCancel(ctx)
	if err := r.CheckBranchName(ctx, branch); err != nil {
		return nil, err
	}
	tip, err := r.BranchTip(ctx, branch)
	if err != nil {
		return nil, err
	}
	if tip == "" {
		return nil, fmt.Errorf("branch %s no longer exists", branch)
	}
	if at, err := r.CheckedOutAt(ctx, branch); err != nil {
		return nil, err
	} else if at != "" {
		return nil, &ErrCheckedOut{Branch: branch, Path: at}
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("worktree directory %s already exists", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating worktree parent: %w", err)
	}
	if reason == "" {
		reason = "agent task"
	}
	// The admin directory of a removed worktree may still be listed:
	// prune only drops entries whose directory is gone.
	_, _ = r.g.out(ctx, r.CommonDir, "", "worktree", "prune")
	if _, err := r.g.out(ctx, r.CommonDir, r.Root, "worktree", "add", "--quiet", "--lock", "--reason", reason,
		"--no-checkout", "--", path, branch); err != nil {
		_ = os.RemoveAll(path)
		return nil, fmt.Errorf("re-creating the task worktree: %w", err)
	}
	w, err := r.adopt(path, branch)
	if err != nil {
		cctx := context.WithoutCancel(ctx)
		_ = os.RemoveAll(path)
		_, _ = r.g.out(cctx, r.CommonDir, "", "worktree", "prune")
		return nil, err
	}
	return w, nil
}

// CheckoutPlan says what switching the user's checkout to a branch would
// do, or why it must not be done.
type CheckoutPlan struct {
	// From is the commit the checkout is at now, To the branch's tip.
	From, To string
	// Branch is the branch the checkout is on now ("" when detached).
	Branch string
}

// PlanSwitch checks that the user's checkout can move to branch without
// overwriting anything: no merge, rebase, cherry-pick or revert in
// progress, and no uncommitted change (tracked or untracked) to a path
// that differs between the two commits.
func (r *Repo) PlanSwitch(ctx context.Context, branch string) (CheckoutPlan, error) {
	var p CheckoutPlan
	if err := r.CheckBranchName(ctx, branch); err != nil {
		return p, err
	}
	tip, err := r.BranchTip(ctx, branch)
	if err != nil {
		return p, err
	}
	if tip == "" {
		return p, fmt.Errorf("branch %s no longer exists", branch)
	}
	head, err := r.g.out(ctx, r.GitDir, "", "rev-parse", "--verify", "HEAD")
	if err != nil {
		return p, fmt.Errorf("reading your checkout's HEAD: %w", err)
	}
	p.From, p.To = head, tip
	if ref, err := r.g.out(ctx, r.GitDir, "", "symbolic-ref", "--quiet", "HEAD"); err == nil {
		p.Branch = trimRefsHeads(ref)
	}
	if err := r.checkSafeMove(ctx, &checkout{path: r.Root, gitDir: r.GitDir}, head, tip); err != nil {
		return p, err
	}
	return p, nil
}

// Switch moves the user's checkout to branch as planned: its index and
// files from plan.From to plan.To (git refuses to overwrite anything, on
// top of the plan's checks), then HEAD to the branch. Hooks never run.
func (r *Repo) Switch(ctx context.Context, branch string, plan CheckoutPlan) error {
	ctx = noCancel(ctx)
	co := &checkout{path: r.Root, gitDir: r.GitDir}
	if err := r.checkSafeMove(ctx, co, plan.From, plan.To); err != nil {
		return err
	}
	if plan.From != plan.To {
		if _, err := r.g.out(ctx, co.gitDir, co.path, "read-tree", "-m", "-u", plan.From, plan.To); err != nil {
			return fmt.Errorf("updating your checkout %s (nothing was changed): %w", co.path, err)
		}
	}
	// The reflog message is git's own for a switch: `git switch -` and
	// @{-1} find the branch (or commit) the checkout was on by it.
	from := plan.Branch
	if from == "" {
		from = plan.From
	}
	msg := "checkout: moving from " + from + " to " + branch
	if _, err := r.g.out(ctx, co.gitDir, "", "symbolic-ref", "-m", msg, "HEAD", "refs/heads/"+branch); err != nil {
		// Put the files back where HEAD still says they are.
		if plan.From != plan.To {
			_, _ = r.g.out(context.WithoutCancel(ctx), co.gitDir, co.path, "read-tree", "-m", "-u", plan.To, plan.From)
		}
		return fmt.Errorf("switching your checkout to %s: %w", branch, err)
	}
	return nil
}

func trimRefsHeads(ref string) string { return strings.TrimPrefix(ref, "refs/heads/") }

// checkSafeMove refuses to move a checkout from one commit to another when
// an operation is in progress there or when an uncommitted change (tracked
// or untracked) touches a path that differs between the two. It is the
// check the merge makes before updating the user's files.
func (r *Repo) checkSafeMove(ctx context.Context, co *checkout, from, to string) error {
	for _, f := range []string{"MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply"} {
		if _, err := os.Lstat(filepath.Join(co.gitDir, f)); err == nil {
			return fmt.Errorf("your checkout %s is in the middle of a %s; finish or abort it first", co.path, inProgress(f))
		}
	}
	dirty, err := status(ctx, r.g, co.gitDir, co.path)
	if err != nil || len(dirty) == 0 || from == to {
		return err
	}
	touched, err := r.g.out(ctx, r.CommonDir, "", "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-only", "-z", from, to, "--")
	if err != nil {
		return fmt.Errorf("listing files that differ: %w", err)
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
		return &SwitchDirtyError{Checkout: co.path, Files: clash}
	}
	return nil
}

// SwitchDirtyError: the checkout has uncommitted changes in files that
// switching would overwrite; nothing was changed.
type SwitchDirtyError struct {
	Checkout string
	Files    []string
}

func (e *SwitchDirtyError) Error() string {
	q := make([]string, len(e.Files))
	for i, f := range e.Files {
		q[i] = strconv.Quote(f)
	}
	return fmt.Sprintf("your checkout %s has uncommitted changes in files that differ on the branch (%s): checking it out would overwrite them; commit or stash them first (nothing was changed)",
		e.Checkout, strings.Join(q, ", "))
}

// RevertTip undoes the last commit of a worktree's branch with a new commit
// on top (so nothing is lost): the tree of the tip's parent, the worktree's
// index and files moved to it (git refuses to overwrite anything). The
// worktree must have no uncommitted change and no process may write it.
func (r *Repo) RevertTip(ctx context.Context, w *Worktree, tip, message string) (string, error) {
	ctx = noCancel(ctx)
	if !r.ownsAdminDir(w.GitDir) {
		return "", fmt.Errorf("worktree admin directory %q is not inside %s", w.GitDir, r.CommonDir)
	}
	cur, err := r.BranchTip(ctx, w.Branch)
	if err != nil {
		return "", err
	}
	if cur != tip {
		return "", fmt.Errorf("the branch %s has moved on since %.10s: only its last commit can be undone", w.Branch, tip)
	}
	if ch, err := r.Changes(ctx, w); err != nil {
		return "", err
	} else if len(ch) > 0 {
		return "", fmt.Errorf("the worktree %s has uncommitted changes", w.Path)
	}
	tree, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", tip+"^^{tree}")
	if err != nil {
		return "", fmt.Errorf("the commit %.10s has no parent to go back to: %w", tip, err)
	}
	commit, err := r.commitTree(ctx, tree, message, tip)
	if err != nil {
		return "", err
	}
	args := append(r.noFilters(ctx, w.GitDir), "read-tree", "-m", "-u", tip, commit)
	if _, err := r.g.out(ctx, w.GitDir, w.Path, args...); err != nil {
		return "", fmt.Errorf("updating the worktree (nothing was changed): %w", err)
	}
	if _, err := r.g.out(ctx, r.CommonDir, "", "update-ref", "-m", "agent: undo", "refs/heads/"+w.Branch, commit, tip); err != nil {
		back := append(r.noFilters(ctx, w.GitDir), "read-tree", "-m", "-u", commit, tip)
		_, _ = r.g.out(context.WithoutCancel(ctx), w.GitDir, w.Path, back...)
		return "", fmt.Errorf("moving the branch %s: %w", w.Branch, err)
	}
	return commit, nil
}
