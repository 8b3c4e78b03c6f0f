package orchestrator

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/verdict"
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
	// SubBranches are sub-agents' branches that still hold work not in
	// the task's branch (it could not be applied, or their run was killed).
	SubBranches []SubBranch `json:"sub_branches,omitempty"`
	// Ignored names files the agent created that .gitignore keeps out of
	// the commit (IgnoredCount of them in all); they go with the worktree.
	Ignored      []string `json:"ignored,omitempty"`
	IgnoredCount int      `json:"ignored_count,omitempty"`
	// Special names the FIFOs, sockets and devices in the worktree in
	// place of files: git cannot record them, so no commit holds them.
	Special []string `json:"special,omitempty"`
	// GPUs the sandbox had ("" none).
	GPUs string `json:"gpus,omitempty"`
	// Image is the sandbox's image; ImageBase the image its environment
	// was built on and ImageSource where that choice came from ("" when
	// the task ran on the configured sandbox image alone).
	Image       string `json:"image"`
	ImageBase   string `json:"image_base,omitempty"`
	ImageSource string `json:"image_source,omitempty"`
}

// SubBranch is a sub-agent's branch holding work of its own.
type SubBranch struct {
	Branch  string `json:"branch"`
	Commits int    `json:"commits"`
}

// TestRun is the test run the review's verdict rests on: the last test
// command the agent ran.
type TestRun struct {
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// Passed is Verdict == "passed".
	Passed bool `json:"passed"`
	// Verdict is passed, failed, masked (something after the test
	// command decided the exit code) or unknown (it did not finish);
	// Reason says what decided it beyond the exit code.
	Verdict verdict.Status `json:"verdict"`
	Reason  string         `json:"reason,omitempty"`
	// Runs counts the test commands the agent ran in all.
	Runs int `json:"runs"`
	// Source is "host" when the orchestrator ran the task's test command
	// after the agent's last turn (then only that run counts), "agent"
	// when the verdict comes from the agent's own last test run.
	Source string `json:"source"`
	// OutputTail is the end of the host run's output.
	OutputTail string `json:"output_tail,omitempty"`
}

// Verdict sources.
const (
	SourceHost  = "host"
	SourceAgent = "agent"
)

// taskTests is the review's test verdict: with a test command, its run by
// the orchestrator alone (unknown when it did not run); else the agent's
// last test run.
func taskTests(t *store.Task) *TestRun {
	agentRun := DetectTests(t.Commands)
	if t.TestCommand == "" {
		return agentRun
	}
	tr := &TestRun{Command: t.TestCommand, Source: SourceHost}
	if agentRun != nil {
		tr.Runs = agentRun.Runs
	}
	ht := t.HostTest
	switch {
	case ht == nil || ht.Command != t.TestCommand:
		tr.Verdict, tr.Reason = verdict.Unknown, "the test command did not run after the agent's last turn"
	case ht.Error != "":
		tr.Verdict, tr.Reason = verdict.Unknown, "the test command could not run: "+ht.Error
	case ht.TimedOut:
		tr.ExitCode, tr.OutputTail = ht.ExitCode, ht.OutputTail
		tr.Verdict, tr.Reason = verdict.Failed, fmt.Sprintf("the test command timed out after %s", time.Duration(ht.DurationMS)*time.Millisecond)
	default:
		tr.ExitCode, tr.OutputTail = ht.ExitCode, ht.OutputTail
		v := verdict.Judge(ht.Command, ht.ExitCode, ht.OutputTail)
		tr.Verdict, tr.Reason = v.Status, v.Reason
	}
	tr.Passed = tr.Verdict == verdict.Passed
	return tr
}

// IsTestCommand reports whether a shell command runs tests.
func IsTestCommand(cmd string) bool { return verdict.IsTestCommand(cmd) }

// DetectTests finds the test commands among cmds: nil when none ran, else
// the last one, judged by its exit code, what follows the test command
// in its command line and the test runner's summary in its output.
func DetectTests(cmds []store.Command) *TestRun {
	var tr *TestRun
	n := 0
	for _, c := range cmds {
		if !IsTestCommand(c.Command) {
			continue
		}
		n++
		v := verdict.Judge(c.Command, c.ExitCode, c.OutputTail)
		if c.TimedOut || c.CutShort || c.Running {
			v = verdict.Result{Status: verdict.Unknown, Reason: "the command did not finish"}
		}
		tr = &TestRun{Command: c.Command, ExitCode: c.ExitCode, Passed: v.Passed(), Verdict: v.Status, Reason: v.Reason, Source: SourceAgent}
	}
	if tr != nil {
		tr.Runs = n
	}
	return tr
}

// Problem says in a few words why the run does not count as passed.
func (tr *TestRun) Problem() string {
	if tr.Source == SourceHost {
		switch tr.Verdict {
		case verdict.Unknown:
			return "the test command has no verdict (" + tr.Reason + "): " + tr.Command
		case verdict.Masked:
			return "the test command's exit code is masked (" + tr.Reason + "): " + tr.Command
		}
		why := "the test command failed: " + tr.Command
		if tr.Reason != "" {
			why += "; " + tr.Reason
		}
		return why
	}
	switch tr.Verdict {
	case verdict.Masked:
		return "the last test run's exit code is masked (" + tr.Reason + "): " + tr.Command
	case verdict.Unknown:
		return "the last test run has no verdict (" + tr.Reason + "): " + tr.Command
	}
	why := "the last test run failed: " + tr.Command
	if tr.Reason != "" {
		why += "; " + tr.Reason
	}
	return why
}

// tailBytes returns at most n bytes of s's end, not splitting a rune.
func tailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
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
		Tests: taskTests(t), Network: t.Network, Result: t.Result, Model: t.Model, Tokens: t.Tokens,
		Worktree: t.Worktree, GPUs: t.GPUs, Image: t.Image,
	}
	if t.Environment != nil {
		rv.ImageBase, rv.ImageSource = t.Environment.Base, t.Environment.Source
	}
	if t.GPUs != "" {
		rv.Warnings = append(rv.Warnings, gpuWarning(t.GPUs))
		if t.GPUNote != "" {
			rv.Warnings = append(rv.Warnings, t.GPUNote)
		}
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
		err := o.onWorktree(ctx, wt.Path, func() (err error) {
			if rv.Uncommitted, err = repo.Changes(ctx, wt); err != nil {
				return err
			}
			rv.Special = worktree.SpecialAmong(wt.Path, rv.Uncommitted)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(rv.Special) > 0 {
			quoted := make([]string, len(rv.Special))
			for i, n := range rv.Special {
				quoted[i] = quoteUnsafe(n)
			}
			rv.Warnings = append(rv.Warnings, fmt.Sprintf("the agent left %d special file(s) (FIFO, socket or device) in place of files; git cannot record them, so they were left out of the commit and stay in the worktree %s: %s", len(rv.Special), wt.Path, strings.Join(quoted, ", ")))
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
	if t.SandboxNote != "" {
		rv.Warnings = append(rv.Warnings, t.SandboxNote)
	}
	rv.Warnings = append(rv.Warnings, unansweredQuestions(t.Commands)...)
	rv.Warnings = append(rv.Warnings, o.repositoryMCPWarnings()...)
	rv.Warnings = append(rv.Warnings, sensitiveChanges(rv.Stat, repo.ConfigValue(ctx, "core.hooksPath"))...)
	if rv.SubBranches, err = o.SubBranchesWithWork(ctx, t); err != nil {
		return nil, err
	}
	for _, sb := range rv.SubBranches {
		rv.Warnings = append(rv.Warnings, fmt.Sprintf("sub-agent branch %s holds %d commit(s) not in the task's branch: see it with `git log %s`; `agent discard %s` deletes it with the task", sb.Branch, sb.Commits, sb.Branch, t.ID))
	}
	for _, s := range t.Submodules {
		rv.Warnings = append(rv.Warnings, fmt.Sprintf("the agent changed files inside submodule %s: committed in that submodule's repository on branch %s (%s), not part of this task's merge; see it with `git -C %s log -p %s`", quoteUnsafe(s.Path), quoteUnsafe(s.Branch), short(s.Commit), quoteUnsafe(s.Path), quoteUnsafe(s.Branch)))
	}
	rv.Ignored, rv.IgnoredCount = t.Ignored, t.IgnoredCount
	if t.IgnoredCount > 0 {
		quoted := make([]string, len(t.Ignored))
		for i, n := range t.Ignored {
			quoted[i] = quoteUnsafe(n)
		}
		names := strings.Join(quoted, ", ")
		if t.IgnoredCount > len(t.Ignored) {
			names += fmt.Sprintf(", and %d more", t.IgnoredCount-len(t.Ignored))
		}
		rv.Warnings = append(rv.Warnings, fmt.Sprintf("the agent created %d file(s) that .gitignore keeps out of the commit (not merged; they go with the worktree %s): %s", t.IgnoredCount, t.Worktree, names))
	}
	var cut []string
	for _, c := range t.Commands {
		if c.CutShort || c.Running {
			cut = append(cut, quoteUnsafe(c.Command))
		}
	}
	if len(cut) > 0 {
		rv.Warnings = append(rv.Warnings, fmt.Sprintf("%d command(s) were cut short when the run was stopped: %s", len(cut), strings.Join(cut, "; ")))
	}
	if rv.Tests == nil {
		rv.Warnings = append(rv.Warnings, "the agent ran no tests")
	} else if !rv.Tests.Passed {
		rv.Warnings = append(rv.Warnings, rv.Tests.Problem())
	}
	rv.Warnings = append(rv.Warnings, environmentWarnings(t, rv.Tests)...)
	if notes := o.ProposedNotes(t); len(notes) > 0 {
		rv.Warnings = append(rv.Warnings, fmt.Sprintf("the agent proposes %d note(s) for this repository's memory, which every later task reads; they are kept only if you keep or merge the task: %s", len(notes), strings.Join(notes, " ")))
	}
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
		done := false
		err := o.onWorktree(ctx, wt.Path, func() error {
			ch, err := repo.Changes(ctx, wt)
			if err != nil || len(ch) == 0 {
				return err
			}
			// Committed and uncommitted work together, against the base.
			done = true
			return repo.DiffWorktree(ctx, wt, t.BaseCommit, w)
		})
		if err != nil || done {
			return err
		}
	}
	return repo.Diff(ctx, t.BaseCommit, tip, w)
}

// sensitivePaths are files that make tools run code on the user's machine
// once merged, without the user asking to build or run anything (git
// attributes and hooks, direnv on cd, editor tasks on open, CI on push,
// pre-commit): a change to one deserves a second look. Build files
// (Makefile, package.json) are not listed: they run when the user builds,
// and the diff is there to be read.
var sensitivePaths = []struct{ prefix, why string }{
	{".agent/", "agent's own project configuration: model endpoint, sandbox, hooks of later tasks"},
	{".git/", "git's own directory: its config and hooks run programs"},
	{".gitattributes", "selects git filters and diff/merge drivers"},
	{".gitmodules", "adds submodules"},
	{".githooks/", "git hooks"},
	{".husky/", "git hooks"},
	{".pre-commit-config.yaml", "pre-commit hooks"},
	{".envrc", "direnv runs it on cd"},
	{".vscode/", "editor tasks and settings"},
	{".idea/", "editor run configurations and settings"},
	{".devcontainer/", "dev container definition"},
	{".github/workflows/", "CI workflows"},
	{".github/actions/", "CI actions"},
	{".gitlab-ci.yml", "CI pipeline"},
	{".circleci/", "CI pipeline"},
	{".buildkite/", "CI pipeline"},
	{"Jenkinsfile", "CI pipeline"},
}

// sensitive says why p (a file, or with dir a directory, which a
// symlink may stand for) is sensitive, or "" when it is not: it is a
// sensitive file or lies under a sensitive directory, or, with dir, it is
// or holds one. A sensitive directory or file name counts at any depth
// (sub/.gitattributes, a nested .git).
func sensitive(p string, dir bool, hooks string) string {
	base := p[strings.LastIndex(p, "/")+1:]
	for _, s := range sensitivePaths {
		name := strings.TrimSuffix(s.prefix, "/")
		isDir := name != s.prefix
		switch {
		case p == s.prefix, base == s.prefix:
			return s.why
		case isDir && (strings.HasPrefix(p, s.prefix) || strings.Contains(p, "/"+s.prefix)):
			return s.why
		case dir && (p == name || base == name || strings.HasPrefix(s.prefix, p+"/")):
			return s.why
		}
	}
	if hooks != "" && !strings.HasPrefix(hooks, "/") {
		if strings.HasPrefix(p, hooks+"/") || (dir && (p == hooks || strings.HasPrefix(hooks, p+"/"))) {
			return "your core.hooksPath: git would run it"
		}
	}
	return ""
}

// sensitiveChanges lists warnings for changed files that run code when
// used, and for symlinks that point outside the repository or whose name
// or target is a sensitive path: `.agent -> tools/devcfg` makes a harmless
// looking directory the next task's configuration, `docs -> ../.git/hooks`
// gives later writes to docs to git's hooks.
func sensitiveChanges(st worktree.Stat, hooksPath string) []string {
	var out []string
	hooks := strings.TrimSuffix(strings.TrimPrefix(hooksPath, "./"), "/")
	for _, f := range st.Files {
		if f.Mode != "120000" {
			if why := sensitive(f.Path, false, hooks); why != "" {
				if strings.HasPrefix(why, "your core.hooksPath") {
					out = append(out, fmt.Sprintf("the task changes %s, in your core.hooksPath (%s): git would run it", f.Path, hooksPath))
				} else {
					out = append(out, fmt.Sprintf("the task changes %s (%s): review it before merging", f.Path, why))
				}
			}
			continue
		}
		if why := sensitive(f.Path, true, hooks); why != "" {
			out = append(out, fmt.Sprintf("the task adds a symlink %s -> %s in place of a sensitive path (%s): tools reading %s would read %s; review it before merging", f.Path, f.LinkTarget, why, f.Path, f.LinkTarget))
		}
		if strings.HasPrefix(f.LinkTarget, "/") || escapes(f.Path, f.LinkTarget) {
			out = append(out, fmt.Sprintf("the task adds a symlink %s -> %s, which points outside the repository", f.Path, f.LinkTarget))
			continue
		}
		target := path.Join(path.Dir(f.Path), f.LinkTarget)
		if why := sensitive(target, true, hooks); why != "" {
			out = append(out, fmt.Sprintf("the task adds a symlink %s -> %s, which points at the sensitive path %s (%s): writes through it change that; review it before merging", f.Path, f.LinkTarget, target, why))
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

// SubBranchesWithWork lists the task's sub-agent branches that hold
// commits not in the task's branch (what discarding the task also
// deletes).
func (o *Orchestrator) SubBranchesWithWork(ctx context.Context, t *store.Task) ([]SubBranch, error) {
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, err
	}
	tip, err := repo.BranchTip(ctx, t.Branch)
	if err != nil {
		return nil, err
	}
	subs, err := repo.SubBranches(ctx, t.Branch)
	if err != nil {
		return nil, err
	}
	var out []SubBranch
	for b, stip := range subs {
		from := tip
		if from == "" {
			from = t.BaseCommit
		}
		if n, err := repo.CountCommits(ctx, from, stip); err == nil && n > 0 {
			out = append(out, SubBranch{Branch: b, Commits: n})
		}
	}
	slices.SortFunc(out, func(a, b SubBranch) int { return strings.Compare(a.Branch, b.Branch) })
	return out, nil
}

// quoteUnsafe returns s as is when it is printable ASCII without quotes or
// backslashes, else Go-quoted (the way git quotes an unusual path): names
// and commands from the sandbox reach the terminal in warnings.
func quoteUnsafe(s string) string {
	for _, r := range s {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}

// gpuWarning tells the reviewer the sandbox could use GPUs: its commands
// ran with the GPU driver's device nodes and libraries.
func gpuWarning(gpus string) string {
	return "the sandbox had GPU access (--gpus " + gpus + "): its commands could run code on the GPU"
}
