package cli

import (
	"errors"
	"time"

	"github.com/localagent/agent/images"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// The JSON shapes commands print with --json. They are the stable surface
// scripts rely on (README "JSON output"): every field is always present,
// absent values are null, lists are [] (never null), and every command
// prints one object (streams: one object per line). They are built from
// the orchestrator's records here, so a change there does not change them
// silently.

// taskJSON is one task record.
type taskJSON struct {
	ID          string        `json:"id"`
	Prompt      string        `json:"prompt"`
	State       string        `json:"state"`
	Error       string        `json:"error"`
	Repo        string        `json:"repo"`
	BaseRef     string        `json:"base_ref"`
	BaseBranch  string        `json:"base_branch"`
	BaseCommit  string        `json:"base_commit"`
	Branch      string        `json:"branch"`
	Worktree    string        `json:"worktree"`
	Image       string        `json:"image"`
	LLM         string        `json:"llm"`
	Model       string        `json:"model"`
	Created     time.Time     `json:"created"`
	Updated     time.Time     `json:"updated"`
	Started     *time.Time    `json:"started"`
	Finished    *time.Time    `json:"finished"`
	Tokens      tokensJSON    `json:"tokens"`
	Result      string        `json:"result"`
	Commits     []string      `json:"commits"`
	Commands    []commandJSON `json:"commands"`
	Network     networkJSON   `json:"network"`
	Decision    string        `json:"decision"`
	MergeCommit string        `json:"merge_commit"`
}

type commandJSON struct {
	Command    string `json:"command"`
	ExitCode   *int   `json:"exit_code"`
	TimedOut   bool   `json:"timed_out"`
	OOMKilled  bool   `json:"oom_killed"`
	DurationMS int64  `json:"duration_ms"`
}

type networkJSON struct {
	Allow     []string `json:"allow"`
	Allowed   int      `json:"allowed"`
	Denied    int      `json:"denied"`
	EgressLog string   `json:"egress_log"`
}

// tokensJSON is a task's token counts and speed totals (zero when not
// measured).
type tokensJSON struct {
	Prompt          int     `json:"prompt"`
	Completion      int     `json:"completion"`
	Requests        int     `json:"requests"`
	PromptProcessed int     `json:"prompt_processed"`
	PromptCached    int     `json:"prompt_cached"`
	FirstTokenMS    int64   `json:"first_token_ms_total"`
	GenTokens       int     `json:"gen_tokens"`
	GenMS           float64 `json:"gen_ms"`
	ServerTimings   bool    `json:"server_timings"`
	GenPerSecond    float64 `json:"gen_tokens_per_s"`
	AvgFirstTokenMS int64   `json:"avg_first_token_ms"`
}

func newTokensJSON(t store.Tokens) tokensJSON {
	return tokensJSON{Prompt: t.Prompt, Completion: t.Completion, Requests: t.Requests, PromptProcessed: t.PromptProcessed,
		PromptCached: t.PromptCached, FirstTokenMS: t.FirstTokenMS, GenTokens: t.GenTokens, GenMS: t.GenMS,
		ServerTimings: t.ServerTimings, GenPerSecond: t.GenPerSecond, AvgFirstTokenMS: t.AvgFirstTokenMS}
}

func newCommandJSON(c store.Command) commandJSON {
	return commandJSON{Command: c.Command, ExitCode: c.ExitCode, TimedOut: c.TimedOut, OOMKilled: c.OOMKilled, DurationMS: c.DurationMS}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func newTaskJSON(t *store.Task) *taskJSON {
	if t == nil {
		return nil
	}
	cmds := make([]commandJSON, 0, len(t.Commands))
	for _, c := range t.Commands {
		cmds = append(cmds, newCommandJSON(c))
	}
	return &taskJSON{
		ID: t.ID, Prompt: t.Prompt, State: string(t.State), Error: t.Error,
		Repo: t.Repo, BaseRef: t.BaseRef, BaseBranch: t.BaseBranch, BaseCommit: t.BaseCommit,
		Branch: t.Branch, Worktree: t.Worktree, Image: t.Image, LLM: t.LLM, Model: t.Model,
		Created: t.Created, Updated: t.Updated, Started: timePtr(t.Started), Finished: timePtr(t.Finished),
		Tokens: newTokensJSON(t.Tokens), Result: t.Result, Commits: nonNil(t.Commits), Commands: cmds,
		Network: networkJSON{Allow: nonNil(t.Network.Allow), Allowed: t.Network.Allowed,
			Denied: t.Network.Denied, EgressLog: t.Network.EgressLog},
		Decision: t.Decision, MergeCommit: t.MergeCommit,
	}
}

// outcomeJSON is what a decision did.
type outcomeJSON struct {
	Task     string `json:"task"`
	Decision string `json:"decision"`
	State    string `json:"state"`
	Commit   string `json:"commit"`
	Checkout string `json:"checkout"`
	Message  string `json:"message"`
	// Notes are things to know about the result (e.g. an unsigned merge
	// commit in a repository that signs its commits); [] when none.
	Notes []string `json:"notes"`
}

func newOutcomeJSON(task string, o *orchestrator.Outcome) *outcomeJSON {
	if o == nil {
		return nil
	}
	return &outcomeJSON{Task: task, Decision: string(o.Decision), State: o.State, Commit: o.Commit, Checkout: o.Checkout, Message: o.Message, Notes: []string{}}
}

// errorJSON is the error object: {"error": {...}} on stdout when a --json
// command fails, and the "error" field of a task's result line.
type errorJSON struct {
	Message string `json:"message"`
	// Kind is "usage" (exit 2), "not_green" (exit 3: a test gate kept the
	// branch), "interrupted" (exit 130) or "error" (exit 1 or a command's
	// own exit code).
	Kind string `json:"kind"`
	Code int    `json:"exit_code"`
}

func newErrorJSON(err error, interrupted bool) *errorJSON {
	if err == nil {
		return nil
	}
	code := exitCodeOf(err, interrupted)
	kind := "error"
	switch code {
	case ExitUsage:
		kind = "usage"
	case ExitInterrupted:
		kind = "interrupted"
	case ExitNotGreen:
		kind = "not_green"
	}
	return &errorJSON{Message: err.Error(), Kind: kind, Code: code}
}

// taskResult is the last line of `agent task --json` and `resume --json`.
type taskResult struct {
	Kind    string       `json:"kind"` // "result"
	Task    *taskJSON    `json:"task"`
	Review  *reviewJSON  `json:"review"`
	Outcome *outcomeJSON `json:"outcome"`
	Error   *errorJSON   `json:"error"`
	// Gate is the test gate of --approve merge-if-green/squash-if-green,
	// null for other decisions.
	Gate *gateJSON `json:"gate"`
}

// gateJSON says whether the test gate let the merge through, and why not.
type gateJSON struct {
	Passed  bool   `json:"passed"`
	Message string `json:"message"`
}

func newTaskResult(t *store.Task, rv *orchestrator.Review, out *orchestrator.Outcome, err error) taskResult {
	res := taskResult{Kind: "result", Task: newTaskJSON(t), Review: newReviewJSON(rv), Error: newErrorJSON(err, errors.Is(err, ErrCancelled))}
	if t != nil {
		res.Outcome = newOutcomeJSON(t.ID, out)
	}
	return res
}

// markJSONWritten records that the command already printed its final
// JSON (with any error in it), so Main does not add an error object.
func markJSONWritten(ios *IOStreams) { ios.jsonDone = true }

// reviewJSON is a task's review.
type reviewJSON struct {
	Task        string        `json:"task"`
	Prompt      string        `json:"prompt"`
	State       string        `json:"state"`
	Branch      string        `json:"branch"`
	Base        string        `json:"base"`
	BaseBranch  string        `json:"base_branch"`
	BaseMoved   bool          `json:"base_moved"`
	Commits     []commitJSON  `json:"commits"`
	Stat        statJSON      `json:"stat"`
	Unmerged    int           `json:"unmerged"`
	Uncommitted []string      `json:"uncommitted"`
	Commands    []commandJSON `json:"commands"`
	Tests       *testsJSON    `json:"tests"`
	Network     networkJSON   `json:"network"`
	Warnings    []string      `json:"warnings"`
	Result      string        `json:"result"`
	Model       string        `json:"model"`
	Tokens      tokensJSON    `json:"tokens"`
	Worktree    string        `json:"worktree"`
}

type commitJSON struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Author  string `json:"author"`
}

type statJSON struct {
	Files   []fileJSON `json:"files"`
	Added   int        `json:"added"`
	Deleted int        `json:"deleted"`
}

type fileJSON struct {
	Path       string `json:"path"`
	Status     string `json:"status"`
	Added      int    `json:"added"`
	Deleted    int    `json:"deleted"`
	Binary     bool   `json:"binary"`
	Mode       string `json:"mode"`
	LinkTarget string `json:"link_target"`
}

type testsJSON struct {
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code"`
	Passed   bool   `json:"passed"`
	// Verdict is passed, failed, masked or unknown; Reason says what
	// decided it beyond the exit code ("" when the exit code did).
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Runs    int    `json:"runs"`
	// Source is "host" (the configured test command, run by agent after
	// the agent's last turn) or "agent" (the agent's last test run).
	Source string `json:"source"`
	// OutputTail is the end of the host run's output ("" for agent runs).
	OutputTail string `json:"output_tail"`
}

func newReviewJSON(rv *orchestrator.Review) *reviewJSON {
	if rv == nil {
		return nil
	}
	out := &reviewJSON{
		Task: rv.Task, Prompt: rv.Prompt, State: rv.State, Branch: rv.Branch, Base: rv.Base, BaseBranch: rv.BaseBranch,
		BaseMoved: rv.BaseMoved, Commits: []commitJSON{}, Stat: statJSON{Files: []fileJSON{}, Added: rv.Stat.Added, Deleted: rv.Stat.Deleted},
		Unmerged: rv.Unmerged, Uncommitted: nonNil(rv.Uncommitted), Commands: []commandJSON{},
		Network:  networkJSON{Allow: nonNil(rv.Network.Allow), Allowed: rv.Network.Allowed, Denied: rv.Network.Denied, EgressLog: rv.Network.EgressLog},
		Warnings: nonNil(rv.Warnings), Result: rv.Result, Model: rv.Model, Tokens: newTokensJSON(rv.Tokens), Worktree: rv.Worktree,
	}
	for _, c := range rv.Commits {
		out.Commits = append(out.Commits, commitJSON{ID: c.ID, Subject: c.Subject, Author: c.Author})
	}
	for _, f := range rv.Stat.Files {
		out.Stat.Files = append(out.Stat.Files, fileJSON{Path: f.Path, Status: f.Status, Added: f.Added, Deleted: f.Deleted,
			Binary: f.Binary, Mode: f.Mode, LinkTarget: f.LinkTarget})
	}
	for _, c := range rv.Commands {
		out.Commands = append(out.Commands, newCommandJSON(c))
	}
	if rv.Tests != nil {
		out.Tests = &testsJSON{Command: rv.Tests.Command, ExitCode: rv.Tests.ExitCode, Passed: rv.Tests.Passed,
			Verdict: string(rv.Tests.Verdict), Reason: rv.Tests.Reason, Runs: rv.Tests.Runs, Source: rv.Tests.Source, OutputTail: rv.Tests.OutputTail}
	}
	return out
}

// sandboxJSON is one sandbox (sandbox create --json, sandbox ls --json).
type sandboxJSON struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Image     string            `json:"image"`
	Workspace string            `json:"workspace"`
	User      string            `json:"user"`
	State     string            `json:"state"`
	Created   time.Time         `json:"created"`
	Labels    map[string]string `json:"labels"`
	Notice    string            `json:"notice"`
	// Pool is "idle" or "claimed" for a warm pool member of this state
	// directory.
	Pool string `json:"pool,omitempty"`
}

func newSandboxJSON(sb *sandbox.Sandbox) sandboxJSON {
	labels := sb.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return sandboxJSON{ID: sb.ID, Name: sb.Name, Image: sb.Image, Workspace: sb.Workspace, User: sb.User,
		State: sb.State, Created: sb.Created, Labels: labels, Notice: sb.Notice, Pool: sb.Pool}
}

// imageJSON is one project image (images list --json); id, size,
// created and build are zero values when the image is missing.
type imageJSON struct {
	Name    string     `json:"name"`
	Ref     string     `json:"ref"`
	Present bool       `json:"present"`
	ID      string     `json:"id"`
	Size    int64      `json:"size"`
	Created *time.Time `json:"created"`
	Build   string     `json:"build"`
}

func newImageJSON(im images.Info) imageJSON {
	return imageJSON{Name: im.Name, Ref: im.Ref, Present: im.Present, ID: im.ID, Size: im.Size, Created: timePtr(im.Created), Build: im.Build}
}
