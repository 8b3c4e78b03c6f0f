package worktree

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// CraftHostileGit writes into dir what an agent inside the sandbox could
// write into /workspace to take over host git: a `.git` (directory or
// pointer file to a crafted git dir) whose config sets core.fsmonitor,
// diff.external, hooks and a filter driver selected by a .gitattributes —
// each one touching sentinel on the host when run.
func craftHostileGit(t *testing.T, dir, sentinel string, pointerFile bool) {
	t.Helper()
	evil := filepath.Join(dir, ".git")
	if pointerFile {
		evil = filepath.Join(dir, ".evil")
		write(t, filepath.Join(dir, ".git"), "gitdir: .evil\n")
	}
	touch := fmt.Sprintf("touch %s", sentinel)
	write(t, filepath.Join(evil, "HEAD"), "ref: refs/heads/main\n")
	for _, d := range []string{"objects", "refs/heads"} {
		if err := os.MkdirAll(filepath.Join(evil, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(evil, "config"), fmt.Sprintf(`[core]
	repositoryformatversion = 0
	bare = false
	fsmonitor = "%[1]s; false"
	hooksPath = hooks
[diff]
	external = "%[1]s; false"
[diff "evil"]
	textconv = "%[1]s; cat"
[filter "evil"]
	clean = "%[1]s; cat"
	smudge = "%[1]s; cat"
	required = true
[merge "evil"]
	driver = "%[1]s; false"
`, touch))
	for _, h := range []string{"pre-commit", "post-commit", "commit-msg", "post-checkout", "post-merge", "reference-transaction", "post-index-change"} {
		p := filepath.Join(evil, "hooks", h)
		write(t, p, "#!/bin/sh\n"+touch+"\n")
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, ".gitattributes"), "* filter=evil diff=evil merge=evil\n")
	write(t, filepath.Join(dir, "a.txt"), "changed by the agent\n")
}

func TestHostGitIgnoresAgentWrittenGit(t *testing.T) {
	for _, pointer := range []bool{false, true} {
		name := map[bool]string{false: "git-dir", true: "git-file"}[pointer]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := newRepo(t)
			r := openRepo(t, dir)
			base, _ := r.ResolveBase(ctx, "")
			w := addTask(t, r, "evil-"+name)
			sentinel := filepath.Join(t.TempDir(), "pwned")
			craftHostileGit(t, w.Path, sentinel, pointer)
			// A nested repository (git would run its fsmonitor when
			// recursing into it as a submodule).
			nestedSentinel := filepath.Join(t.TempDir(), "pwned-nested")
			craftHostileGit(t, filepath.Join(w.Path, "sub"), nestedSentinel, false)

			// Everything the orchestrator does with a finished task.
			if _, err := r.Changes(ctx, w); err != nil {
				t.Fatal(err)
			}
			commit, err := r.CommitAll(ctx, w, "agent work")
			if err != nil || commit == "" {
				t.Fatalf("commit: %q %v", commit, err)
			}
			var buf bytes.Buffer
			if err := r.Diff(ctx, base.Commit, w.Branch, &buf); err != nil {
				t.Fatal(err)
			}
			if err := r.DiffWorktree(ctx, w, base.Commit, &buf); err != nil {
				t.Fatal(err)
			}
			if _, err := r.DiffStat(ctx, base.Commit, w.Branch); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Log(ctx, base.Commit, w.Branch); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Merge(ctx, MergeOptions{Branch: w.Branch, Into: "main", Message: "merge"}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Changes(ctx, w); err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{sentinel, nestedSentinel} {
				if _, err := os.Stat(s); err == nil {
					t.Fatalf("host git ran a program the agent planted (%s)", filepath.Base(s))
				}
			}
			// The planted .git was never committed.
			if out := plainGit(t, dir, "ls-tree", "-r", "--name-only", w.Branch); bytes.Contains([]byte(out), []byte(".git/")) || bytes.Contains([]byte("\n"+out+"\n"), []byte("\n.git\n")) {
				t.Errorf("branch contains .git: %s", out)
			}

			// Control: the same files make a user's plain `git status` in
			// that directory run the planted program.
			cmd := exec.Command("git", "status")
			cmd.Dir = w.Path
			_ = cmd.Run()
			if _, err := os.Stat(sentinel); err != nil {
				t.Fatal("control failed: plain git status did not trigger the planted config, so this test proves nothing")
			}
			cmd = exec.Command("git", "status")
			cmd.Dir = filepath.Join(w.Path, "sub")
			_ = cmd.Run()
			if _, err := os.Stat(nestedSentinel); err != nil {
				t.Fatal("control failed: plain git status in the nested repository did not trigger its config")
			}
		})
	}
}

// TestUserFiltersDoNotRunOnAgentFiles: a filter driver from the user's
// own configuration, selected by a .gitattributes the agent wrote, does not
// run when the task's files are committed. Control: plain git add in the
// same worktree runs it.
func TestUserFiltersDoNotRunOnAgentFiles(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	sentinel := filepath.Join(t.TempDir(), "filtered")
	plainGit(t, dir, "config", "filter.crypt.clean", "touch "+sentinel+"; cat")
	plainGit(t, dir, "config", "filter.crypt.process", "touch "+sentinel+"; false")
	plainGit(t, dir, "config", "filter.crypt.required", "true")
	r := openRepo(t, dir)
	w := addTask(t, r, "filters")
	write(t, filepath.Join(w.Path, ".gitattributes"), "* filter=crypt\n")
	write(t, filepath.Join(w.Path, "secret.txt"), "plain text\n")
	c, err := r.CommitAll(ctx, w, "files")
	if err != nil || c == "" {
		t.Fatalf("commit: %q %v", c, err)
	}
	if _, err := os.Stat(sentinel); err == nil {
		t.Fatal("a configured filter ran on the agent's files")
	}
	if got := plainGit(t, dir, "cat-file", "blob", c+":secret.txt"); got != "plain text" {
		t.Errorf("committed content = %q", got)
	}
	// Control.
	write(t, filepath.Join(w.Path, "more.txt"), "more\n")
	cmd := exec.Command("git", "--git-dir="+w.GitDir, "--work-tree="+w.Path, "add", "-A")
	_ = cmd.Run()
	if _, err := os.Stat(sentinel); err != nil {
		t.Fatal("control failed: plain git add did not run the filter, so this test proves nothing")
	}
}
