package orchestrator

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/environment"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
)

// IncludeFile is where a repository proposes untracked files to copy into
// task worktrees; the user approves patterns with env.include.
const IncludeFile = ".agent/include"

// Bounds on what is copied from the user's checkout.
const (
	maxIncludeFiles = 200
	maxIncludeFile  = 1 << 20
	maxIncludeTotal = 16 << 20
)

// populateExtras fills what a plain checkout of the task's commit leaves
// out: submodules (from the repository's own objects, never fetched) and
// the untracked files the user approved. It runs right after the checkout,
// before the sandbox runs anything.
func (o *Orchestrator) populateExtras(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task) error {
	return o.fillExtras(ctx, repo, wt, t, o.listExtras(ctx, repo, wt, t))
}

// extras are a new worktree's submodules and LFS files (listed once: on a
// big repository each listing reads the whole index).
type extras struct {
	subs []worktree.Submodule
	lfs  []worktree.LFSFile
	err  error
}

func (o *Orchestrator) listExtras(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task) extras {
	subs, lfs, err := repo.Extras(ctx, wt, t.StartCommit)
	return extras{subs: subs, lfs: lfs, err: err}
}

// fillExtras is populateExtras with the lists made.
func (o *Orchestrator) fillExtras(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task, ex extras) error {
	if ex.err != nil {
		return ex.err
	}
	if err := o.populateSubmodules(ctx, repo, wt, t, ex.subs); err != nil {
		return err
	}
	if err := o.populateLFS(ctx, repo, wt, t, ex.lfs); err != nil {
		return err
	}
	return o.copyIncludes(ctx, repo, wt, t)
}

// maxLFSTotal bounds the LFS contents copied into one worktree.
const maxLFSTotal = 16 << 30

// populateLFS replaces the LFS pointers of the worktree by their contents
// where the user's repository has the objects (nothing is fetched), and
// marks them unchanged in the worktree's index so that the task's commit
// keeps the pointers.
func (o *Orchestrator) populateLFS(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task, files []worktree.LFSFile) error {
	if len(files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(wt.Path)
	if err != nil {
		return err
	}
	defer root.Close()
	var done []string
	var total int64
	for _, f := range files {
		if total += f.Size; total > maxLFSTotal {
			o.emit(t, event.Notice, fmt.Sprintf("LFS: stopped after %d files (more than %d bytes)", len(done), int64(maxLFSTotal)))
			break
		}
		if err := copyLFS(root, f); err != nil {
			return fmt.Errorf("LFS file %s: %w", f.Path, err)
		}
		done = append(done, f.Path)
	}
	if len(done) == 0 {
		return nil
	}
	if err := repo.AssumeUnchanged(ctx, wt, done); err != nil {
		return err
	}
	o.emit(t, event.Notice, fmt.Sprintf("LFS: %d file(s) materialised from your repository's LFS objects (changes the agent makes to them are not committed)", len(done)))
	return nil
}

func copyLFS(root *os.Root, f worktree.LFSFile) error {
	in, err := os.OpenFile(f.Object, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := root.Lstat(f.Path)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("the checked-out pointer is not a regular file")
	}
	out, err := root.OpenFile(f.Path, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.LimitReader(in, f.Size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func (o *Orchestrator) populateSubmodules(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task, subs []worktree.Submodule) error {
	if len(subs) == 0 {
		return nil
	}
	root, err := os.OpenRoot(wt.Path)
	if err != nil {
		return err
	}
	defer root.Close()
	var filled, missing []string
	for _, s := range subs {
		if !s.Present {
			missing = append(missing, s.Path)
			continue
		}
		if err := root.MkdirAll(s.Path, 0o755); err != nil {
			return fmt.Errorf("submodule %s: %w", s.Path, err)
		}
		sub, err := root.OpenRoot(s.Path)
		if err != nil {
			return fmt.Errorf("submodule %s: %w", s.Path, err)
		}
		pr, pw := io.Pipe()
		errc := make(chan error, 1)
		go func() {
			err := repo.ArchiveSubmodule(ctx, s, pw)
			pw.CloseWithError(err)
			errc <- err
		}()
		err = environment.ExtractTarRoot(pr, sub, 4<<30, 500_000)
		pr.CloseWithError(io.ErrClosedPipe)
		aerr := <-errc
		sub.Close()
		if err == nil && aerr != nil && !errors.Is(aerr, io.ErrClosedPipe) {
			err = aerr
		}
		if err != nil {
			return fmt.Errorf("submodule %s: %w", s.Path, err)
		}
		filled = append(filled, s.Path)
	}
	if len(filled) > 0 {
		o.emit(t, event.Notice, fmt.Sprintf("submodules checked out from your repository's objects: %s (changes the agent makes inside them are committed in the submodule's own repository, on the task's branch name)", strings.Join(filled, ", ")))
	}
	if len(missing) > 0 {
		o.emit(t, event.Notice, fmt.Sprintf("submodules left empty (your repository has not cloned them; nothing is fetched): %s — run `git submodule update --init` in your checkout", strings.Join(missing, ", ")))
	}
	return nil
}

// copyIncludes copies the untracked files that the user's env.include
// patterns match from the user's checkout into the worktree: regular files
// only (never a symlink, read without following one), never over a file
// the checkout wrote, with bounds on count and size.
func (o *Orchestrator) copyIncludes(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, t *store.Task) error {
	approved := o.opts.Environment.Include
	if data, found, err := repo.ReadFile(ctx, t.StartCommit, IncludeFile, 64<<10); err == nil && found {
		var unapproved []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			p := strings.TrimSpace(sc.Text())
			if p != "" && !strings.HasPrefix(p, "#") && !slices.Contains(approved, p) {
				unapproved = append(unapproved, p)
			}
		}
		if len(unapproved) > 0 {
			o.emit(t, event.Notice, fmt.Sprintf("%s asks to copy untracked files matching %s; not copied until you approve them in env.include in your config", IncludeFile, strings.Join(unapproved, ", ")))
		}
	}
	if len(approved) == 0 {
		return nil
	}
	src, err := os.OpenRoot(repo.Root)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenRoot(wt.Path)
	if err != nil {
		return err
	}
	defer dst.Close()
	var copied []string
	var total int64
	for _, pat := range approved {
		if _, err := path.Match(pat, ""); err != nil || strings.HasPrefix(pat, "/") || strings.Contains(pat, "..") {
			o.emit(t, event.Notice, fmt.Sprintf("env.include: ignoring %q (a relative glob inside the checkout)", pat))
			continue
		}
		matches, _ := fs.Glob(src.FS(), pat)
		for _, m := range matches {
			if len(copied) >= maxIncludeFiles {
				break
			}
			if m == ".git" || strings.HasPrefix(m, ".git/") || strings.Contains(m, "/.git/") {
				continue
			}
			n, err := copyOne(src, dst, m, maxIncludeTotal-total)
			if err != nil {
				o.emit(t, event.Notice, fmt.Sprintf("env.include: not copying %s: %v", m, err))
				continue
			}
			if n >= 0 {
				total += n
				copied = append(copied, m)
			}
		}
	}
	if len(copied) > 0 {
		o.emit(t, event.Notice, fmt.Sprintf("copied %d untracked file(s) from your checkout (env.include): %s; unless your .gitignore excludes them they are committed with the task's changes", len(copied), strings.Join(copied, ", ")))
	}
	return nil
}

// copyOne copies one regular file; -1 when it was skipped (not a regular
// file, or already in the worktree).
func copyOne(src, dst *os.Root, name string, budget int64) (int64, error) {
	fi, err := src.Lstat(name)
	if err != nil || !fi.Mode().IsRegular() {
		return -1, nil
	}
	if fi.Size() > maxIncludeFile || fi.Size() > budget {
		return -1, fmt.Errorf("larger than %d bytes", min(int64(maxIncludeFile), budget))
	}
	in, err := src.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return -1, nil
	}
	if d := path.Dir(name); d != "." {
		if err := dst.MkdirAll(d, 0o755); err != nil {
			return -1, err
		}
	}
	out, err := dst.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, fi.Mode().Perm()&0o755|0o600)
	if errors.Is(err, fs.ErrExist) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	n, err := io.Copy(out, io.LimitReader(in, maxIncludeFile))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
