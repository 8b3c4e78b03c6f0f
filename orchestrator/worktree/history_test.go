package worktree

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestExportHistory(t *testing.T) {
	dir := newRepo(t)
	// A commit on another branch must not be exported.
	plainGit(t, dir, "checkout", "-q", "-b", "private")
	write(t, filepath.Join(dir, "secret.txt"), "private\n")
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "private work")
	secret := plainGit(t, dir, "rev-parse", "HEAD")
	plainGit(t, dir, "checkout", "-q", "main")
	r := openRepo(t, dir)
	base := plainGit(t, dir, "rev-parse", "HEAD")
	w := committedTask(t, r, "h1", "b.txt", "task file\n")
	head, err := r.BranchTip(context.Background(), w.Branch)
	if err != nil {
		t.Fatal(err)
	}

	dest := filepath.Join(t.TempDir(), "history.git")
	if err := r.ExportHistory(context.Background(), dest, base, head); err != nil {
		t.Fatal(err)
	}
	// Twice: a second export replaces the first.
	if err := r.ExportHistory(context.Background(), dest, base, head); err != nil {
		t.Fatal(err)
	}
	log := plainGit(t, dest, "--git-dir="+dest, "log", "--format=%s", "head")
	if log != "task h1\ninit" {
		t.Errorf("log of head = %q", log)
	}
	if got := plainGit(t, dest, "--git-dir="+dest, "rev-parse", "base"); got != base {
		t.Errorf("base = %s, want %s", got, base)
	}
	if out := plainGit(t, dest, "--git-dir="+dest, "cat-file", "--batch-check", "--batch-all-objects"); strings.Contains(out, secret) {
		t.Errorf("a commit outside the task's history was exported")
	}
	if err := r.ExportHistory(context.Background(), dest, "-x", head); err == nil {
		t.Error("an option-like revision was accepted")
	}
}
