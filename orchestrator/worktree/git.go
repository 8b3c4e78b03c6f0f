package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// hardening is passed to every git invocation, before the sub-command. Each
// entry closes a way for files in a worktree (written by the agent) or for a
// repository the agent crafted to run a program on the host or reach out.
var hardening = []string{
	// Hooks would run programs from the repository on commit, merge and
	// checkout; /dev/null is a directory git finds no hook in.
	"-c", "core.hooksPath=/dev/null",
	// fsmonitor names a program git runs on every status/add/diff.
	"-c", "core.fsmonitor=false",
	// An external diff program, when configured, runs on every diff; we
	// also pass --no-ext-diff to each diff-producing command.
	"-c", "diff.external=",
	// Signing runs gpg/ssh programs from config and may prompt.
	"-c", "commit.gpgsign=false",
	"-c", "tag.gpgsign=false",
	// Submodules are separate repositories with their own config; recursing
	// into one written by the agent would run its fsmonitor/hooks.
	"-c", "submodule.recurse=false",
	"-c", "diff.ignoreSubmodules=all",
	"-c", "status.submoduleSummary=false",
	// No transport of any kind: host git here never talks to a remote.
	"-c", "protocol.allow=never",
	"-c", "credential.helper=",
	// Automatic gc/maintenance would spawn background git (and prune
	// worktrees) at arbitrary moments.
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	"-c", "core.pager=cat",
	"-c", "advice.detachedHead=false",
	"--no-pager",
	"--no-replace-objects",
}

// fullCheckout switches sparse checkout off: a task's worktree holds the
// whole tree whatever the user's checkout leaves out (a sparse user
// checkout's settings reach a new worktree through the shared config or a
// copy of its config.worktree), so the agent sees every file and its
// commit can hold a file anywhere.
var fullCheckout = []string{"-c", "core.sparseCheckout=false", "-c", "core.sparseCheckoutCone=false", "-c", "index.sparse=false"}

// taskAdminDir reports whether gitDir is the admin directory of a
// worktree this tool made (git worktree add --lock --reason "agent ...").
func taskAdminDir(gitDir string) bool {
	b, err := os.ReadFile(filepath.Join(gitDir, "locked"))
	return err == nil && bytes.HasPrefix(b, []byte("agent"))
}

// git runs host git with the hardening above. The zero value uses "git" from
// PATH.
type git struct {
	bin string
}

func (g git) path() string {
	if g.bin != "" {
		return g.bin
	}
	return "git"
}

// env is the scrubbed environment of every git run: the caller's environment
// without any GIT_* variable (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE,
// GIT_CONFIG_* and friends would redirect or reconfigure git), plus settings
// that make git ignore the system config and attributes, never prompt and
// print stable English.
func gitEnv(extra ...string) []string {
	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_LITERAL_PATHSPECS=1",
		"GIT_NO_LAZY_FETCH=1",
		"LC_ALL=C",
	)
	return append(env, extra...)
}

// gitError is a failed git run with what it printed on stderr.
type gitError struct {
	args   []string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		msg = fmt.Sprintf("exit status %d", e.code)
	}
	return fmt.Sprintf("git %s: %s", e.sub(), msg)
}

func (e *gitError) sub() string {
	for _, a := range e.args {
		if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") {
			return a
		}
	}
	return ""
}

// exitCode returns the exit status of a failed git run, or -1.
func exitCode(err error) int {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.code
	}
	return -1
}

// invocation is one git run.
type invocation struct {
	gitDir   string // set for every run but Open's: git discovers no repository
	workTree string // "" for commands that need no work tree
	// discoverIn is the directory in which Open lets git discover the
	// user's repository; only Open sets it, and only without gitDir.
	discoverIn string
	args       []string
	env        []string // extra environment, after scrubbing
	stdin      io.Reader
	stdout     io.Writer // when set, stdout is streamed here instead of returned
	// inWorkTree runs git with the work tree as its working directory.
	// Only git apply needs it (it writes paths relative to where it
	// runs); --git-dir is still explicit, so nothing is discovered there.
	inWorkTree bool
}

func (g git) run(ctx context.Context, inv invocation) ([]byte, error) {
	if (inv.gitDir == "") == (inv.discoverIn == "") {
		return nil, errors.New("internal error: git run needs exactly one of an explicit --git-dir and a discovery directory")
	}
	args := make([]string, 0, len(hardening)+len(inv.args)+2)
	if inv.gitDir != "" {
		args = append(args, "--git-dir="+inv.gitDir)
	}
	if inv.workTree != "" {
		args = append(args, "--work-tree="+inv.workTree)
	}
	args = append(args, hardening...)
	if inv.gitDir != "" && taskAdminDir(inv.gitDir) {
		args = append(args, fullCheckout...)
	}
	args = append(args, inv.args...)
	cmd := exec.CommandContext(ctx, g.path(), args...)
	cmd.Env = gitEnv(inv.env...)
	// The working directory is never inside a worktree: a relative path
	// there could resolve to something the agent placed.
	cmd.Dir = "/"
	switch {
	case inv.discoverIn != "":
		cmd.Dir = inv.discoverIn
	case inv.inWorkTree && inv.workTree != "":
		cmd.Dir = inv.workTree
	}
	cmd.Stdin = inv.stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	if inv.stdout != nil {
		cmd.Stdout = inv.stdout
	}
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			return stdout.Bytes(), &gitError{args: inv.args, code: ee.ExitCode(), stderr: stderr.String()}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("running git: %w", err)
	}
	return stdout.Bytes(), nil
}

// out runs git and returns its trimmed stdout.
func (g git) out(ctx context.Context, gitDir, workTree string, args ...string) (string, error) {
	b, err := g.run(ctx, invocation{gitDir: gitDir, workTree: workTree, args: args})
	return strings.TrimSpace(string(b)), err
}

// lines splits NUL- or newline-separated git output into non-empty entries.
func lines(s string, sep byte) []string {
	var out []string
	for _, l := range strings.Split(s, string(sep)) {
		if l = strings.TrimRight(l, "\n"); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// noCancel keeps a writing operation from being killed halfway: git killed
// while it writes leaves an index.lock behind (blocking every later git
// command in that checkout) or a half-updated checkout. Such operations
// are short; a Ctrl-C takes effect when they are done.
func noCancel(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
