package worktree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// historyView is everything a history exposes to the sandbox's git: every
// object in its store (whether reachable or not), its refs and HEAD.
func historyView(t *testing.T, dir string) string {
	t.Helper()
	objs := plainGit(t, "/", "--git-dir="+dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
	refs := plainGit(t, "/", "--git-dir="+dir, "for-each-ref", "--format=%(refname) %(objectname)")
	head := plainGit(t, "/", "--git-dir="+dir, "symbolic-ref", "HEAD")
	// Complete: every object reachable from the refs is there.
	plainGit(t, "/", "--git-dir="+dir, "fsck", "--connectivity-only", "--no-dangling")
	return objs + "\n--\n" + refs + "\n--\n" + head
}

// historyRepo makes a repository with what a history must never show: a
// private branch, an annotated tag of a private commit, a stash, a note and
// a commit only the reflog still names; plus a symlink, an executable and
// a submodule entry on main.
func historyRepo(t *testing.T) (dir, secret string) {
	t.Helper()
	dir = newRepo(t)
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+plainGit(t, dir, "rev-parse", "HEAD")+",sub")
	plainGit(t, dir, "commit", "-q", "-m", "modes")

	plainGit(t, dir, "checkout", "-q", "-b", "private")
	write(t, filepath.Join(dir, "secret.txt"), "private\n")
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "private work")
	secret = plainGit(t, dir, "rev-parse", "HEAD")
	write(t, filepath.Join(dir, "tagged.txt"), "tagged only\n")
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "tagged work")
	plainGit(t, dir, "tag", "-a", "-m", "a tag", "v-private")
	plainGit(t, dir, "reset", "-q", "--hard", "HEAD~1")
	plainGit(t, dir, "checkout", "-q", "main")

	write(t, filepath.Join(dir, "a.txt"), "stashed change\n")
	plainGit(t, dir, "stash", "-q")
	plainGit(t, dir, "notes", "add", "-m", "a note", "HEAD")
	write(t, filepath.Join(dir, "gone.txt"), "reflog only\n")
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "undone")
	plainGit(t, dir, "reset", "-q", "--hard", "HEAD~1")
	return dir, secret
}

func commitOn(t *testing.T, dir, file, content string) string {
	t.Helper()
	write(t, filepath.Join(dir, file), content)
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "change "+file)
	return plainGit(t, dir, "rev-parse", "HEAD")
}

// TestExportHistorySharedEqualsExport: whatever sequence of bases the
// store sees (the same, newer, older, another branch's, back again), a
// history built from shared packs exposes exactly what ExportHistory
// exposes, and the base's packs are shared (the same file), not copied.
func TestExportHistorySharedEqualsExport(t *testing.T) {
	ctx := context.Background()
	dir, secret := historyRepo(t)
	r := openRepo(t, dir)
	tmp := t.TempDir()
	store := filepath.Join(tmp, "store")
	n := 0
	check := func(step, base, head string) string {
		t.Helper()
		n++
		want := filepath.Join(tmp, "want", step)
		got := filepath.Join(tmp, "got", step)
		if err := r.ExportHistory(ctx, want, base, head); err != nil {
			t.Fatal(err)
		}
		if err := r.ExportHistoryShared(ctx, store, got, base, head); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if w, g := historyView(t, want), historyView(t, got); w != g {
			t.Fatalf("%s: shared history differs from the export:\n got %s\nwant %s", step, g, w)
		}
		if base != "private" && strings.Contains(historyView(t, got), secret) {
			t.Fatalf("%s: a private commit is in the history", step)
		}
		return got
	}
	main := plainGit(t, dir, "rev-parse", "main")
	first := check("start", "main", "main")
	task := committedTask(t, r, "t1", "b.txt", "task file\n")
	tip, err := r.BranchTip(ctx, task.Branch)
	if err != nil {
		t.Fatal(err)
	}
	second := check("task-commit", main, tip)
	// The base's history is the store's pack, linked, in both.
	packs, _ := filepath.Glob(filepath.Join(store, "pack-*.pack"))
	if len(packs) != 1 {
		t.Fatalf("store packs = %v, want one", packs)
	}
	for _, h := range []string{first, second} {
		linked := filepath.Join(h, "objects", "pack", filepath.Base(packs[0]))
		a, err1 := os.Stat(linked)
		b, err2 := os.Stat(packs[0])
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			t.Errorf("%s does not share the store's pack (%v, %v)", h, err1, err2)
		}
	}

	commitOn(t, dir, "c.txt", "c1\n")
	commitOn(t, dir, "a.txt", "changed\n")
	check("newer-base", "main", "main")
	if got := len(readChain(store)); got != 2 {
		t.Errorf("chain after a newer base has %d layers, want 2", got)
	}
	check("older-base", main, "main")
	check("other-branch", "private", "private")
	check("back-to-main", "main", "main")
	if _, err := os.Stat(filepath.Join(tmp, "got", "back-to-main", "objects", "pack")); err != nil {
		t.Fatal(err)
	}
	if err := r.ExportHistoryShared(ctx, store, filepath.Join(tmp, "x"), "-x", "main"); err == nil {
		t.Error("an option-like revision was accepted")
	}
}

// TestExportHistorySharedControl: with the ancestry checks off (a store
// that links whatever layers it holds), the same comparison catches the
// private branch's objects in main's history, so the test above can fail.
func TestExportHistorySharedControl(t *testing.T) {
	ctx := context.Background()
	dir, secret := historyRepo(t)
	r := openRepo(t, dir)
	tmp := t.TempDir()
	store := filepath.Join(tmp, "store")
	trustChain = true
	t.Cleanup(func() { trustChain = false })
	if err := r.ExportHistoryShared(ctx, store, filepath.Join(tmp, "p"), "private", "private"); err != nil {
		t.Fatal(err)
	}
	got, want := filepath.Join(tmp, "got"), filepath.Join(tmp, "want")
	if err := r.ExportHistoryShared(ctx, store, got, "main", "main"); err != nil {
		t.Fatal(err)
	}
	if err := r.ExportHistory(ctx, want, "main", "main"); err != nil {
		t.Fatal(err)
	}
	g, w := historyView(t, got), historyView(t, want)
	if g == w || !strings.Contains(g, secret) {
		t.Fatalf("control: without the ancestry check the private commit should be in main's history\n got %s\nwant %s", g, w)
	}
}

// TestExportHistorySharedConverges: what a writer killed at any step
// leaves (a half-written layer, a pack no chain names, a chain naming a
// pack that is gone) is repaired by the next export, whose history is
// still exactly the export's.
func TestExportHistorySharedConverges(t *testing.T) {
	ctx := context.Background()
	dir, _ := historyRepo(t)
	r := openRepo(t, dir)
	tmp := t.TempDir()
	store := filepath.Join(tmp, "store")
	if err := r.ExportHistoryShared(ctx, store, filepath.Join(tmp, "one"), "main", "main"); err != nil {
		t.Fatal(err)
	}
	orphan := "pack-" + strings.Repeat("0", 40)
	write(t, filepath.Join(store, "tmp-123", "pack.pack"), "half written")
	write(t, filepath.Join(store, orphan+".pack"), "no chain names it")
	chain := readChain(store)
	if len(chain) != 1 {
		t.Fatalf("chain = %v", chain)
	}
	// A kill after the pack went and before the chain did.
	if err := os.Remove(filepath.Join(store, chain[0].pack+".idx")); err != nil {
		t.Fatal(err)
	}
	commitOn(t, dir, "c.txt", "c1\n")
	got, want := filepath.Join(tmp, "got"), filepath.Join(tmp, "want")
	if err := r.ExportHistoryShared(ctx, store, got, "main", "main"); err != nil {
		t.Fatal(err)
	}
	if err := r.ExportHistory(ctx, want, "main", "main"); err != nil {
		t.Fatal(err)
	}
	if g, w := historyView(t, got), historyView(t, want); g != w {
		t.Fatalf("after a killed writer the history differs:\n got %s\nwant %s", g, w)
	}
	for _, name := range []string{"tmp-123", orphan + ".pack", chain[0].pack + ".pack"} {
		if _, err := os.Lstat(filepath.Join(store, name)); err == nil {
			t.Errorf("%s is still in the store", name)
		}
	}
	if c := readChain(store); len(c) != 1 {
		t.Errorf("chain after repair = %v, want one layer", c)
	}
}

// TestCheckBranchNameRemembers: a name git accepted is not asked about
// again; a rejected one is, every time (and still rejected).
func TestCheckBranchNameRemembers(t *testing.T) {
	ctx := context.Background()
	r := openRepo(t, newRepo(t))
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "runs")
	wrapper := filepath.Join(t.TempDir(), "git")
	write(t, wrapper, "#!/bin/sh\necho run >> "+log+"\nexec "+gitPath+" \"$@\"\n")
	if err := os.Chmod(wrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	r.g.bin = wrapper
	runs := func() int {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "run\n")
	}
	for range 3 {
		if err := r.CheckBranchName(ctx, "agent/remember-me"); err != nil {
			t.Fatal(err)
		}
	}
	if n := runs(); n != 1 {
		t.Errorf("a valid name took %d git runs for three checks, want 1", n)
	}
	for range 2 {
		if err := r.CheckBranchName(ctx, "agent/bad..name-again"); err == nil {
			t.Error("invalid branch name accepted")
		}
	}
	if n := runs(); n != 3 {
		t.Errorf("%d git runs after two checks of an invalid name, want 3", n)
	}
}
