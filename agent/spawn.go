package agent

import "context"

// Spawner runs sub-agents for the spawn_agents tool. The orchestrator
// implements it: a child worktree and sandbox per sub-agent, concurrency
// bounded by the LLM server's free slots, each child's work merged back
// into the parent's workspace. The tool is offered only when
// Options.Spawner is set.
//
// Spawn blocks until every task has finished and returns one SubResult per
// task, in the order given. A sub-agent that fails is a SubResult with
// IsError set; the error return is for failures that stop the whole call
// (cancellation, no sandbox could be created), which the model sees as a
// failed tool call unless ctx was cancelled.
type Spawner interface {
	Spawn(ctx context.Context, tasks []SubTask) ([]SubResult, error)
}

// SubTask is one sub-agent's assignment, as the model wrote it.
type SubTask struct {
	// Name is short and unique within one call ([A-Za-z0-9._-], at most 40).
	Name string `json:"name"`
	// Prompt is the sub-agent's complete, self-contained instructions.
	Prompt string `json:"prompt"`
	// Type is the sub-agent's type (see AgentType); "" means
	// DefaultAgentType.
	Type string `json:"type,omitempty"`
}

// SubResult is what one sub-agent handed back.
type SubResult struct {
	Name string `json:"name"`
	// Summary is the sub-agent's final answer, or why it failed.
	Summary string `json:"summary"`
	IsError bool   `json:"is_error,omitempty"`
}
