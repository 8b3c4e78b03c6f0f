package worktree

import (
	"context"
	"fmt"
	"io"
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
