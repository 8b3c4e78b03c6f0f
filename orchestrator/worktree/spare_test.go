package worktree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestSpareCheckoutClaimedOnceAndClean(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	write(t, filepath.Join(dir, "sub", "deep", "b.txt"), "bee\n")
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "more")
	r := openRepo(t, dir)
	base, _ := r.ResolveBase(ctx, "")
	key, err := r.SpareKey(ctx, base.Commit, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	spares := t.TempDir()
	spare := filepath.Join(spares, key)
	chowned := ""
	if err := r.MakeSpare(ctx, spare, base.Commit, func(root string) error { chowned = root; return nil }); err != nil {
		t.Fatal(err)
	}
	if chowned == "" {
		t.Fatal("the spare's files were not handed to the owner")
	}
	if ents, _ := os.ReadDir(spares); len(ents) != 1 {
		t.Fatalf("spare directory holds %d entries, want the spare alone", len(ents))
	}

	parent := t.TempDir()
	add := func(name string) *Worktree {
		w, err := r.Add(ctx, AddOptions{Path: filepath.Join(parent, name), Branch: "agent/" + name, Start: base.Commit, NoCheckout: true})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w1, w2 := add("one"), add("two")
	// A sandbox being created meanwhile may have bind-mounted the
	// worktree directory already: the files must land in that directory,
	// not in a new one put in its place.
	var before, after syscall.Stat_t
	if err := syscall.Stat(w1.Path, &before); err != nil {
		t.Fatal(err)
	}
	if err := r.ClaimSpare(ctx, w1, spare); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(w1.Path, &after); err != nil {
		t.Fatal(err)
	}
	if before.Ino != after.Ino {
		t.Fatalf("the worktree directory was replaced (inode %d -> %d): a sandbox that mounted it would see it empty", before.Ino, after.Ino)
	}
	// A spare goes to one worktree only.
	if err := r.ClaimSpare(ctx, w2, spare); !errors.Is(err, ErrNoSpare) {
		t.Fatalf("second claim of one spare: %v, want ErrNoSpare", err)
	}
	if ents, _ := os.ReadDir(spares); len(ents) != 0 {
		t.Fatalf("claimed spare left %d entries behind", len(ents))
	}
	for _, f := range []struct{ path, want string }{{"a.txt", "one\ntwo\nthree\n"}, {"sub/deep/b.txt", "bee\n"}} {
		if b, _ := os.ReadFile(filepath.Join(w1.Path, f.path)); string(b) != f.want {
			t.Fatalf("%s = %q, want %q", f.path, b, f.want)
		}
	}
	if l, _ := os.Readlink(filepath.Join(w1.Path, "link")); l != "a.txt" {
		t.Fatalf("link points to %q", l)
	}
	if ch, err := r.Changes(ctx, w1); err != nil || len(ch) != 0 {
		t.Fatalf("worktree from a spare is not clean: %v %v", ch, err)
	}
	// What gets committed is exactly the agent's change.
	write(t, filepath.Join(w1.Path, "a.txt"), "changed\n")
	tip, err := r.CommitAll(ctx, w1, "change")
	if err != nil || tip == "" {
		t.Fatalf("commit: %q %v", tip, err)
	}
	if names := plainGit(t, dir, "diff", "--name-only", base.Commit, tip); names != "a.txt" {
		t.Fatalf("commit from a spare-based worktree changed %q, want a.txt", names)
	}
	// The other worktree is populated the ordinary way and ends up the same.
	if err := r.Populate(ctx, w2); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(w2.Path, "sub", "deep", "b.txt")); string(b) != "bee\n" {
		t.Fatalf("b.txt = %q", b)
	}
}

func TestSpareOfAnotherTreeRefused(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	old, _ := r.ResolveBase(ctx, "")
	write(t, filepath.Join(dir, "new.txt"), "new\n")
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "new")
	cur, _ := r.ResolveBase(ctx, "")
	spare := filepath.Join(t.TempDir(), "s")
	if err := r.MakeSpare(ctx, spare, old.Commit, nil); err != nil {
		t.Fatal(err)
	}
	w, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "w"), Branch: "agent/w", Start: cur.Commit, NoCheckout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ClaimSpare(ctx, w, spare); err == nil || !strings.Contains(err.Error(), "tree") {
		t.Fatalf("claiming a spare of another tree: %v", err)
	}
	if ents, _ := os.ReadDir(w.Path); len(ents) != 0 {
		t.Fatalf("a refused spare left files in the worktree: %v", ents)
	}
}

func TestSpareKeyCoversOwnerAndConfig(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := openRepo(t, dir)
	base, _ := r.ResolveBase(ctx, "")
	k1, _ := r.SpareKey(ctx, base.Commit, 1000, 1000)
	k2, _ := r.SpareKey(ctx, base.Commit, 65534, 65534)
	plainGit(t, dir, "config", "core.autocrlf", "true")
	k3, _ := r.SpareKey(ctx, base.Commit, 1000, 1000)
	if k1 == "" || k1 == k2 || k1 == k3 {
		t.Fatalf("keys do not tell owner or configuration apart: %s %s %s", k1, k2, k3)
	}
}
