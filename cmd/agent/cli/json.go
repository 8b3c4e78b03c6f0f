package cli

import (
	"errors"
	"time"

	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
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
	Tokens      store.Tokens  `json:"tokens"`
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
		cmds = append(cmds, commandJSON(c))
	}
	return &taskJSON{
		ID: t.ID, Prompt: t.Prompt, State: string(t.State), Error: t.Error,
		Repo: t.Repo, BaseRef: t.BaseRef, BaseBranch: t.BaseBranch, BaseCommit: t.BaseCommit,
		Branch: t.Branch, Worktree: t.Worktree, Image: t.Image, LLM: t.LLM, Model: t.Model,
		Created: t.Created, Updated: t.Updated, Started: timePtr(t.Started), Finished: timePtr(t.Finished),
		Tokens: t.Tokens, Result: t.Result, Commits: nonNil(t.Commits), Commands: cmds,
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
	Kind    string               `json:"kind"` // "result"
	Task    *taskJSON            `json:"task"`
	Review  *orchestrator.Review `json:"review"`
	Outcome *outcomeJSON         `json:"outcome"`
	Error   *errorJSON           `json:"error"`
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
	res := taskResult{Kind: "result", Task: newTaskJSON(t), Review: rv, Error: newErrorJSON(err, errors.Is(err, ErrCancelled))}
	if t != nil {
		res.Outcome = newOutcomeJSON(t.ID, out)
	}
	return res
}

// markJSONWritten records that the command already printed its final
// JSON (with any error in it), so Main does not add an error object.
func markJSONWritten(ios *IOStreams) { ios.jsonDone = true }
