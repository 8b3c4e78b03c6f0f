package toolbox

import "encoding/json"

// WorkspaceRoot is where the workspace is mounted inside every sandbox.
// Relative tool paths resolve against it; paths that leave it are refused.
const WorkspaceRoot = "/workspace"

// Tool names understood by the toolbox. They are the names local models are
// trained on (see DESIGN.md) and must not change.
const (
	ToolReadFile  = "read_file"
	ToolWriteFile = "write_file"
	ToolEditFile  = "edit_file"
	ToolMultiEdit = "multi_edit"
	ToolListDir   = "list_dir"
	ToolGlob      = "glob"
	ToolGrep      = "grep"
	ToolBash      = "bash"
	// OpPing answers at once; used to check that a session is alive.
	OpPing = "ping"
	// OpCancel stops the running request whose ID is in CancelArgs.
	OpCancel = "cancel"
)

// Request is one framed call to the toolbox. On the wire a session carries
// one JSON object per line in each direction (JSON escapes newlines, so a
// line is always a whole frame). Responses may come back out of order and are
// matched by ID, so read-only tools can run concurrently in one session.
//
// The host draws each ID at random (below 2^53, so every JSON reader keeps
// it exact) and accepts exactly one response per request it sent: a frame
// for any other ID means something besides the toolbox wrote to the
// session, and the host ends it.
type Request struct {
	ID   uint64          `json:"id"`
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args,omitempty"`
}

// MaxResponseBytes bounds one response frame, newline included. The
// toolbox cuts a response's output to stay under it (outputs are capped far
// below it anyway), and the host ends a session that sends a longer frame:
// what the sandbox writes must never make the host grow.
const MaxResponseBytes = 4 << 20

// CancelArgs are the arguments of OpCancel.
type CancelArgs struct {
	ID uint64 `json:"id"`
}

// Response is the toolbox's answer to one Request.
//
// A tool that fails (file not found, edit string not unique, non-zero exit,
// bad arguments, unknown tool) is still a normal Response with IsError set:
// it is a result for the model, not a transport failure.
type Response struct {
	ID uint64 `json:"id"`
	// Output is the text the model sees.
	Output string `json:"output"`
	// IsError marks a failed tool call.
	IsError bool `json:"is_error,omitempty"`

	// The following are set by the bash tool only.
	ExitCode  *int `json:"exit_code,omitempty"`
	TimedOut  bool `json:"timed_out,omitempty"`
	OOMKilled bool `json:"oom_killed,omitempty"`
	// Truncated is set by any tool whose output was capped.
	Truncated bool `json:"truncated,omitempty"`

	DurationMS int64 `json:"duration_ms"`
}
