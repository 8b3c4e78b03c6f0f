package toolbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Read-only history tools. They answer inside the sandbox from the task's
// history, a bare repository the orchestrator exported and mounted
// read-only at HistoryPath (base = where the task started, head = the task
// branch's tip when the sandbox started), against the files in the
// workspace. git is always told that repository explicitly, so a .git in the
// workspace (planted or not) is never read; the index and any new objects
// (the workspace's blobs, for git_diff) live in a private directory under
// /tmp, never in the workspace or the mounted history.
const (
	ToolGitDiff  = "git_diff"
	ToolGitLog   = "git_log"
	ToolGitShow  = "git_show"
	ToolGitBlame = "git_blame"
)

// HistoryPath is where the task's history is mounted in the sandbox.
const HistoryPath = "/.agent/history"

// GitDiffArgs are the arguments of git_diff. Against is "head" (default:
// the changes made in this sandbox) or "base" (everything the task changed
// since it started, including earlier runs' commits).
type GitDiffArgs struct {
	Against string `json:"against,omitempty"`
	Path    string `json:"path,omitempty"`
}

// GitLogArgs are the arguments of git_log.
type GitLogArgs struct {
	N    int    `json:"n,omitempty"`
	Path string `json:"path,omitempty"`
}

// GitShowArgs are the arguments of git_show.
type GitShowArgs struct {
	Rev  string `json:"rev"`
	Path string `json:"path,omitempty"`
}

// GitBlameArgs are the arguments of git_blame.
type GitBlameArgs struct {
	Path string `json:"path"`
}

// gitTimeout bounds one history tool call.
const gitTimeout = 60 * time.Second

// gitRunDir is the private state of the history tools.
func gitRunDir() string { return filepath.Join(os.TempDir(), ".agent-git") }

// historyDir is the mounted history; tests point it elsewhere.
func (s *Server) historyDir() string {
	if s.History != "" {
		return s.History
	}
	return HistoryPath
}

// git runs git against the task's history and the workspace and returns
// its output, or a failed Response for the model.
func (s *Server) git(ctx context.Context, args ...string) (string, *Response) {
	hist := s.historyDir()
	if st, err := os.Stat(filepath.Join(hist, "HEAD")); err != nil || st.IsDir() {
		r := errorf("the task's history is not available in this sandbox; use bash with the files instead")
		return "", &r
	}
	bin, err := exec.LookPath("git")
	if err != nil {
		r := errorf("this sandbox image has no git, so the history tools cannot run")
		return "", &r
	}
	run := gitRunDir()
	if err := os.MkdirAll(filepath.Join(run, "objects"), 0o700); err != nil {
		r := errorf("cannot prepare the history tools' directory %s: %v", run, err)
		return "", &r
	}
	// The only configuration git reads: no system file, and a global one
	// of ours that trusts the mounted repository (owned by the host user,
	// who may not be the sandbox's user).
	global := filepath.Join(run, "config")
	if err := os.WriteFile(global, []byte("[safe]\n\tdirectory = *\n[core]\n\tquotePath = true\n"), 0o600); err != nil {
		r := errorf("cannot prepare the history tools' configuration: %v", err)
		return "", &r
	}
	full := append([]string{
		"--git-dir=" + hist, "--work-tree=" + s.root(),
		"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "diff.external=",
		"-c", "core.pager=cat", "-c", "gc.auto=0", "-c", "color.ui=false",
		"--no-pager", "--no-replace-objects",
	}, args...)
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = s.root()
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + run, "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + global, "GIT_ATTR_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0", "GIT_NO_LAZY_FETCH=1", "GIT_OPTIONAL_LOCKS=0", "GIT_LITERAL_PATHSPECS=1",
		"GIT_INDEX_FILE=" + filepath.Join(run, "index"),
		"GIT_OBJECT_DIRECTORY=" + filepath.Join(run, "objects"),
		"GIT_ALTERNATE_OBJECT_DIRECTORIES=" + filepath.Join(hist, "objects"),
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { killGroup(cmd.Process.Pid); return nil }
	out := newCapBuffer(s.limits().OutputBytes)
	cmd.Stdout, cmd.Stderr = out, out
	// Started as a command, so the orphan sweep that follows a bash call
	// does not take git for an orphan.
	if err := s.startShell(cmd); err != nil {
		r := errorf("cannot run git: %v", err)
		return "", &r
	}
	err = cmd.Wait()
	s.shellDone(cmd.Process.Pid)
	text, truncated := out.String()
	if truncated {
		text += "\n[output truncated]"
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r := errorf("git failed (exit code %d):\n%s", ee.ExitCode(), text)
			return "", &r
		}
		r := errorf("cannot run git: %v", err)
		return "", &r
	}
	return text, nil
}

// validHistoryRev refuses a revision git could take for an option; "base"
// and "head" name the task's refs.
func validHistoryRev(rev string) error {
	if rev == "" || strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\x00\n\r") || len(rev) > 256 {
		return fmt.Errorf("invalid revision %q", rev)
	}
	return nil
}

func (s *Server) gitDiff(ctx context.Context, raw json.RawMessage) Response {
	var a GitDiffArgs
	if r := decodeArgs(ToolGitDiff, raw, &a); r != nil {
		return *r
	}
	rev := "head"
	switch a.Against {
	case "", "head":
	case "base":
		rev = "base"
	default:
		return errorf("invalid arguments for git_diff: against must be \"head\" or \"base\", not %q", a.Against)
	}
	pathspec, bad := s.gitPath(ToolGitDiff, a.Path)
	if bad != nil {
		return *bad
	}
	// Stage the workspace into the private index (new blobs go to the
	// private object directory), so new and deleted files show too.
	// The index is kept between calls (its stat data makes the next add
	// cheap) and only built from head the first time.
	if _, err := os.Stat(filepath.Join(gitRunDir(), "index")); err != nil {
		if _, r := s.git(ctx, "read-tree", "head"); r != nil {
			return *r
		}
	}
	if _, r := s.git(ctx, "add", "-A", "--", "."); r != nil {
		return *r
	}
	out, r := s.git(ctx, append([]string{"diff", "--cached", "--no-ext-diff", "--no-textconv", "--stat", "--patch", rev, "--"}, pathspec...)...)
	if r != nil {
		return *r
	}
	if strings.TrimSpace(out) == "" {
		return Response{Output: fmt.Sprintf("no changes against %s\n", rev)}
	}
	return Response{Output: out}
}

func (s *Server) gitLog(ctx context.Context, raw json.RawMessage) Response {
	var a GitLogArgs
	if r := decodeArgs(ToolGitLog, raw, &a); r != nil {
		return *r
	}
	n := a.N
	if n <= 0 {
		n = 20
	}
	n = min(n, 500)
	pathspec, bad := s.gitPath(ToolGitLog, a.Path)
	if bad != nil {
		return *bad
	}
	args := []string{"log", "-n", strconv.Itoa(n), "--format=%h %ad %an%n    %s", "--date=short", "head", "--"}
	out, r := s.git(ctx, append(args, pathspec...)...)
	if r != nil {
		return *r
	}
	base, r := s.git(ctx, "rev-parse", "--short", "base")
	if r != nil {
		return *r
	}
	return Response{Output: out + fmt.Sprintf("(the task started at %s; changes not yet committed are shown by git_diff)\n", strings.TrimSpace(base))}
}

func (s *Server) gitShow(ctx context.Context, raw json.RawMessage) Response {
	var a GitShowArgs
	if r := decodeArgs(ToolGitShow, raw, &a); r != nil {
		return *r
	}
	if err := validHistoryRev(a.Rev); err != nil {
		return errorf("invalid arguments for git_show: %v", err)
	}
	if a.Path == "" {
		out, r := s.git(ctx, "show", "--no-ext-diff", "--no-textconv", "--stat", "--patch", "--end-of-options", a.Rev)
		if r != nil {
			return *r
		}
		return Response{Output: out}
	}
	abs, err := s.resolve(a.Path)
	if err != nil {
		return errorf("git_show: %v", err)
	}
	rel := s.display(abs)
	out, r := s.git(ctx, "show", "--no-textconv", "--end-of-options", a.Rev+":"+rel)
	if r != nil {
		return *r
	}
	return Response{Output: out}
}

func (s *Server) gitBlame(ctx context.Context, raw json.RawMessage) Response {
	var a GitBlameArgs
	if r := decodeArgs(ToolGitBlame, raw, &a); r != nil {
		return *r
	}
	if a.Path == "" {
		return errorf("invalid arguments for git_blame: path is required")
	}
	pathspec, bad := s.gitPath(ToolGitBlame, a.Path)
	if bad != nil {
		return *bad
	}
	out, r := s.git(ctx, append([]string{"blame", "--date=short", "--"}, pathspec...)...)
	if r != nil {
		return *r
	}
	return Response{Output: out}
}

// gitPath turns an optional tool path into a path inside the workspace, taken
// literally (GIT_LITERAL_PATHSPECS) by every command, relative to the
// workspace root.
func (s *Server) gitPath(tool, p string) ([]string, *Response) {
	if p == "" {
		return nil, nil
	}
	abs, err := s.resolve(p)
	if err != nil {
		r := errorf("%s: %v", tool, err)
		return nil, &r
	}
	rel := s.display(abs)
	if rel == "." {
		return nil, nil
	}
	return []string{rel}, nil
}
