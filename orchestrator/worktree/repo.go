package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Errors a caller can tell apart; each message says how to fix it.
var (
	// ErrNotRepository: the directory is not inside a git checkout.
	ErrNotRepository = errors.New("not a git repository")
	// ErrNoCommits: the repository has no commit to branch from.
	ErrNoCommits = errors.New("the repository has no commits yet")
	// ErrUnknownRef: the base does not name a commit.
	ErrUnknownRef = errors.New("unknown ref")
	// ErrBranchExists: the task branch already exists.
	ErrBranchExists = errors.New("branch already exists")
)

// Repo is the user's repository as host git sees it. Paths are absolute.
type Repo struct {
	// Root is the top of the user's checkout (its work tree).
	Root string
	// GitDir is the git directory of that checkout: the same as CommonDir
	// for a main checkout, `<common>/worktrees/<name>` for a linked one.
	GitDir string
	// CommonDir is the repository's shared directory (objects, refs).
	CommonDir string
	// UnsafeAddSpecial stages FIFOs, sockets and devices like any file
	// (git then refuses the whole commit). Only security tests' control
	// runs set it.
	UnsafeAddSpecial bool

	g git
}

// Open finds the repository that contains dir. This is the only place where
// git discovers a repository: dir is the user's own checkout (the same
// discovery their shell does), and callers must never pass a task worktree
// (Manager.Open refuses those).
func Open(ctx context.Context, dir string) (*Repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("repository path %q: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", abs, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("repository %s is not a directory", abs)
	}
	g := git{}
	out, err := g.run(ctx, invocation{discoverIn: abs,
		args: []string{"rev-parse", "--path-format=absolute", "--is-bare-repository", "--git-common-dir", "--absolute-git-dir", "--show-toplevel"}})
	if err != nil {
		var ge *gitError
		if errors.As(err, &ge) {
			msg := strings.TrimSpace(ge.stderr)
			if strings.Contains(msg, "dubious ownership") {
				return nil, fmt.Errorf("%s is owned by another user and git refuses to use it: %s", abs, msg)
			}
			if strings.Contains(msg, "not a git repository") {
				return nil, fmt.Errorf("%s: %w (run the task inside a git checkout, pass --repo DIR, or create one with `git init` and a first commit)", abs, ErrNotRepository)
			}
			if strings.Contains(msg, "must be run in a work tree") {
				return nil, fmt.Errorf("%s is a bare repository: tasks need a checkout (git clone it and run the task there)", abs)
			}
			return nil, fmt.Errorf("%s: %s", abs, msg)
		}
		return nil, fmt.Errorf("running git (is it installed?): %w", err)
	}
	f := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(f) < 3 || f[0] == "true" {
		return nil, fmt.Errorf("%s is a bare repository: tasks need a checkout (git clone it and run the task there)", abs)
	}
	if len(f) != 4 {
		return nil, fmt.Errorf("%s: unexpected output from git rev-parse: %q", abs, out)
	}
	r := &Repo{CommonDir: f[1], GitDir: f[2], Root: f[3], g: g}
	if _, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "-q", "HEAD^{commit}"); err != nil {
		if out, _ := r.g.out(ctx, r.CommonDir, "", "rev-list", "-n1", "--all"); out == "" {
			return nil, fmt.Errorf("%s: %w: make a first commit (git add . && git commit) before running a task", r.Root, ErrNoCommits)
		}
	}
	return r, nil
}

// Base is what a task starts from.
type Base struct {
	// Ref is what the user asked for ("HEAD", "main", a commit id).
	Ref string `json:"ref"`
	// Branch is the branch name (without refs/heads/) the ref stands for,
	// or "" when it is a commit, a tag or a detached HEAD: such a task can
	// be reviewed and kept but has no branch to merge into.
	Branch string `json:"branch,omitempty"`
	// Commit is the full commit id.
	Commit string `json:"commit"`
}

// validRev rejects revisions that git could take for an option or that
// cannot be a ref expression at all.
func validRev(ref string) error {
	if ref == "" || strings.HasPrefix(ref, "-") || strings.ContainsAny(ref, "\x00\n\r") || len(ref) > 1024 {
		return fmt.Errorf("%q: %w", ref, ErrUnknownRef)
	}
	return nil
}

// ResolveBase resolves ref ("" means HEAD) to a commit and, where it names
// one, a branch.
func (r *Repo) ResolveBase(ctx context.Context, ref string) (Base, error) {
	if ref == "" {
		ref = "HEAD"
	}
	if err := validRev(ref); err != nil {
		return Base{}, err
	}
	commit, err := r.g.out(ctx, r.GitDir, "", "rev-parse", "--verify", "-q", ref+"^{commit}")
	if err != nil || commit == "" {
		return Base{}, fmt.Errorf("base %q: %w: it names no commit in %s (check `git branch -a` / `git log`, or omit --base to start from HEAD)", ref, ErrUnknownRef, r.Root)
	}
	b := Base{Ref: ref, Commit: commit}
	full, err := r.g.out(ctx, r.GitDir, "", "rev-parse", "--symbolic-full-name", ref)
	if err == nil && strings.HasPrefix(full, "refs/heads/") {
		b.Branch = strings.TrimPrefix(full, "refs/heads/")
	}
	return b, nil
}

// BranchTip returns the commit a branch points to, or "" when it does not
// exist.
func (r *Repo) BranchTip(ctx context.Context, branch string) (string, error) {
	if err := r.CheckBranchName(ctx, branch); err != nil {
		return "", err
	}
	out, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "-q", "refs/heads/"+branch+"^{commit}")
	if err != nil {
		if exitCode(err) == 1 {
			return "", nil
		}
		return "", err
	}
	return out, nil
}

// CheckBranchName validates a branch name with git's own rules. A name
// once found valid is remembered: check-ref-format judges the string
// alone (no repository state), and one task asks about its branch a dozen
// times.
func (r *Repo) CheckBranchName(ctx context.Context, branch string) error {
	if branch == "" || strings.HasPrefix(branch, "-") {
		return fmt.Errorf("invalid branch name %q", branch)
	}
	if _, ok := validBranches.Load(branch); ok {
		return nil
	}
	if _, err := r.g.out(ctx, r.CommonDir, "", "check-ref-format", "refs/heads/"+branch); err != nil {
		return fmt.Errorf("invalid branch name %q", branch)
	}
	if validBranchCount.Add(1) <= maxValidBranches {
		validBranches.Store(branch, true)
	}
	return nil
}

// validBranches holds up to maxValidBranches names check-ref-format
// accepted in this process.
var (
	validBranches    sync.Map
	validBranchCount atomic.Int64
)

const maxValidBranches = 1024

// Dirty lists the paths with uncommitted changes (staged, unstaged or
// untracked, not ignored) in the user's checkout.
func (r *Repo) Dirty(ctx context.Context) ([]string, error) {
	return status(ctx, r.g, r.GitDir, r.Root)
}

func status(ctx context.Context, g git, gitDir, workTree string, pre ...string) ([]string, error) {
	// Not g.out: porcelain lines start with a space that must survive.
	args := append(append([]string{}, pre...), "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=all", "--no-renames")
	out, err := g.run(ctx, invocation{gitDir: gitDir, workTree: workTree, args: args})
	if err != nil {
		return nil, fmt.Errorf("git status of %s: %w", workTree, err)
	}
	var paths []string
	for _, e := range lines(string(out), 0) {
		if len(e) > 3 {
			paths = append(paths, e[3:])
		}
	}
	return paths, nil
}

// Snapshot records the user's uncommitted changes (tracked and untracked,
// not ignored) as a commit on top of base, without touching their index,
// working tree or any ref.
func (r *Repo) Snapshot(ctx context.Context, base Base, message string) (string, error) {
	c, err := r.snapshot(noCancel(ctx), r.GitDir, r.Root, base.Commit, []string{"add", "-A"}, nil, message)
	if err != nil {
		return "", fmt.Errorf("snapshot of uncommitted changes: %w", err)
	}
	return c, nil
}

// snapshot commits the files of workTree on top of parent through a
// temporary index file, so that the work tree's own index is never
// touched: read-tree parent, then the given git add, then write-tree.
func (r *Repo) snapshot(ctx context.Context, gitDir, workTree, parent string, add, env []string, message string) (string, error) {
	tmp, err := os.CreateTemp("", "agent-snapshot-index-*")
	if err != nil {
		return "", err
	}
	idx := tmp.Name()
	_ = tmp.Close()
	_ = os.Remove(idx) // git wants to create it
	defer os.Remove(idx)
	env = append([]string{"GIT_INDEX_FILE=" + idx}, env...)
	var tree []byte
	for _, args := range [][]string{{"read-tree", parent}, add, {"write-tree"}} {
		if tree, err = r.g.run(ctx, invocation{gitDir: gitDir, workTree: workTree, args: args, env: env}); err != nil {
			return "", err
		}
	}
	return r.commitTree(ctx, strings.TrimSpace(string(tree)), message, parent)
}

// commitTree writes a commit object for tree with the given parents.
func (r *Repo) commitTree(ctx context.Context, tree, message string, parents ...string) (string, error) {
	args := []string{"commit-tree", tree}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	b, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: args, stdin: strings.NewReader(message), env: r.identityEnv(ctx, false)})
	if err != nil {
		return "", fmt.Errorf("writing commit: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Agent identity for commits the agent authored, and the fallback
// committer when the user has configured none (git refuses to commit
// without one).
const (
	AgentName  = "agent"
	AgentEmail = "agent@localhost"
)

// identityEnv sets the author (the agent for its own work, else the user)
// and a committer when the user's config has none.
func (r *Repo) identityEnv(ctx context.Context, agentAuthor bool) []string {
	var env []string
	name, _ := r.g.out(ctx, r.CommonDir, "", "config", "user.name")
	email, _ := r.g.out(ctx, r.CommonDir, "", "config", "user.email")
	if name == "" || email == "" {
		env = append(env, "GIT_COMMITTER_NAME="+AgentName, "GIT_COMMITTER_EMAIL="+AgentEmail)
		if !agentAuthor {
			env = append(env, "GIT_AUTHOR_NAME="+AgentName, "GIT_AUTHOR_EMAIL="+AgentEmail)
		}
	}
	if agentAuthor {
		env = append(env, "GIT_AUTHOR_NAME="+AgentName, "GIT_AUTHOR_EMAIL="+AgentEmail)
	}
	return env
}

// IsAncestor reports whether commit a is an ancestor of (or equal to) b.
func (r *Repo) IsAncestor(ctx context.Context, a, b string) (bool, error) {
	_, err := r.g.out(ctx, r.CommonDir, "", "merge-base", "--is-ancestor", a, b)
	if err == nil {
		return true, nil
	}
	if exitCode(err) == 1 {
		return false, nil
	}
	return false, err
}

// CountCommits counts the commits reachable from to but not from from.
func (r *Repo) CountCommits(ctx context.Context, from, to string) (int, error) {
	out, err := r.g.out(ctx, r.CommonDir, "", "rev-list", "--count", from+".."+to)
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscanf(out, "%d", &n)
	return n, err
}

// ConfigValue reads one setting of the repository's (and the user's)
// configuration; "" when unset.
func (r *Repo) ConfigValue(ctx context.Context, key string) string {
	v, _ := r.g.out(ctx, r.CommonDir, "", "config", "--get", "--", key)
	return v
}
