package worktree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The agent's edits inside a submodule are invisible to the task's own
// commit (the control: the superproject's commit of the worktree records
// nothing), so they would go with the worktree; CommitSubmodules commits
// them in the submodule's repository on the task's branch, and refuses a
// submodule place the agent turned into a symlink.
func TestSubmoduleEditsCommitted(t *testing.T) {
	ctx := context.Background()
	sub := newRepo(t)
	dir := newRepo(t)
	plainGit(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "lib")
	plainGit(t, dir, "commit", "-q", "-m", "add lib")
	r := openRepo(t, dir)
	w := addTask(t, r, "sm")
	start := plainGit(t, dir, "rev-parse", "HEAD")
	subs, err := r.Submodules(ctx, start)
	if err != nil || len(subs) != 1 || !subs[0].Present {
		t.Fatalf("submodules %+v %v", subs, err)
	}
	// The worktree holds the submodule's files, as the task fills them.
	if err := os.MkdirAll(filepath.Join(w.Path, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	ar := exec.Command("sh", "-c", `git --git-dir="$1" archive "$2" | tar -x -C "$3"`, "sh", subs[0].GitDir, subs[0].Commit, filepath.Join(w.Path, "lib"))
	if out, err := ar.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// Unchanged files: nothing is committed.
	if got, err := r.CommitSubmodules(ctx, w, start, w.Branch, "m"); err != nil || len(got) != 0 {
		t.Fatalf("unchanged submodule: %+v %v", got, err)
	}
	write(t, filepath.Join(w.Path, "lib", "a.txt"), "edited inside the submodule\n")
	write(t, filepath.Join(w.Path, "lib", "new.txt"), "new\n")

	// Control: the task's own commit does not see them.
	if id, err := r.CommitAll(ctx, w, "task"); err != nil || id != "" {
		t.Fatalf("the superproject's commit recorded something (%q, %v): the control proves nothing", id, err)
	}
	got, err := r.CommitSubmodules(ctx, w, start, w.Branch, "the agent's work")
	if err != nil || len(got) != 1 || got[0].Path != "lib" || got[0].Branch != w.Branch {
		t.Fatalf("CommitSubmodules = %+v, %v", got, err)
	}
	gd := subs[0].GitDir
	if out := plainGit(t, dir, "--git-dir="+gd, "show", w.Branch+":a.txt"); out != "edited inside the submodule" {
		t.Errorf("a.txt on the submodule's branch: %q", out)
	}
	if out := plainGit(t, dir, "--git-dir="+gd, "rev-parse", w.Branch+"^"); out != subs[0].Commit {
		t.Errorf("the submodule commit's parent is %s, want %s", out, subs[0].Commit)
	}

	// A submodule place that is a symlink is never read through.
	if err := os.RemoveAll(filepath.Join(w.Path, "lib")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(w.Path, "lib")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitSubmodules(ctx, w, start, w.Branch, "m"); err == nil {
		t.Error("a symlinked submodule place was committed through")
	}
}
