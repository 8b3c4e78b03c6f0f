package worktree

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// LFSFile is a Git LFS pointer checked out in a worktree whose object the
// user's repository has (<common dir>/lfs/objects/...).
type LFSFile struct {
	Path   string
	Object string // host path of the object
	Size   int64
}

// maxLFSPointer is the largest pointer file the LFS specification allows.
const maxLFSPointer = 1024

var lfsPointer = regexp.MustCompile(`\Aversion https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize ([0-9]+)\n`)

// LFSFiles lists the worktree's files that git-lfs would materialise (the
// "filter=lfs" attribute, a pointer blob) and whose objects are present
// locally. Objects are never fetched. Only the index is read.
func (r *Repo) LFSFiles(ctx context.Context, w *Worktree) ([]LFSFile, error) {
	_, files, err := r.lfsFiles(ctx, w)
	return files, err
}

// Extras lists, from one listing of the worktree's index, what a checkout
// of commit (the worktree's) leaves out: its submodules (Submodules, only
// read when the index has a gitlink) and its LFS files (LFSFiles).
func (r *Repo) Extras(ctx context.Context, w *Worktree, commit string) ([]Submodule, []LFSFile, error) {
	gitlinks, files, err := r.lfsFiles(ctx, w)
	if err != nil || !gitlinks {
		return nil, files, err
	}
	subs, err := r.Submodules(ctx, commit)
	return subs, files, err
}

// lfsFiles is LFSFiles, also saying whether the index has a gitlink.
func (r *Repo) lfsFiles(ctx context.Context, w *Worktree) (gitlinks bool, _ []LFSFile, _ error) {
	out, err := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, args: []string{"ls-files", "-z", "-s"}})
	if err != nil {
		return false, nil, fmt.Errorf("listing the worktree: %w", err)
	}
	type entry struct{ sha, path string }
	var entries []entry
	hasAttrs := false
	for _, e := range lines(string(out), 0) {
		meta, p, ok := strings.Cut(e, "\t")
		f := strings.Fields(meta)
		if ok && len(f) == 3 && f[0] == "160000" {
			gitlinks = true
		}
		if !ok || len(f) != 3 || (f[0] != "100644" && f[0] != "100755") {
			continue
		}
		if p == ".gitattributes" || strings.HasSuffix(p, "/.gitattributes") {
			hasAttrs = true
		}
		entries = append(entries, entry{f[1], p})
	}
	if !hasAttrs || len(entries) == 0 {
		return gitlinks, nil, nil
	}
	var in bytes.Buffer
	for _, e := range entries {
		in.WriteString(e.path + "\x00")
	}
	attrs, err := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, args: []string{"check-attr", "--cached", "-z", "--stdin", "filter"}, stdin: &in})
	if err != nil {
		return gitlinks, nil, fmt.Errorf("reading attributes: %w", err)
	}
	lfs := map[string]bool{}
	parts := strings.Split(string(attrs), "\x00")
	for i := 0; i+2 < len(parts); i += 3 {
		if parts[i+2] == "lfs" {
			lfs[parts[i]] = true
		}
	}
	var all bytes.Buffer
	var marked []entry
	for _, e := range entries {
		if lfs[e.path] {
			marked = append(marked, e)
			all.WriteString(e.sha + "\n")
		}
	}
	if len(marked) == 0 {
		return gitlinks, nil, nil
	}
	// Only blobs small enough to be a pointer are read: a file marked lfs
	// but committed with its contents is not loaded into memory.
	sizes, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"cat-file", "--batch-check"}, stdin: &all})
	if err != nil {
		return gitlinks, nil, fmt.Errorf("reading pointer sizes: %w", err)
	}
	var shas bytes.Buffer
	var cand []entry
	for i, l := range lines(string(sizes), '\n') {
		f := strings.Fields(l)
		if i >= len(marked) || len(f) != 3 || f[1] != "blob" {
			continue
		}
		if n, err := strconv.Atoi(f[2]); err != nil || n > maxLFSPointer {
			continue
		}
		cand = append(cand, marked[i])
		shas.WriteString(marked[i].sha + "\n")
	}
	if len(cand) == 0 {
		return gitlinks, nil, nil
	}
	blobs, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"cat-file", "--batch"}, stdin: &shas})
	if err != nil {
		return gitlinks, nil, fmt.Errorf("reading pointers: %w", err)
	}
	br := bufio.NewReader(bytes.NewReader(blobs))
	var files []LFSFile
	for _, e := range cand {
		hdr, err := br.ReadString('\n')
		if err != nil {
			break
		}
		f := strings.Fields(hdr)
		if len(f) != 3 {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || n > maxLFSPointer {
			break
		}
		body := make([]byte, n+1)
		if _, err := io.ReadFull(br, body); err != nil {
			break
		}
		m := lfsPointer.FindSubmatch(body[:n])
		if m == nil {
			continue
		}
		oid := string(m[1])
		size, _ := strconv.ParseInt(string(m[2]), 10, 64)
		obj := filepath.Join(r.CommonDir, "lfs", "objects", oid[0:2], oid[2:4], oid)
		if fi, err := os.Lstat(obj); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
			continue
		}
		files = append(files, LFSFile{Path: e.path, Object: obj, Size: size})
	}
	return gitlinks, files, nil
}

// AssumeUnchanged tells the worktree's index to take paths as unchanged,
// so that files replaced by their LFS contents are not committed as
// changes (filters are off in task worktrees: a commit would store the
// contents instead of the pointer).
func (r *Repo) AssumeUnchanged(ctx context.Context, w *Worktree, paths []string) error {
	var in bytes.Buffer
	for _, p := range paths {
		in.WriteString(p + "\x00")
	}
	if _, err := r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, args: []string{"update-index", "--assume-unchanged", "-z", "--stdin"}, stdin: &in}); err != nil {
		return fmt.Errorf("marking LFS files: %w", err)
	}
	return nil
}
