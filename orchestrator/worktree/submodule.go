package worktree

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Submodule is a gitlink in a commit's tree and where the user's
// repository keeps its objects.
type Submodule struct {
	Path   string // in the tree
	Name   string // from .gitmodules ("" when it has no entry)
	Commit string
	// GitDir is the submodule's git directory inside the repository's
	// (<common dir>/modules/<name>); Present says it holds Commit.
	GitDir  string
	Present bool
}

// Submodules lists the gitlinks of commit's tree with the local objects
// that can fill them. Nothing is fetched: a submodule the user never
// cloned is listed with Present false.
func (r *Repo) Submodules(ctx context.Context, commit string) ([]Submodule, error) {
	if err := validRev(commit); err != nil {
		return nil, err
	}
	out, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"ls-tree", "-r", "-z", "--full-tree", commit}})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", commit, err)
	}
	var subs []Submodule
	for _, e := range lines(string(out), 0) {
		meta, p, ok := strings.Cut(e, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 || f[0] != "160000" || f[1] != "commit" {
			continue
		}
		subs = append(subs, Submodule{Path: p, Commit: f[2]})
	}
	if len(subs) == 0 {
		return nil, nil
	}
	names := map[string]string{}
	cfg, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"config", "-z", "--blob", commit + ":.gitmodules", "--get-regexp", `^submodule\..*\.path$`}})
	if err == nil {
		for _, kv := range lines(string(cfg), 0) {
			k, v, _ := strings.Cut(kv, "\n")
			name := strings.TrimSuffix(strings.TrimPrefix(k, "submodule."), ".path")
			names[v] = name
		}
	}
	for i := range subs {
		s := &subs[i]
		s.Name = names[s.Path]
		if s.Name == "" || !safeName(s.Name) {
			continue
		}
		s.GitDir = filepath.Join(r.CommonDir, "modules", filepath.FromSlash(s.Name))
		if _, err := r.g.out(ctx, s.GitDir, "", "cat-file", "-e", s.Commit+"^{commit}"); err == nil {
			s.Present = true
		}
	}
	return subs, nil
}

func safeName(n string) bool {
	if n == "" || strings.HasPrefix(n, "/") || strings.ContainsAny(n, "\\\x00") {
		return false
	}
	for _, part := range strings.Split(n, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return path.Clean(n) == n
}

// ArchiveSubmodule writes the submodule's files at its commit as a tar
// stream, from the local repository's objects, filters off.
func (r *Repo) ArchiveSubmodule(ctx context.Context, s Submodule, w io.Writer) error {
	if !s.Present {
		return fmt.Errorf("submodule %s has no local objects", s.Path)
	}
	args := append(r.noFilters(ctx, s.GitDir), "archive", "--format=tar", s.Commit)
	if _, err := r.g.run(ctx, invocation{gitDir: s.GitDir, args: args, stdout: w}); err != nil {
		return fmt.Errorf("archiving submodule %s: %w", s.Path, err)
	}
	return nil
}

// SubmoduleCommit is the agent's work inside one submodule, committed in
// the submodule's own repository.
type SubmoduleCommit struct {
	Path   string `json:"path"`   // the submodule's path in the task's tree
	Branch string `json:"branch"` // in the submodule's repository
	Commit string `json:"commit"`
}

// CommitSubmodules commits what changed inside each submodule that the
// task's worktree holds (filled from the user's objects at the commit
// start, without a .git of their own) in the submodule's repository: a
// commit on top of the submodule's commit, on branch. The superproject's
// commit cannot hold those files (a gitlink names a commit, not files),
// and without this they would go with the worktree. Submodules whose
// files are unchanged get nothing. Run it only while nothing in a sandbox
// can run: it reads the agent's files with host git (filters off). A
// submodule whose place is not a plain directory (a symlink the agent
// made) is refused.
func (r *Repo) CommitSubmodules(ctx context.Context, w *Worktree, start, branch, message string) ([]SubmoduleCommit, error) {
	ctx = noCancel(ctx)
	subs, err := r.Submodules(ctx, start)
	if err != nil {
		return nil, err
	}
	var done []SubmoduleCommit
	for _, s := range subs {
		if !s.Present {
			continue
		}
		dir, err := plainDir(w.Path, s.Path)
		if err != nil {
			return done, fmt.Errorf("submodule %s: %w", s.Path, err)
		}
		c, err := r.commitSubmodule(ctx, s, dir, branch, message)
		if err != nil {
			return done, fmt.Errorf("committing the changes inside submodule %s: %w", s.Path, err)
		}
		if c != "" {
			done = append(done, SubmoduleCommit{Path: s.Path, Branch: branch, Commit: c})
		}
	}
	return done, nil
}

// plainDir returns root/rel after checking that each component below root
// is a directory, not a symbolic link.
func plainDir(root, rel string) (string, error) {
	p := root
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%s is not a directory", p)
		}
	}
	return p, nil
}

func (r *Repo) commitSubmodule(ctx context.Context, s Submodule, dir, branch, message string) (string, error) {
	tmp, err := os.CreateTemp("", "agent-submodule-index-*")
	if err != nil {
		return "", err
	}
	idx := tmp.Name()
	_ = tmp.Close()
	_ = os.Remove(idx)
	defer os.Remove(idx)
	env := []string{"GIT_INDEX_FILE=" + idx}
	var tree []byte
	for _, args := range [][]string{{"read-tree", s.Commit}, append(r.noFilters(ctx, s.GitDir), "add", "-A", "--", "."), {"write-tree"}} {
		if tree, err = r.g.run(ctx, invocation{gitDir: s.GitDir, workTree: dir, args: args, env: env}); err != nil {
			return "", err
		}
	}
	if old, err := r.g.out(ctx, s.GitDir, "", "rev-parse", "--verify", s.Commit+"^{tree}"); err != nil {
		return "", err
	} else if old == strings.TrimSpace(string(tree)) {
		return "", nil
	}
	b, err := r.g.run(ctx, invocation{gitDir: s.GitDir, args: []string{"commit-tree", strings.TrimSpace(string(tree)), "-p", s.Commit},
		stdin: strings.NewReader(message), env: r.identityEnv(ctx, true)})
	if err != nil {
		return "", err
	}
	c := strings.TrimSpace(string(b))
	if _, err := r.g.out(ctx, s.GitDir, "", "update-ref", "-m", "agent: "+firstLine(message), "refs/heads/"+branch, c); err != nil {
		return "", err
	}
	return c, nil
}
