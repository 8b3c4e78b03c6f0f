package toolbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// historyServer makes a repository with two commits, exports it as the
// task's history (base = first, head = second) and returns a Server whose
// workspace is a plain copy of head's files, with no .git.
func historyServer(t *testing.T) *Server {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	t.Setenv("TMPDIR", t.TempDir())
	src := t.TempDir()
	gitCmd(t, src, "init", "-q", "-b", "main")
	writeTestFile(t, src, "a.txt", "one\ntwo\n")
	gitCmd(t, src, "add", ".")
	gitCmd(t, src, "commit", "-q", "-m", "first commit")
	base := gitCmd(t, src, "rev-parse", "HEAD")
	writeTestFile(t, src, "b.txt", "bee\n")
	gitCmd(t, src, "add", ".")
	gitCmd(t, src, "commit", "-q", "-m", "second commit")
	hist := filepath.Join(t.TempDir(), "history.git")
	gitCmd(t, src, "clone", "-q", "--bare", src, hist)
	gitCmd(t, hist, "update-ref", "refs/heads/base", base)
	gitCmd(t, hist, "update-ref", "refs/heads/head", "main")
	gitCmd(t, hist, "symbolic-ref", "HEAD", "refs/heads/head")

	s := &Server{Root: t.TempDir(), History: hist}
	writeTestFile(t, s.Root, "a.txt", "one\ntwo\n")
	writeTestFile(t, s.Root, "b.txt", "bee\n")
	return s
}

func TestGitTools(t *testing.T) {
	s := historyServer(t)
	check(t, call(t, s, ToolGitDiff, GitDiffArgs{}), false, "no changes against head")
	check(t, call(t, s, ToolGitDiff, GitDiffArgs{Against: "base"}), false, "+bee")

	writeTestFile(t, s.Root, "a.txt", "one\nTWO\n")
	writeTestFile(t, s.Root, "new.txt", "brand new\n")
	r := call(t, s, ToolGitDiff, GitDiffArgs{})
	check(t, r, false, "-two", "+TWO", "+brand new", "new.txt")
	r = call(t, s, ToolGitDiff, GitDiffArgs{Path: "new.txt"})
	check(t, r, false, "+brand new")
	if strings.Contains(r.Output, "TWO") {
		t.Errorf("path did not limit the diff: %s", r.Output)
	}
	check(t, call(t, s, ToolGitDiff, GitDiffArgs{Against: "tip"}), true, "against must be")

	check(t, call(t, s, ToolGitLog, GitLogArgs{}), false, "second commit", "first commit", "the task started at")
	r = call(t, s, ToolGitLog, GitLogArgs{N: 1})
	if strings.Contains(r.Output, "first commit") {
		t.Errorf("n=1 showed two commits: %s", r.Output)
	}
	check(t, call(t, s, ToolGitShow, GitShowArgs{Rev: "base"}), false, "first commit", "+one")
	check(t, call(t, s, ToolGitShow, GitShowArgs{Rev: "base", Path: "a.txt"}), false, "one\ntwo")
	check(t, call(t, s, ToolGitShow, GitShowArgs{Rev: "--output=/tmp/x"}), true, "invalid revision")
	check(t, call(t, s, ToolGitShow, GitShowArgs{Rev: "head", Path: "../../etc/passwd"}), true, "outside the workspace")
	check(t, call(t, s, ToolGitBlame, GitBlameArgs{Path: "a.txt"}), false, "Not Committed Yet", "one")
}

// A .git planted in the workspace (another history, a hostile config) is
// never read: the tools answer from the exported history. Control: git's
// own discovery in the workspace does read it and runs its fsmonitor.
func TestGitToolsIgnorePlantedGit(t *testing.T) {
	s := historyServer(t)
	gitCmd(t, s.Root, "init", "-q", "-b", "main")
	gitCmd(t, s.Root, "add", ".")
	gitCmd(t, s.Root, "commit", "-q", "-m", "planted commit")
	marker := filepath.Join(t.TempDir(), "fsmonitor-ran")
	hook := writeTestFile(t, t.TempDir(), "hook.sh", "#!/bin/sh\ntouch "+marker+"\n")
	if err := os.Chmod(hook, 0o755); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, s.Root, "config", "core.fsmonitor", hook)

	// Control: the planted repository is what discovery finds.
	if out := gitCmd(t, s.Root, "log", "--format=%s"); !strings.Contains(out, "planted commit") {
		t.Fatalf("control: planted history not found by discovery: %s", out)
	}
	gitCmd(t, s.Root, "status", "--short")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("control: the planted fsmonitor did not run under discovery")
	}
	os.Remove(marker)

	writeTestFile(t, s.Root, "a.txt", "changed\n")
	r := call(t, s, ToolGitLog, GitLogArgs{})
	check(t, r, false, "second commit", "first commit")
	if strings.Contains(r.Output, "planted") {
		t.Errorf("git_log read the planted .git: %s", r.Output)
	}
	r = call(t, s, ToolGitDiff, GitDiffArgs{})
	check(t, r, false, "+changed", "-one")
	if strings.Contains(r.Output, ".git/") {
		t.Errorf("git_diff shows the planted .git: %s", r.Output)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the planted fsmonitor ran")
	}
}
