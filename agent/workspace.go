package agent

import (
	"context"
	"encoding/json"
	"time"
)

// Workspace is the only way the agent touches the task's files or runs a
// command. The orchestrator implements it over a sandbox container (every
// call goes through the Docker exec API); the agent package never sees
// Docker, so no tool can have a host execution path.
//
// Call runs one workspace tool — read_file, write_file, edit_file,
// multi_edit, list_dir, glob, grep, bash — with the JSON arguments the model
// gave (already validated against the tool's schema). A tool that fails is a
// ToolResult with IsError set; an error return means the sandbox itself
// failed (engine gone, container stopped, protocol broken).
type Workspace interface {
	Call(ctx context.Context, tool string, args json.RawMessage) (ToolResult, error)
}

// ToolResult is what one tool call produced.
type ToolResult struct {
	Output    string
	IsError   bool
	ExitCode  *int // bash only
	TimedOut  bool // bash only
	OOMKilled bool // bash only
	Truncated bool
	Duration  time.Duration
}
