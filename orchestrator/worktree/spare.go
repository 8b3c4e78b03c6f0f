package worktree

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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

// SpareFamily names the spare checkouts that can serve worktrees of this
// repository whose files belong to uid:gid, whatever their commit: it
// covers everything but the tree that decides the bytes and owners a
// checkout writes (the repository's configuration: line endings, symlinks,
// file modes; the owner). A spare of the family holding another tree is
// brought to the wanted one by RetargetSpare.
func (r *Repo) SpareFamily(ctx context.Context, uid, gid int) string {
	cfg, _ := r.g.out(ctx, r.CommonDir, "", "config", "--list", "-z")
	h := sha256.New()
	for _, s := range []string{cfg, strconv.Itoa(uid), strconv.Itoa(gid), r.CommonDir} {
		_, _ = io.WriteString(h, s)
		_, _ = h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// SpareKey names the spare checkout that fits a worktree at commit whose
// files belong to uid:gid: its family (SpareFamily), a dash and the tree.
func (r *Repo) SpareKey(ctx context.Context, commit string, uid, gid int) (string, error) {
	tree, err := r.treeOf(ctx, commit)
	if err != nil {
		return "", err
	}
	return r.SpareFamily(ctx, uid, gid) + "-" + tree, nil
}

// SpareFamilyOf returns the family part of a spare's key ("" when key is
// not one).
func SpareFamilyOf(key string) string {
	fam, _, ok := strings.Cut(key, "-")
	if !ok || strings.Contains(key, ".") {
		return ""
	}
	return fam
}

func (r *Repo) treeOf(ctx context.Context, commit string) (string, error) {
	tree, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "--end-of-options", commit+"^{tree}")
	if err != nil {
		return "", fmt.Errorf("reading the tree of %.10s: %w", commit, err)
	}
	return tree, nil
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
	tree, err := r.treeOf(ctx, commit)
	if err != nil {
		return err
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
	args := append(append(append(r.noFilters(ctx, r.CommonDir), parallelCheckout...), fullCheckout...), "read-tree", "--reset", "-u", tree)
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
		args := append(append(r.noFilters(ctx, r.CommonDir), fullCheckout...), "update-index", "-q", "--refresh")
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
	touchTaken(claimed)
	defer func() { _ = hostfs.RemoveTree(claimed) }()
	b, err := os.ReadFile(filepath.Join(claimed, spareTree))
	if err != nil {
		return fmt.Errorf("reading a spare checkout: %w", err)
	}
	want, err := r.worktreeTree(ctx, w)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) != want {
		return fmt.Errorf("the spare checkout holds tree %.10s, the worktree is at %.10s", b, want)
	}
	return installSpare(w, claimed)
}

// ClaimOtherSpare gives w a spare checkout of the family (SpareFamily) in
// sparesDir that holds another tree, brought to w's tree first by
// RetargetSpare's two-tree update: its cost follows the difference between
// the two commits, not the size of the tree. own, when not nil, is called
// for every path the update wrote (relative to root, the spare's files), to
// hand it to the worktree's owner. It returns ErrNoSpare when the family
// has no spare; on another error the worktree holds no file from it.
func (r *Repo) ClaimOtherSpare(ctx context.Context, w *Worktree, sparesDir, family string, own func(root, rel string) error) error {
	ctx = noCancel(ctx)
	if !r.ownsAdminDir(w.GitDir) {
		return fmt.Errorf("worktree admin directory %q is not inside %s", w.GitDir, r.CommonDir)
	}
	if ents, err := os.ReadDir(w.Path); err != nil || len(ents) != 0 {
		return fmt.Errorf("the worktree %s is not empty: no spare checkout moved into it (%v)", w.Path, err)
	}
	want, err := r.worktreeTree(ctx, w)
	if err != nil {
		return err
	}
	claimed, err := takeSpare(sparesDir, family, "claimed-"+filepath.Base(w.Path))
	if err != nil {
		return err
	}
	defer func() { _ = hostfs.RemoveTree(claimed) }()
	if err := r.retarget(ctx, claimed, want, own); err != nil {
		return err
	}
	return installSpare(w, claimed)
}

// RetargetSpare makes the spare checkout of commit for the family ahead of
// time from another spare of the family (taken, so no worktree can claim
// it halfway, updated, and renamed to the key of commit): after a merge, the
// next task on the new tip then starts as if the spare had been made for
// it. It returns ErrNoSpare when the family has no other spare, and nil
// when the spare of commit exists already.
func (r *Repo) RetargetSpare(ctx context.Context, sparesDir, family, commit string, own func(root, rel string) error) error {
	ctx = noCancel(ctx)
	tree, err := r.treeOf(ctx, commit)
	if err != nil {
		return err
	}
	dir := filepath.Join(sparesDir, family+"-"+tree)
	if _, err := os.Lstat(dir); err == nil {
		return nil
	}
	taken, err := takeSpare(sparesDir, family, fmt.Sprintf("retarget-%d", os.Getpid()))
	if err != nil {
		return err
	}
	if err := r.retarget(ctx, taken, tree, own); err != nil {
		_ = hostfs.RemoveTree(taken)
		return err
	}
	if err := os.Rename(taken, dir); err != nil {
		_ = hostfs.RemoveTree(taken)
		if _, serr := os.Lstat(dir); serr == nil {
			return nil
		}
		return err
	}
	return nil
}

// takeSpare takes one complete spare of family from sparesDir (the most
// recently made first) by renaming it to its name plus "." plus suffix; a
// name with a dot is never taken again.
func takeSpare(sparesDir, family, suffix string) (string, error) {
	ents, err := os.ReadDir(sparesDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", ErrNoSpare
		}
		return "", err
	}
	type cand struct {
		name string
		mod  int64
	}
	var cands []cand
	for _, e := range ents {
		if SpareFamilyOf(e.Name()) != family || family == "" {
			continue
		}
		if fi, err := e.Info(); err == nil {
			cands = append(cands, cand{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.mod, a.mod) })
	for _, c := range cands {
		from := filepath.Join(sparesDir, c.name)
		to := from + "." + suffix
		if err := os.Rename(from, to); err == nil {
			touchTaken(to)
			return to, nil
		}
	}
	return "", ErrNoSpare
}

// retarget brings the spare at dir (taken: no one else can see it, and it
// was never mounted into a sandbox) to tree with a two-tree read-tree,
// which writes only the paths that differ, then hands those paths over.
// The spare's files were chowned after git recorded their stat data, so
// the update compares size and mtime only (core.checkStat=minimal): a
// change of owner is not a change of content, and nothing but host git
// ever wrote these files.
func (r *Repo) retarget(ctx context.Context, dir, tree string, own func(root, rel string) error) error {
	b, err := os.ReadFile(filepath.Join(dir, spareTree))
	if err != nil {
		return fmt.Errorf("reading a spare checkout: %w", err)
	}
	old := strings.TrimSpace(string(b))
	if old == tree {
		return nil
	}
	files := filepath.Join(dir, spareFiles)
	// Which paths the update writes: every one that is not deleted, with
	// submodules (gitlinks) listed as well (the hardening hides them from
	// diffs otherwise). Read before the update, which is judged by them.
	out, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, args: []string{"diff-tree", "-r", "-z", "--no-renames", "--ignore-submodules=none", "--name-status", old, tree}})
	if err != nil {
		return fmt.Errorf("comparing a spare checkout's tree with %.10s: %w", tree, err)
	}
	var written []string
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] != "D" {
			written = append(written, fields[i+1])
		}
	}
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(dir, spareIndex)}
	args := append(append(append(r.noFilters(ctx, r.CommonDir), parallelCheckout...), fullCheckout...), "-c", "core.checkStat=minimal", "read-tree", "-m", "-u", old, tree)
	if _, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, workTree: files, args: args, env: env}); err != nil {
		return fmt.Errorf("updating a spare checkout to %.10s: %w", tree, err)
	}
	if own != nil {
		for _, p := range written {
			if err := own(files, p); err != nil {
				return fmt.Errorf("handing over a spare checkout's updated files: %w", err)
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, spareTree), []byte(tree+"\n"), 0o600)
}

// worktreeTree is the tree of w's HEAD.
func (r *Repo) worktreeTree(ctx context.Context, w *Worktree) (string, error) {
	want, err := r.g.out(ctx, w.GitDir, "", "rev-parse", "--verify", "HEAD^{tree}")
	if err != nil {
		return "", fmt.Errorf("reading the worktree's tree: %w", err)
	}
	return want, nil
}

// installSpare moves the files of the taken spare at claimed into w and
// makes its index w's.
func installSpare(w *Worktree, claimed string) error {
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

// touchTaken dates a spare just taken (renamed) to now: a rename keeps the
// directory's old mtime, and gc takes a dotted spare older than a few
// minutes for the leftover of a killed process.
func touchTaken(dir string) {
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
}
