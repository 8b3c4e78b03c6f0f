package orchestrator

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
)

// Review is what a user needs to decide about a task.
type Review struct {
	Task   string `json:"task"`
	Prompt string `json:"prompt"`
	State  string `json:"state"`
	Branch string `json:"branch"`
	// Base is the branch (or commit) the task started from and would merge into.
	Base       string `json:"base"`
	BaseBranch string `json:"base_branch,omitempty"`
	// BaseMoved is set when the base branch has new commits since the task
	// started (merge is tried first; a conflict is reported).
	BaseMoved bool              `json:"base_moved,omitempty"`
	Commits   []worktree.Commit `json:"commits"`
	Stat      worktree.Stat     `json:"stat"`
	// Unmerged counts the task's commits not in the base branch.
	Unmerged int `json:"unmerged"`
	// Uncommitted lists files changed in the worktree but not committed.
	Uncommitted []string        `json:"uncommitted,omitempty"`
	Commands    []store.Command `json:"commands"`
	// Tests is the last test command the agent ran, nil when it ran none.
	Tests *TestRun `json:"tests,omitempty"`
	// Network is the sandbox's egress: its allowlist and what the proxy
	// allowed and denied. An empty allowlist: no network at all.
	Network store.Network `json:"network"`
	// Warnings are things the user should know before merging.
	Warnings []string     `json:"warnings,omitempty"`
	Result   string       `json:"result,omitempty"`
	Model    string       `json:"model,omitempty"`
	Tokens   store.Tokens `json:"tokens"`
	Worktree string       `json:"worktree"`
}

// TestRun is a test command found among the commands the agent ran.
type TestRun struct {
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Passed   bool   `json:"passed"`
	// Runs counts the test commands run in all.
	Runs int `json:"runs"`
}

// testCommand matches the usual ways to run a project's tests.
var testCommand = regexp.MustCompile(`(^|[\s;&|(])(` + `go\s+test|gotestsum|` +
	`(python[0-9.]*\s+-m\s+)?(pytest|unittest|nose2?|tox)|` +
	`(npm|pnpm|yarn|bun)\s+(run\s+)?test|npx\s+(jest|vitest|mocha)|jest|vitest|mocha|` +
	`cargo\s+(test|nextest)|make(\s+-\S+)*\s+(test|check|tests)|ctest|meson\s+test|ninja\s+test|` +
	`mvn\s+(\S+\s+)*test|gradle\w*\s+test|\./gradlew\s+test|` +
	`(bundle\s+exec\s+)?(rspec|rake\s+test)|dotnet\s+test|mix\s+test|phpunit|bats|` +
	`(\./|sh\s+|bash\s+)\S*test\S*\.sh|deno\s+test|zig\s+build\s+test|swift\s+test` +
	`)(\s|$|;|&|\|)`)

// IsTestCommand reports whether a shell command runs tests.
func IsTestCommand(cmd string) bool { return testCommand.MatchString(cmd) }

// DetectTests finds the test commands among cmds: nil when none ran, else
// the last one (its exit code says whether the tests passed at the end).
func DetectTests(cmds []store.Command) *TestRun {
	var tr *TestRun
	n := 0
	for _, c := range cmds {
		if !IsTestCommand(c.Command) {
			continue
		}
		n++
		tr = &TestRun{Command: c.Command, ExitCode: c.ExitCode, Passed: c.ExitCode != nil && *c.ExitCode == 0}
	}
	if tr != nil {
		tr.Runs = n
	}
	return tr
}

// Review summarises a task for the decision.
func (o *Orchestrator) Review(ctx context.Context, t *store.Task) (*Review, error) {
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, err
	}
	rv := &Review{
		Task: t.ID, Prompt: t.Prompt, State: string(t.State), Branch: t.Branch,
		Base: describeBase(t), BaseBranch: t.BaseBranch, Commands: t.Commands,
		Tests: DetectTests(t.Commands), Network: t.Network, Result: t.Result, Model: t.Model, Tokens: t.Tokens,
		Worktree: t.Worktree,
	}
	tip, err := repo.BranchTip(ctx, t.Branch)
	if err != nil {
		return nil, err
	}
	if tip == "" {
		return rv, fmt.Errorf("task %s: its branch %s no longer exists", t.ID, t.Branch)
	}
	if rv.Commits, err = repo.Log(ctx, t.BaseCommit, tip); err != nil {
		return nil, err
	}
	if rv.Stat, err = repo.DiffStat(ctx, t.BaseCommit, tip); err != nil {
		return nil, err
	}
	into := t.BaseCommit
	if t.BaseBranch != "" {
		bt, err := repo.BranchTip(ctx, t.BaseBranch)
		if err != nil {
			return nil, err
		}
		if bt == "" {
			rv.Warnings = append(rv.Warnings, fmt.Sprintf("the base branch %s no longer exists", t.BaseBranch))
		} else {
			into = bt
			rv.BaseMoved = bt != t.BaseCommit
		}
	} else {
		rv.Warnings = append(rv.Warnings, fmt.Sprintf("the base %s is not a branch: there is nothing to merge into; keep the branch and merge it yourself", t.BaseRef))
	}
	if rv.Unmerged, err = repo.CountCommits(ctx, into, tip); err != nil {
		return nil, err
	}
	if wt := o.checkedOutWorktree(repo, t); wt != nil {
		if rv.Uncommitted, err = repo.Changes(ctx, wt); err != nil {
			return nil, err
		}
		for _, c := range rv.Uncommitted {
			if strings.HasSuffix(c, "/") {
				rv.Warnings = append(rv.Warnings, fmt.Sprintf("%s is a git repository of its own (did the agent run git init?): it was not committed and stays in the worktree %s", c, wt.Path))
			}
		}
		// A .git the agent planted is never used by agent (host git always
		// gets explicit paths) and never committed, but a user running
		// plain git in that directory would run whatever it configures.
		if _, err := os.Lstat(filepath.Join(wt.Path, ".git")); err == nil {
			rv.Warnings = append(rv.Warnings, fmt.Sprintf("the agent wrote a .git into its workspace (%s/.git); it was not committed and agent never uses it, but do not run git inside that directory yourself: inspect the task with `agent diff %s`", wt.Path, t.ID))
		}
	}
	rv.Warnings = append(rv.Warnings, unansweredQuestions(t.Commands)...)
	rv.Warnings = append(rv.Warnings, o.repositoryMCPWarnings()...)
	rv.Warnings = append(rv.Warnings, sensitiveChanges(rv.Stat, repo.ConfigValue(ctx, "core.hooksPath"))...)
	if rv.Tests == nil {
		rv.Warnings = append(rv.Warnings, "the agent ran no tests")
	} else if !rv.Tests.Passed {
		rv.Warnings = append(rv.Warnings, "the last test run failed: "+rv.Tests.Command)
	}
	rv.Warnings = append(rv.Warnings, environmentWarnings(t, rv.Tests)...)
	return rv, nil
}

// Diff writes the task's changes against its base: the committed branch,
// then, for a task that is not finished, the worktree's uncommitted
// changes to tracked files.
func (o *Orchestrator) Diff(ctx context.Context, t *store.Task, w io.Writer) error {
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return err
	}
	tip, err := repo.BranchTip(ctx, t.Branch)
	if err != nil {
		return err
	}
	if tip == "" {
		if t.MergeCommit != "" {
			return repo.Diff(ctx, t.BaseCommit, t.MergeCommit, w)
		}
		return fmt.Errorf("task %s: its branch %s no longer exists (task %s)", t.ID, t.Branch, t.State)
	}
	if wt := o.checkedOutWorktree(repo, t); wt != nil {
		ch, err := repo.Changes(ctx, wt)
		if err != nil {
			return err
		}
		if len(ch) > 0 {
			// Committed and uncommitted work together, against the base.
			return repo.DiffWorktree(ctx, wt, t.BaseCommit, w)
		}
	}
	return repo.Diff(ctx, t.BaseCommit, tip, w)
}

// sensitivePaths are files that make tools run code on the user's machine
// once merged (git attributes and hooks, direnv, editor tasks, CI
// workflows, pre-commit): a change to one deserves a second look.
var sensitivePaths = []struct{ prefix, why string }{
	{".agent/", "agent's own project configuration: model endpoint, sandbox, hooks of later tasks"},
	{".gitattributes", "selects git filters and diff/merge drivers"},
	{".gitmodules", "adds submodules"},
	{".githooks/", "git hooks"},
	{".husky/", "git hooks"},
	{".pre-commit-config.yaml", "pre-commit hooks"},
	{".envrc", "direnv runs it on cd"},
	{".vscode/", "editor tasks and settings"},
	{".devcontainer/", "dev container definition"},
	{".github/workflows/", "CI workflows"},
	{".gitlab-ci.yml", "CI pipeline"},
}

// sensitiveChanges lists warnings for changed files that run code when
// used, and for symlinks that point outside the repository.
func sensitiveChanges(st worktree.Stat, hooksPath string) []string {
	var out []string
	hooks := strings.TrimSuffix(strings.TrimPrefix(hooksPath, "./"), "/")
	for _, f := range st.Files {
		base := f.Path[strings.LastIndex(f.Path, "/")+1:]
		for _, s := range sensitivePaths {
			if f.Path == s.prefix || base == s.prefix || (strings.HasSuffix(s.prefix, "/") && strings.HasPrefix(f.Path, s.prefix)) {
				out = append(out, fmt.Sprintf("the task changes %s (%s): review it before merging", f.Path, s.why))
				break
			}
		}
		if hooks != "" && !strings.HasPrefix(hooks, "/") && strings.HasPrefix(f.Path, hooks+"/") {
			out = append(out, fmt.Sprintf("the task changes %s, in your core.hooksPath (%s): git would run it", f.Path, hooksPath))
		}
		if f.Mode == "120000" && (strings.HasPrefix(f.LinkTarget, "/") || escapes(f.Path, f.LinkTarget)) {
			out = append(out, fmt.Sprintf("the task adds a symlink %s -> %s, which points outside the repository", f.Path, f.LinkTarget))
		}
	}
	return out
}

// escapes reports whether a relative symlink at path leaves the repository.
func escapes(path, target string) bool {
	depth := strings.Count(path, "/")
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		case ".", "":
		default:
			depth++
		}
	}
	return false
}
