package worktree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/localagent/agent/sandbox/hostfs"
)

// A spare checkout is the files of one commit's tree, written ahead of
// time, with the index that describes them, in a directory of the
// caller's (under the state directory, never mounted into a sandbox). A new
// task worktree at that commit takes it over with two renames instead of
// writing every file: on a big repository that turns seconds of checkout
// into milliseconds. A spare is used at most once: claiming it moves it
// away, so two tasks can never share one.

// spareFiles and spareIndex are the parts of a spare directory; spareTree
// records the tree it holds, checked again at claim time.
const (
	spareFiles = "files"
	spareIndex = "index"
	spareTree  = "tree"
)

// SpareKey names the spare checkout that fits a worktree at commit whose
// files belong to uid:gid. It covers everything that decides the bytes and
// owners a checkout writes: the tree, the repository's configuration
// (line endings, symlinks, file modes) and the owner.
func (r *Repo) SpareKey(ctx context.Context, commit string, uid, gid int) (string, error) {
	tree, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "--end-of-options", commit+"^{tree}")
	if err != nil {
		return "", fmt.Errorf("reading the tree of %.10s: %w", commit, err)
	}
	cfg, _ := r.g.out(ctx, r.CommonDir, "", "config", "--list", "-z")
	h := sha256.New()
	for _, s := range []string{tree, cfg, strconv.Itoa(uid), strconv.Itoa(gid), r.CommonDir} {
		_, _ = io.WriteString(h, s)
		_, _ = h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// MakeSpare writes a spare checkout of commit at dir: files and index
// from the tree (filter drivers off, as Populate), then handed to the
// owner by chown when it is not nil, with the index refreshed afterwards so
// that git sees the files as unchanged. It works in a temporary directory
// next to dir and renames it into place, so a spare is either complete or
// absent; when dir already exists (another run made it), its own is
// discarded.
func (r *Repo) MakeSpare(ctx context.Context, dir, commit string, chown func(root string) error) (err error) {
	ctx = noCancel(ctx)
	tree, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "--end-of-options", commit+"^{tree}")
	if err != nil {
		return fmt.Errorf("reading the tree of %.10s: %w", commit, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = hostfs.RemoveTree(tmp)
		}
	}()
	files := filepath.Join(tmp, spareFiles)
	if err := os.Mkdir(files, 0o755); err != nil {
		return err
	}
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, spareIndex)}
	args := append(append(r.noFilters(ctx, r.CommonDir), parallelCheckout...), "read-tree", "--reset", "-u", tree)
	if _, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, workTree: files, args: args, env: env}); err != nil {
		return fmt.Errorf("writing a spare checkout: %w", err)
	}
	if chown != nil {
		if err := chown(files); err != nil {
			return err
		}
		// Changing owners changed every file's ctime: record the new stat
		// data (the content is unchanged), or git would re-read every
		// file of the task's worktree on its first status.
		args := append(r.noFilters(ctx, r.CommonDir), "update-index", "-q", "--refresh")
		if _, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, workTree: files, args: args, env: env}); err != nil {
			return fmt.Errorf("refreshing a spare checkout's index: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, spareTree), []byte(tree+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Lstat(dir); serr == nil {
			_ = hostfs.RemoveTree(tmp)
			return nil
		}
		return err
	}
	return nil
}

// ErrNoSpare: there is no spare checkout at that directory (none was
// made, or another worktree took it).
var ErrNoSpare = errors.New("no spare checkout")

// ClaimSpare gives the spare checkout at dir to w, a worktree just created
// without its files: the spare's files move into w's directory (the
// directory itself is left as it is: its owner is the caller's to set) and
// its index becomes w's index. It takes the spare atomically (one rename), so a spare goes to
// one worktree only. On an error other than ErrNoSpare the worktree may
// hold some files: the caller populates it (Populate overwrites whatever
// is there).
func (r *Repo) ClaimSpare(ctx context.Context, w *Worktree, dir string) error {
	ctx = noCancel(ctx)
	if !r.ownsAdminDir(w.GitDir) {
		return fmt.Errorf("worktree admin directory %q is not inside %s", w.GitDir, r.CommonDir)
	}
	claimed := dir + ".claimed-" + filepath.Base(w.Path)
	if err := os.Rename(dir, claimed); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrNoSpare
		}
		return fmt.Errorf("taking a spare checkout: %w", err)
	}
	defer func() { _ = hostfs.RemoveTree(claimed) }()
	b, err := os.ReadFile(filepath.Join(claimed, spareTree))
	if err != nil {
		return fmt.Errorf("reading a spare checkout: %w", err)
	}
	want, err := r.g.out(ctx, w.GitDir, "", "rev-parse", "--verify", "HEAD^{tree}")
	if err != nil {
		return fmt.Errorf("reading the worktree's tree: %w", err)
	}
	if strings.TrimSpace(string(b)) != want {
		return fmt.Errorf("the spare checkout holds tree %.10s, the worktree is at %.10s", b, want)
	}
	// The spare's entries are moved into the worktree directory, which
	// itself stays: a sandbox being created at the same time may already
	// have bind-mounted it, and would keep seeing an empty directory if it
	// were replaced. It is empty (created without its files, its .git
	// pointer removed), so no rename can land on anything.
	if ents, err := os.ReadDir(w.Path); err != nil || len(ents) != 0 {
		return fmt.Errorf("the worktree %s is not empty: no spare checkout moved into it (%v)", w.Path, err)
	}
	files := filepath.Join(claimed, spareFiles)
	ents, err := os.ReadDir(files)
	if err != nil {
		return fmt.Errorf("reading a spare checkout: %w", err)
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(files, e.Name()), filepath.Join(w.Path, e.Name())); err != nil {
			return fmt.Errorf("moving a spare checkout into place: %w", err)
		}
	}
	if err := copyFile(filepath.Join(claimed, spareIndex), filepath.Join(w.GitDir, "index")); err != nil {
		return fmt.Errorf("installing a spare checkout's index: %w", err)
	}
	return nil
}

// copyFile writes src to dst through a temporary file renamed into place
// (the admin directory may be on another file system than the spare).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-")
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		_ = os.Remove(out.Name())
		return err
	}
	if err := out.Close(); err != nil {
		_ = os.Remove(out.Name())
		return err
	}
	if err := os.Rename(out.Name(), dst); err != nil {
		_ = os.Remove(out.Name())
		return err
	}
	return nil
}
