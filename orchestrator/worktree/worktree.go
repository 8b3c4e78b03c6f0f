package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/localagent/agent/sandbox/hostfs"
)

// Worktree is one task's checkout: its files live at Path (bind-mounted
// into the sandbox), its git admin directory at GitDir inside the user's
// repository, out of the sandbox's reach.
type Worktree struct {
	Path   string `json:"path"`
	GitDir string `json:"git_dir"`
	Branch string `json:"branch"`
}

// AddOptions say how to create a task worktree.
type AddOptions struct {
	// Path is the new worktree directory; it must not exist.
	Path string
	// Branch is the new branch (without refs/heads/).
	Branch string
	// Start is the commit the branch starts at.
	Start string
	// Reason is recorded in the worktree's lock file.
	Reason string
	// NoCheckout creates the worktree without its files; Populate writes
	// them later (so that the caller can overlap it with other work).
	NoCheckout bool
}

// parallelCheckout makes git write a checkout's files with several
// workers: writing many small files is bound by the file system, not the
// CPU, so more workers than cores still help.
var parallelCheckout = []string{"-c", "checkout.workers=8", "-c", "checkout.thresholdForParallelism=100"}

// Add creates a branch at opts.Start and a worktree for it at opts.Path.
//
// The worktree is locked (so that `git worktree prune`, also run by the
// user's `git gc`, never removes its admin directory) and its `.git` pointer
// file is deleted: the sandbox that mounts the directory must neither learn
// where the repository is nor be able to redirect host git by rewriting the
// pointer. Host git reaches the worktree only through GitDir.
func (r *Repo) Add(ctx context.Context, opts AddOptions) (*Worktree, error) {
	ctx = noCancel(ctx)
	if err := r.CheckBranchName(ctx, opts.Branch); err != nil {
		return nil, err
	}
	tip, err := r.BranchTip(ctx, opts.Branch)
	if err != nil {
		return nil, err
	}
	if tip != "" {
		return nil, fmt.Errorf("branch %s: %w", opts.Branch, ErrBranchExists)
	}
	if _, err := os.Lstat(opts.Path); err == nil {
		return nil, fmt.Errorf("worktree directory %s already exists", opts.Path)
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o755); err != nil {
		return nil, fmt.Errorf("creating worktree parent: %w", err)
	}
	reason := opts.Reason
	if reason == "" {
		reason = "agent task"
	}
	args := append(append(append([]string{}, parallelCheckout...), fullCheckout...), "worktree", "add", "--quiet", "--lock", "--reason", reason)
	if opts.NoCheckout {
		args = append(args, "--no-checkout")
	}
	args = append(args, "-b", opts.Branch, "--", opts.Path, opts.Start)
	if _, err := r.g.out(ctx, r.CommonDir, r.Root, args...); err != nil {
		// git creates the branch before the worktree and leaves it when
		// the worktree fails (a full disk): undo both, so a failed start
		// leaves nothing.
		cctx := context.WithoutCancel(ctx)
		_ = os.RemoveAll(opts.Path)
		if gd, err := r.adminDirOf(opts.Path); err == nil {
			_ = os.RemoveAll(gd)
		}
		if tip, _ := r.BranchTip(cctx, opts.Branch); tip != "" {
			if start, _ := r.g.out(cctx, r.CommonDir, "", "rev-parse", "--verify", "-q", opts.Start+"^{commit}"); start == tip {
				_ = r.DeleteBranch(cctx, opts.Branch, tip)
			}
		}
		return nil, fmt.Errorf("creating worktree: %w", err)
	}
	w, err := r.adopt(opts.Path, opts.Branch)
	if err != nil {
		cctx := context.WithoutCancel(ctx)
		_ = os.RemoveAll(opts.Path)
		_, _ = r.g.out(cctx, r.CommonDir, "", "worktree", "prune")
		_, _ = r.g.out(cctx, r.CommonDir, "", "branch", "-D", "--", opts.Branch)
		return nil, err
	}
	return w, nil
}

// adopt reads the pointer file git just wrote (nothing else has had access
// to the directory yet), checks that it points into this repository, and
// deletes it.
func (r *Repo) adopt(path, branch string) (*Worktree, error) {
	dotgit := filepath.Join(path, ".git")
	b, err := os.ReadFile(dotgit)
	if err != nil {
		return nil, fmt.Errorf("reading new worktree's .git: %w", err)
	}
	gitDir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok || !r.ownsAdminDir(gitDir) {
		return nil, fmt.Errorf("new worktree's .git points to %q, outside %s", gitDir, r.CommonDir)
	}
	if err := os.Remove(dotgit); err != nil {
		return nil, fmt.Errorf("removing worktree's .git pointer: %w", err)
	}
	return &Worktree{Path: path, GitDir: gitDir, Branch: branch}, nil
}

// ownsAdminDir reports whether dir is a worktree admin directory of this
// repository (`<common>/worktrees/<name>`).
func (r *Repo) ownsAdminDir(dir string) bool {
	return filepath.IsAbs(dir) && filepath.Dir(filepath.Clean(dir)) == filepath.Join(r.CommonDir, "worktrees")
}

// Attach returns the Worktree of a task from its recorded paths, checking
// that the admin directory belongs to this repository.
func (r *Repo) Attach(w Worktree) (*Worktree, error) {
	if !r.ownsAdminDir(w.GitDir) {
		return nil, fmt.Errorf("worktree admin directory %q is not inside %s", w.GitDir, r.CommonDir)
	}
	if _, err := os.Stat(filepath.Join(w.GitDir, "HEAD")); err != nil {
		return nil, fmt.Errorf("worktree admin directory %s is gone (was the worktree removed with git?): %w", w.GitDir, err)
	}
	return &w, nil
}

// Populate writes the files of a worktree created with NoCheckout (index
// and work tree from its HEAD), in parallel. It may be run again after a
// checkout that was killed halfway: the caller must make sure that nothing
// else uses the worktree (it clears a stale index.lock of that run).
func (r *Repo) Populate(ctx context.Context, w *Worktree) error {
	ctx = noCancel(ctx)
	if !r.ownsAdminDir(w.GitDir) {
		return fmt.Errorf("worktree admin directory %q is not inside %s", w.GitDir, r.CommonDir)
	}
	if err := os.Remove(filepath.Join(w.GitDir, "index.lock")); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("clearing a stale index lock: %w", err)
	}
	args := append(append(r.noFilters(ctx, w.GitDir), parallelCheckout...), "read-tree", "--reset", "-u", "HEAD")
	if _, err := r.g.out(ctx, w.GitDir, w.Path, args...); err != nil {
		return fmt.Errorf("checking out the task worktree: %w", err)
	}
	return nil
}

// Exists reports whether the worktree directory is still there.
func (w *Worktree) Exists() bool {
	st, err := os.Lstat(w.Path)
	return err == nil && st.IsDir()
}

// Changes lists uncommitted paths in the task worktree.
func (r *Repo) Changes(ctx context.Context, w *Worktree) ([]string, error) {
	return status(ctx, r.g, w.GitDir, w.Path, r.noFilters(ctx, w.GitDir)...)
}

// CommitAll stages every change in the worktree (what .gitignore excludes
// stays out) and commits it on the task branch as the agent, with message.
// It returns "" when there was nothing to commit.
//
// Directories that are git repositories of their own (an agent ran `git
// init` or `cargo new` in the workspace) are left out: git would record
// them as a bare gitlink without their files, or refuse outright when they
// have no commit. They stay in the worktree, listed by NestedRepos and by
// Changes, so a worktree holding one is never removed as clean. FIFOs,
// sockets and devices (which git cannot record) and the paths in exclude
// (relative to the worktree) are left out the same way.
func (r *Repo) CommitAll(ctx context.Context, w *Worktree, message string, exclude ...string) (string, error) {
	ctx = noCancel(ctx)
	changes, err := r.Changes(ctx, w)
	if err != nil {
		return "", err
	}
	args := append(r.noFilters(ctx, w.GitDir), "add", "-A", "--", ".")
	for _, n := range append(append(nestedIn(changes), r.specialFiles(w.Path, changes)...), exclude...) {
		args = append(args, ":(exclude,literal)"+n)
	}
	// Pathspec magic is off for every other run (GIT_LITERAL_PATHSPECS);
	// here it is needed for the exclusions, whose paths are marked literal.
	if _, err := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, args: args, env: []string{"GIT_LITERAL_PATHSPECS=0"}}); err != nil {
		return "", fmt.Errorf("staging the task's changes: %w", err)
	}
	_, err = r.g.out(ctx, w.GitDir, w.Path, "diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv")
	if err == nil {
		return "", nil
	}
	if exitCode(err) != 1 {
		return "", fmt.Errorf("checking staged changes: %w", err)
	}
	if _, err := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path,
		args:  append(r.noFilters(ctx, w.GitDir), "commit", "--quiet", "--no-verify", "--cleanup=whitespace", "-F", "-"),
		stdin: strings.NewReader(message), env: r.identityEnv(ctx, true)}); err != nil {
		return "", fmt.Errorf("committing the task's changes: %w", err)
	}
	return r.g.out(ctx, w.GitDir, "", "rev-parse", "--verify", "HEAD")
}

// noFilters returns -c settings that switch off every filter driver the
// configuration defines, for every git run in a task worktree (checkout,
// status, add, diff). There the agent chooses both the content and,
// through a .gitattributes it wrote, which filter runs on it: even the
// user's own drivers (git-lfs, git-crypt, anything in their config) must
// not run on it unreviewed. Filters are off consistently, so the worktree
// holds exactly the committed bytes (an LFS pointer stays a pointer) and
// nothing looks modified that is not.
func (r *Repo) noFilters(ctx context.Context, gitDir string) []string {
	out, _ := r.g.out(ctx, gitDir, "", "config", "--name-only", "--get-regexp", `^filter\.`)
	var args []string
	seen := map[string]bool{}
	for _, key := range lines(out, '\n') {
		name := strings.TrimPrefix(key, "filter.")
		if i := strings.LastIndex(name, "."); i > 0 {
			name = name[:i]
		}
		// A name with "=" cannot be given with -c; such a name can only
		// come from the user's own configuration.
		if name == "" || seen[name] || strings.Contains(name, "=") {
			continue
		}
		seen[name] = true
		for _, k := range []string{"clean=", "smudge=", "process=", "required=false"} {
			args = append(args, "-c", "filter."+name+"."+k)
		}
	}
	return args
}

// NestedRepos lists the untracked directories of the worktree that are git
// repositories of their own (git status shows them as one entry ending in
// "/" even when asked for every untracked file).
func (r *Repo) NestedRepos(ctx context.Context, w *Worktree) ([]string, error) {
	changes, err := r.Changes(ctx, w)
	if err != nil {
		return nil, err
	}
	return nestedIn(changes), nil
}

// nestedIn picks the nested repositories out of git status paths.
func nestedIn(changes []string) []string {
	var nested []string
	for _, c := range changes {
		if strings.HasSuffix(c, "/") {
			nested = append(nested, c)
		}
	}
	return nested
}

// Remove deletes the worktree directory and its admin directory. The
// branch stays (see DeleteBranch).
func (r *Repo) Remove(_ context.Context, w *Worktree) error {
	if err := hostfs.RemoveTree(w.Path); err != nil {
		return fmt.Errorf("removing worktree %s: %w", w.Path, err)
	}
	if r.ownsAdminDir(w.GitDir) {
		if err := os.RemoveAll(w.GitDir); err != nil {
			return fmt.Errorf("removing worktree admin directory %s: %w", w.GitDir, err)
		}
	}
	return nil
}

// DeleteBranch deletes a branch, but only if it still points at tip (so a
// commit made meanwhile is never lost silently).
func (r *Repo) DeleteBranch(ctx context.Context, branch, tip string) error {
	ctx = noCancel(ctx)
	if err := r.CheckBranchName(ctx, branch); err != nil {
		return err
	}
	args := []string{"update-ref", "-m", "agent: discard task branch", "-d", "refs/heads/" + branch}
	if tip != "" {
		args = append(args, tip)
	}
	if _, err := r.g.out(ctx, r.CommonDir, "", args...); err != nil {
		return fmt.Errorf("deleting branch %s: %w", branch, err)
	}
	return nil
}

// IgnoredFiles lists the files in the worktree that .gitignore keeps out
// of a commit (the agent created them: a checkout holds none). They are
// never committed and go when the worktree is removed, so the review names
// them.
func (r *Repo) IgnoredFiles(ctx context.Context, w *Worktree) ([]string, error) {
	args := append(r.noFilters(ctx, w.GitDir), "ls-files", "--others", "--ignored", "--exclude-standard", "-z")
	out, err := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, args: args})
	if err != nil {
		return nil, fmt.Errorf("listing ignored files: %w", err)
	}
	return lines(string(out), 0), nil
}

// RemoveFiles deletes a task worktree's directory whose repository is
// gone (no admin directory to remove), never following symlinks.
func RemoveFiles(path string) error {
	if err := hostfs.RemoveTree(path); err != nil {
		return fmt.Errorf("removing worktree %s: %w", path, err)
	}
	return nil
}
