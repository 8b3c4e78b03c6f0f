package worktree

import (
	"bytes"
	"context"
	"fmt"
	"strings"
)

// SnapshotFiles records the worktree's current files (tracked and
// untracked, not ignored; nested repositories left out) as a commit on top
// of its HEAD, without touching its index, its files or any ref. Sub-agents
// start from such a snapshot of their parent's work.
func (r *Repo) SnapshotFiles(ctx context.Context, w *Worktree, message string) (string, error) {
	ctx = noCancel(ctx)
	changes, err := r.Changes(ctx, w)
	if err != nil {
		return "", err
	}
	head, err := r.g.out(ctx, w.GitDir, "", "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", err
	}
	add := append(r.noFilters(ctx, w.GitDir), "add", "-A", "--", ".")
	for _, n := range append(nestedIn(changes), r.specialFiles(w.Path, changes)...) {
		add = append(add, ":(exclude,literal)"+n)
	}
	c, err := r.snapshot(ctx, w.GitDir, w.Path, head, add, []string{"GIT_LITERAL_PATHSPECS=0"}, message)
	if err != nil {
		return "", fmt.Errorf("snapshot of the task's files: %w", err)
	}
	return c, nil
}

// ApplyDiff applies the changes between two commits to the worktree's
// files (not its index) and returns the paths it changed. It applies all
// or nothing: when a file no longer matches what the change expects (two
// sub-agents edited it), nothing is written and the error says so.
func (r *Repo) ApplyDiff(ctx context.Context, w *Worktree, from, to string) ([]string, error) {
	ctx = noCancel(ctx)
	names, err := r.g.out(ctx, r.CommonDir, "", "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-only", "-z", from, to, "--")
	if err != nil {
		return nil, fmt.Errorf("git diff: %w", err)
	}
	paths := lines(names, 0)
	if len(paths) == 0 {
		return nil, nil
	}
	var patch bytes.Buffer
	if _, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, stdout: &patch,
		args: []string{"diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--binary", "--full-index", "--no-color", from, to, "--"}}); err != nil {
		return nil, fmt.Errorf("git diff: %w", err)
	}
	// git apply refuses paths with .. or through symlinks (no
	// --unsafe-paths), so the patch cannot write outside the worktree.
	args := append(r.noFilters(ctx, w.GitDir), "apply", "--whitespace=nowarn")
	raw := patch.Bytes()
	if _, err := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, args: args, stdin: bytes.NewReader(raw), inWorkTree: true}); err != nil {
		// Applied already (a run killed after applying it is recovered):
		// the reverse patch applies cleanly, so the files hold the change.
		rev := append(r.noFilters(ctx, w.GitDir), "apply", "--whitespace=nowarn", "--check", "--reverse")
		if _, rerr := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, args: rev, stdin: bytes.NewReader(raw), inWorkTree: true}); rerr == nil {
			return paths, nil
		}
		return nil, fmt.Errorf("applying the changes: %w", err)
	}
	return paths, nil
}

// SubBranches lists the branches of a task's sub-agents (named
// BRANCH-sub-ROUND-NAME) with their tips.
func (r *Repo) SubBranches(ctx context.Context, branch string) (map[string]string, error) {
	if err := r.CheckBranchName(ctx, branch); err != nil {
		return nil, err
	}
	out, err := r.g.out(ctx, r.CommonDir, "", "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"+branch+"-sub-*")
	if err != nil {
		return nil, fmt.Errorf("listing sub-agent branches: %w", err)
	}
	m := map[string]string{}
	for _, l := range lines(out, '\n') {
		id, ref, ok := strings.Cut(l, " ")
		if ok {
			m[strings.TrimPrefix(ref, "refs/heads/")] = id
		}
	}
	return m, nil
}
