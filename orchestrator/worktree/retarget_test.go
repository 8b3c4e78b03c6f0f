package worktree

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/localagent/agent/sandbox/hostfs"
)

// treeEntry is one line of `git ls-tree -r`.
type treeEntry struct{ mode, typ, oid string }

func lsTree(t *testing.T, dir, commit string) map[string]treeEntry {
	t.Helper()
	out := plainGit(t, dir, "ls-tree", "-r", "-z", "--full-tree", commit)
	m := map[string]treeEntry{}
	for _, rec := range strings.Split(out, "\x00") {
		if rec == "" {
			continue
		}
		meta, path, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			t.Fatalf("ls-tree line %q", rec)
		}
		m[path] = treeEntry{f[0], f[1], f[2]}
	}
	return m
}

// assertCheckoutOf fails unless the directory root holds exactly the tree
// of commit as `git ls-tree -r` lists it: every file with its bytes and
// mode, every symlink with its target, every submodule as an empty
// directory, and nothing else (no ignored or stray file, no empty
// directory of its own); and, when uid >= 0, everything owned by uid:gid.
func assertCheckoutOf(t *testing.T, repoDir, root, commit string, uid, gid int) {
	t.Helper()
	want := lsTree(t, repoDir, commit)
	seen := map[string]bool{}
	dirs := map[string]bool{}
	for p := range want {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if uid >= 0 && (int(st.Uid) != uid || int(st.Gid) != gid) {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		e, ok := want[rel]
		if !ok {
			if d.IsDir() && dirs[rel] {
				return nil
			}
			t.Errorf("%s is in the checkout but not in the tree", rel)
			return nil
		}
		seen[rel] = true
		fi, _ := d.Info()
		switch e.mode {
		case "100644", "100755":
			if !fi.Mode().IsRegular() {
				t.Errorf("%s is %v, want a regular file", rel, fi.Mode())
				return nil
			}
			if exec := fi.Mode().Perm()&0o100 != 0; exec != (e.mode == "100755") {
				t.Errorf("%s mode %v, tree says %s", rel, fi.Mode(), e.mode)
			}
			b, _ := os.ReadFile(p)
			if blob := plainGitRaw(t, repoDir, "cat-file", "blob", e.oid); string(b) != blob {
				t.Errorf("%s holds %q, tree says %q", rel, b, blob)
			}
		case "120000":
			l, err := os.Readlink(p)
			if err != nil {
				t.Errorf("%s is not a symlink: %v", rel, err)
				return nil
			}
			if blob := plainGitRaw(t, repoDir, "cat-file", "blob", e.oid); l != blob {
				t.Errorf("%s -> %q, tree says %q", rel, l, blob)
			}
		case "160000":
			if !d.IsDir() {
				t.Errorf("submodule %s is %v, want an empty directory", rel, fi.Mode())
				return nil
			}
			if ents, _ := os.ReadDir(p); len(ents) != 0 {
				t.Errorf("submodule %s holds %d entries, want none", rel, len(ents))
			}
			return fs.SkipDir
		default:
			t.Errorf("%s: unexpected mode %s", rel, e.mode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range want {
		if !seen[p] {
			t.Errorf("%s is in the tree but not in the checkout", p)
		}
	}
}

// plainGitRaw is plainGit without trimming the output.
func plainGitRaw(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(b)
}

// twoCommits makes a repository whose second commit changes the first in
// every way a two-tree update must get right: modified, added (in new
// directories), deleted, executable bit, file <-> symlink, directory <->
// file, a submodule (gitlink) added and one removed, an LFS pointer under
// a filter that must not run, and an ignored file in the user's checkout.
func twoCommits(t *testing.T) (dir, first, second string) {
	t.Helper()
	dir = newRepo(t)
	plainGit(t, dir, "config", "filter.lfs.smudge", "tr a-z A-Z")
	plainGit(t, dir, "config", "filter.lfs.clean", "cat")
	write(t, filepath.Join(dir, ".gitattributes"), "*.bin filter=lfs diff=lfs merge=lfs -text\n")
	write(t, filepath.Join(dir, ".gitignore"), "*.log\n")
	write(t, filepath.Join(dir, "big.bin"), "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n")
	write(t, filepath.Join(dir, "keep/same.txt"), "same\n")
	write(t, filepath.Join(dir, "mod.txt"), "before\n")
	write(t, filepath.Join(dir, "gone/old.txt"), "old\n")
	write(t, filepath.Join(dir, "tool.sh"), "#!/bin/sh\n")
	write(t, filepath.Join(dir, "becomes-link"), "file\n")
	write(t, filepath.Join(dir, "dir-to-file/inner.txt"), "inner\n")
	write(t, filepath.Join(dir, "file-to-dir"), "flat\n")
	write(t, filepath.Join(dir, "debug.log"), "ignored, in the user's checkout only\n")
	if err := os.Symlink("keep/same.txt", filepath.Join(dir, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	plainGit(t, dir, "add", "-A")
	plainGit(t, dir, "commit", "-q", "-m", "first")
	first = plainGit(t, dir, "rev-parse", "HEAD")
	plainGit(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+first+",oldsub")
	plainGit(t, dir, "commit", "-q", "-m", "with a submodule")
	first = plainGit(t, dir, "rev-parse", "HEAD")

	write(t, filepath.Join(dir, "mod.txt"), "after\n")
	write(t, filepath.Join(dir, "new/deep/er/added.txt"), "added\n")
	plainGit(t, dir, "rm", "-q", "-r", "gone", "dir-to-file", "file-to-dir", "becomes-link", "link-to-file")
	plainGit(t, dir, "rm", "-q", "--cached", "oldsub")
	write(t, filepath.Join(dir, "dir-to-file"), "now a file\n")
	write(t, filepath.Join(dir, "file-to-dir/x.txt"), "now a dir\n")
	if err := os.Symlink("mod.txt", filepath.Join(dir, "becomes-link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "link-to-file"), "now a file\n")
	if err := os.Chmod(filepath.Join(dir, "tool.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	plainGit(t, dir, "add", "-A")
	plainGit(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+first+",vendor/sub")
	plainGit(t, dir, "commit", "-q", "-m", "second")
	second = plainGit(t, dir, "rev-parse", "HEAD")
	return dir, first, second
}

// A spare of one commit, brought to another by the two-tree update, holds
// exactly what a checkout of that other commit holds, owned as a spare
// made for it would be, and commits nothing but the agent's change.
func TestOtherSpareRetargetedEqualsCheckout(t *testing.T) {
	ctx := context.Background()
	dir, first, second := twoCommits(t)
	r := openRepo(t, dir)
	uid, gid := os.Getuid(), os.Getgid()
	var own func(root, rel string) error
	if os.Geteuid() == 0 {
		uid, gid = 65534, 65534
		own = func(root, rel string) error { return hostfs.LchownChain(root, rel, uid, gid) }
	}
	spares := t.TempDir()
	key, err := r.SpareKey(ctx, first, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	chown := func(root string) error {
		if own == nil {
			return nil
		}
		return hostfs.ChownTree(root, uid, gid)
	}
	if err := r.MakeSpare(ctx, filepath.Join(spares, key), first, chown); err != nil {
		t.Fatal(err)
	}
	// The spare itself is a checkout of the first commit.
	assertCheckoutOf(t, dir, filepath.Join(spares, key, spareFiles), first, uid, gid)
	// A spare of another family (another owner) is never taken.
	w0, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "w0"), Branch: "agent/w0", Start: second, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ClaimOtherSpare(ctx, w0, spares, r.SpareFamily(ctx, 4242, 4242), own); !errors.Is(err, ErrNoSpare) {
		t.Fatalf("claim with another owner's family: %v, want ErrNoSpare", err)
	}

	w, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "w"), Branch: "agent/w", Start: second, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ClaimOtherSpare(ctx, w, spares, SpareFamilyOf(key), own); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(spares); len(ents) != 0 {
		t.Fatalf("the claimed spare left %d entries", len(ents))
	}
	if own != nil {
		if err := os.Lchown(w.Path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	assertCheckoutOf(t, dir, w.Path, second, uid, gid)
	// The index is the second commit's, and the worktree is clean.
	if got, want := plainGit(t, dir, "--git-dir="+w.GitDir, "ls-files", "-s"), plainGit(t, dir, "ls-tree", "-r", "--format=%(objectmode) %(objectname) 0\t%(path)", second); got != want {
		t.Fatalf("index after the update:\n%s\nwant:\n%s", got, want)
	}
	if ch, err := r.Changes(ctx, w); err != nil || len(ch) != 0 {
		t.Fatalf("retargeted worktree not clean: %v %v", ch, err)
	}
	// A plain checkout of the second commit holds the same.
	w2, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "w2"), Branch: "agent/w2", Start: second, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Populate(ctx, w2); err != nil {
		t.Fatal(err)
	}
	assertCheckoutOf(t, dir, w2.Path, second, -1, -1)
	// What gets committed is the agent's change alone.
	write(t, filepath.Join(w.Path, "mod.txt"), "agent\n")
	tip, err := r.CommitAll(ctx, w, "change")
	if err != nil || tip == "" {
		t.Fatalf("commit: %q %v", tip, err)
	}
	if names := plainGit(t, dir, "diff", "--name-only", second, tip); names != "mod.txt" {
		t.Fatalf("commit changed %q, want mod.txt", names)
	}
}

// A spare brought ahead of time to a new commit (after a merge) is the
// spare of that commit: claimed as such, it is a checkout of it. Brought
// back again, the update still applies (the owners the first update gave
// do not make git take the files for changed).
func TestRetargetSpareAheadAndBack(t *testing.T) {
	ctx := context.Background()
	dir, first, second := twoCommits(t)
	r := openRepo(t, dir)
	uid, gid := os.Getuid(), os.Getgid()
	var own func(root, rel string) error
	var chown func(string) error
	if os.Geteuid() == 0 {
		uid, gid = 65534, 65534
		own = func(root, rel string) error { return hostfs.LchownChain(root, rel, uid, gid) }
		chown = func(root string) error { return hostfs.ChownTree(root, uid, gid) }
	}
	spares := t.TempDir()
	k1, _ := r.SpareKey(ctx, first, uid, gid)
	k2, _ := r.SpareKey(ctx, second, uid, gid)
	fam := SpareFamilyOf(k1)
	if err := r.MakeSpare(ctx, filepath.Join(spares, k1), first, chown); err != nil {
		t.Fatal(err)
	}
	if err := r.RetargetSpare(ctx, spares, fam, second, own); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(spares, k2)); err != nil {
		t.Fatalf("no spare of the second commit after retargeting: %v", err)
	}
	assertCheckoutOf(t, dir, filepath.Join(spares, k2, spareFiles), second, uid, gid)
	// Its spare exists: nothing more to do.
	if err := r.RetargetSpare(ctx, spares, fam, second, own); err != nil {
		t.Fatal(err)
	}
	if err := r.RetargetSpare(ctx, spares, fam, first, own); err != nil {
		t.Fatal(err)
	}
	assertCheckoutOf(t, dir, filepath.Join(spares, k1, spareFiles), first, uid, gid)
	if ents, _ := os.ReadDir(spares); len(ents) != 1 {
		t.Fatalf("%d entries in the spares directory, want 1", len(ents))
	}
	w, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "w"), Branch: "agent/w", Start: first, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ClaimSpare(ctx, w, filepath.Join(spares, k1)); err != nil {
		t.Fatal(err)
	}
	if ch, err := r.Changes(ctx, w); err != nil || len(ch) != 0 {
		t.Fatalf("worktree not clean: %v %v", ch, err)
	}
	// The family is empty now.
	if err := r.RetargetSpare(ctx, spares, fam, second, own); !errors.Is(err, ErrNoSpare) {
		t.Fatalf("retarget with no spare: %v, want ErrNoSpare", err)
	}
}

// Host git and the hand-over on a spare never follow a symlink: a spare
// whose tree has links to a directory and a file outside it, brought to a
// tree where those names are a directory with files and a file, writes
// and chowns inside the spare only, and back again.
func TestRetargetNeverFollowsSymlinks(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim.txt")
	write(t, victim, "host file\n")
	if err := os.Symlink(outside, filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "f")); err != nil {
		t.Fatal(err)
	}
	plainGit(t, dir, "add", "-A")
	plainGit(t, dir, "commit", "-q", "-m", "links")
	links := plainGit(t, dir, "rev-parse", "HEAD")
	plainGit(t, dir, "rm", "-q", "d", "f")
	write(t, filepath.Join(dir, "d", "victim.txt"), "written by the update\n")
	write(t, filepath.Join(dir, "d", "x", "y.txt"), "deeper\n")
	write(t, filepath.Join(dir, "f"), "a file now\n")
	plainGit(t, dir, "add", "-A")
	plainGit(t, dir, "commit", "-q", "-m", "files")
	files := plainGit(t, dir, "rev-parse", "HEAD")
	r := openRepo(t, dir)

	uid, gid := os.Getuid(), os.Getgid()
	// Every hand-over is recorded; as root it also changes owners.
	var handed []string
	own := func(root, rel string) error {
		handed = append(handed, rel)
		if os.Geteuid() != 0 {
			return nil
		}
		return hostfs.LchownChain(root, rel, 65534, 65534)
	}
	if os.Geteuid() == 0 {
		uid, gid = 65534, 65534
	}
	before := func() (int, int) {
		var st syscall.Stat_t
		if err := syscall.Lstat(victim, &st); err != nil {
			t.Fatal(err)
		}
		return int(st.Uid), int(st.Gid)
	}
	vu, vg := before()
	spares := t.TempDir()
	key, _ := r.SpareKey(ctx, links, uid, gid)
	if err := r.MakeSpare(ctx, filepath.Join(spares, key), links, nil); err != nil {
		t.Fatal(err)
	}
	check := func(commit string) {
		t.Helper()
		if b, _ := os.ReadFile(victim); string(b) != "host file\n" {
			t.Fatalf("the file behind the link was written: %q", b)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("the directory behind the link holds %d entries, want 1", len(ents))
		}
		if u, g := before(); u != vu || g != vg {
			t.Fatalf("the file behind the link changed owner to %d:%d", u, g)
		}
		k, _ := r.SpareKey(ctx, commit, uid, gid)
		assertCheckoutOf(t, dir, filepath.Join(spares, k, spareFiles), commit, -1, -1)
	}
	fam := SpareFamilyOf(key)
	if err := r.RetargetSpare(ctx, spares, fam, files, own); err != nil {
		t.Fatal(err)
	}
	check(files)
	if len(handed) == 0 {
		t.Fatal("nothing was handed over")
	}
	if err := r.RetargetSpare(ctx, spares, fam, links, own); err != nil {
		t.Fatal(err)
	}
	check(links)
}
