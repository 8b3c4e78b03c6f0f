package worktree

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// TopLevelNames lists the names at the top of commit's tree (files and
// directories), read from the repository's objects.
func (r *Repo) TopLevelNames(ctx context.Context, commit string) ([]string, error) {
	if err := validRev(commit); err != nil {
		return nil, err
	}
	out, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"ls-tree", "-z", "--name-only", commit + "^{tree}"}})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", commit, err)
	}
	return lines(string(out), 0), nil
}

// TreeNames lists up to max file paths of commit's tree (all levels).
func (r *Repo) TreeNames(ctx context.Context, commit string, max int) ([]string, error) {
	if err := validRev(commit); err != nil {
		return nil, err
	}
	out, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"ls-tree", "-r", "-z", "--name-only", commit + "^{tree}"}})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", commit, err)
	}
	names := lines(string(out), 0)
	if len(names) > max {
		names = names[:max]
	}
	return names, nil
}

// ReadFile returns the contents of path in commit's tree, read from the
// repository's objects (never from a checkout), when it is a regular file
// of at most max bytes. found is false when there is no such file.
func (r *Repo) ReadFile(ctx context.Context, commit, path string, max int64) (data []byte, found bool, err error) {
	if err := validRev(commit); err != nil {
		return nil, false, err
	}
	out, err := r.g.out(ctx, r.CommonDir, "", "ls-tree", "-l", "-z", commit, "--", path)
	if err != nil {
		return nil, false, fmt.Errorf("reading %s at %s: %w", path, commit, err)
	}
	out = strings.TrimRight(out, "\x00")
	if out == "" {
		return nil, false, nil
	}
	meta, name, _ := strings.Cut(out, "\t")
	f := strings.Fields(meta)
	if len(f) != 4 || name != path {
		return nil, false, nil
	}
	if f[1] != "blob" || (f[0] != "100644" && f[0] != "100755") {
		return nil, false, fmt.Errorf("%s is not a regular file in %s", path, commit)
	}
	size, _ := strconv.ParseInt(f[3], 10, 64)
	if size > max {
		return nil, false, fmt.Errorf("%s is %d bytes, more than the %d read", path, size, max)
	}
	b, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"cat-file", "blob", f[2]}})
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", path, err)
	}
	return b, true, nil
}

// Archive writes commit's tree as a tar stream to w (git archive, with
// every filter driver off, like every other run here).
func (r *Repo) Archive(ctx context.Context, commit string, w io.Writer) error {
	if err := validRev(commit); err != nil {
		return err
	}
	args := append(r.noFilters(ctx, r.CommonDir), "archive", "--format=tar", commit)
	if _, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: args, stdout: w}); err != nil {
		return fmt.Errorf("archiving %s: %w", commit, err)
	}
	return nil
}
