package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
	"github.com/localagent/agent/agent/toolparse"
)

// ToolMode says how tool calls are exchanged with the model.
type ToolMode string

const (
	// ToolModeAuto starts with native tool calls and downgrades to text mode
	// when the server rejects tools or the model sends native calls without
	// their required arguments.
	ToolModeAuto ToolMode = "auto"
	// ToolModeNative uses the API's tools parameter only.
	ToolModeNative ToolMode = "native"
	// ToolModeText describes the tools in the system prompt and parses
	// calls out of the reply text (for models without native tool support).
	ToolModeText ToolMode = "text"
)

// Environment holds the facts about the workspace the model is told.
type Environment struct {
	// Offline is true when the sandbox has no network.
	Offline bool
	// Workspace is the workspace path inside the sandbox; default /workspace.
	Workspace string
	// Branch is the git branch the work lands on.
	Branch string
	// BaseCommit is the commit the branch started from.
	BaseCommit string
}

// Options configure an Agent. Client and Workspace are required.
type Options struct {
	Client llm.Client
	// Slot pins every request of this agent to one llama-server slot with
	// prompt caching, so each turn re-processes only what it appends; nil
	// lets the server choose (any OpenAI-compatible server).
	Slot      *int
	Workspace Workspace
	// Model is the model name sent with each request ("" lets the server pick).
	Model string
	// MaxIterations bounds model requests per Run (per user message); default 25.
	MaxIterations int
	// ContextTokens is the per-slot context window (llama-server's n_ctx);
	// default 8192. Compaction thresholds are fractions of it.
	ContextTokens int
	// MaxReplyTokens caps max_tokens of each request (which is also never
	// more than the window has left); default half of ContextTokens.
	MaxReplyTokens int
	// MaxReplyBytes stops a reply that streams on and on (a looping model,
	// a broken server); default 1 MiB.
	MaxReplyBytes int
	// Hooks run inside the sandbox; see Hooks.
	Hooks Hooks
	// Sink receives the agent's events; default event.Discard.
	Sink event.Sink
	// SessionPath is the JSONL transcript; empty: no transcript.
	SessionPath string
	// Resume continues the transcript at SessionPath instead of creating it.
	Resume bool
	// ArtifactDir is the host directory long tool outputs are stored in
	// (never inside the workspace); empty: long outputs are cut instead.
	ArtifactDir string
	// Env are the facts the system prompt states.
	Env Environment
	// Spawner, when set, offers the spawn_agents tool.
	Spawner Spawner
	// ToolMode is auto (default), native or text.
	ToolMode ToolMode
	// Name is the sub-agent's name stamped on events ("" for the main agent).
	Name string
	// Task is the task id stamped on events.
	Task string
	// CompactFirst compacts the context (older tool outputs first, no
	// model request) before the first request of the next Run: the user
	// asked for it. The transcript keeps everything.
	CompactFirst bool
	// Memory, when set, is read into the system prompt and offers the
	// remember tool.
	Memory Memory
	// AllowedTools, when set, are the only tools offered (names or
	// patterns like "git_*"; see AgentType).
	AllowedTools []string
	// User is the person who can be asked (ask_user, present_plan); nil
	// when there is no terminal.
	User User
	// PlanMode allows only reading tools until the user approves a plan
	// presented with present_plan.
	PlanMode bool
}

// StopReason says why a Run ended.
type StopReason string

const (
	// StopDone: the model answered without calling a tool.
	StopDone StopReason = "done"
	// StopMaxIterations: MaxIterations requests were made.
	StopMaxIterations StopReason = "max_iterations"
	// StopDoomLoop: the model sent the same tool calls three times in a row.
	StopDoomLoop StopReason = "doom_loop"
	// StopRepeatedFailure: the same call failed a fourth time after a warning.
	StopRepeatedFailure StopReason = "repeated_failure"
	// StopCancelled: the context was cancelled (Ctrl-C).
	StopCancelled StopReason = "cancelled"
	// StopError: an infrastructure failure; Run's error says which.
	StopError StopReason = "error"
)

// ToolCallRecord is one tool call as it ran, for review summaries.
type ToolCallRecord struct {
	ID        string        `json:"id"`
	Name      string        `json:"name"`
	Args      string        `json:"args"`
	ExitCode  *int          `json:"exit_code,omitempty"`
	IsError   bool          `json:"is_error,omitempty"`
	Truncated bool          `json:"truncated,omitempty"`
	Duration  time.Duration `json:"duration"`
}

// Result is what one Run did.
type Result struct {
	// Text is the model's final answer, or a sentence saying why the run stopped.
	Text       string     `json:"text"`
	StopReason StopReason `json:"stop_reason"`
	// Iterations is the number of model requests made in this Run.
	Iterations int `json:"iterations"`
	// Usage totals the tokens reported (or estimated) for this Run.
	Usage llm.Usage `json:"usage"`
	// ToolCalls lists every tool call of this Run, in order.
	ToolCalls   []ToolCallRecord `json:"tool_calls"`
	SessionID   string           `json:"session_id,omitempty"`
	SessionPath string           `json:"session_path,omitempty"`
}

// Errors a Run can return besides the client's and the workspace's.
var (
	// ErrContextFull: even after compaction the request would not fit the
	// model's context window.
	ErrContextFull = errors.New("the conversation does not fit the model's context window")
	// ErrReplyTooLong: the model streamed more than MaxReplyBytes in one reply.
	ErrReplyTooLong = errors.New("the model's reply did not end")
)

// Agent is one conversation with the model over one workspace. It is not
// safe for concurrent use: call Run from one goroutine at a time.
type Agent struct {
	opts   Options
	runner *toolRunner
	sink   event.Sink
	mode   ToolMode // the mode in use now: native or text

	sess   *session.Writer
	header session.Header

	// history is the context sent to the model: history[0] is the system
	// prompt, then the conversation (possibly compacted). The transcript
	// keeps everything.
	history      []llm.Message
	started      bool
	hookOut      string
	projInstr    string
	projFile     string
	memNotes     string
	mcpConns     []*mcpServerConn
	tokens       tokenCounter
	toolsTok     int // estimated tokens of the tools parameter
	nextID       int // for call ids the server did not give
	parser       *toolparse.Parser
	actionParser *toolparse.Parser
	lean         bool   // small window: short tool definitions
	toolsNotice  string // what the small window left out, told at the start
	noCount      bool   // the server cannot count tokens: estimate

	lastMaxTokens int // max_tokens of the last request, for the cut-off hint
}

// New checks opts, fills in defaults and opens the session transcript.
// Nothing is sent to the model or the workspace until Run.
func New(opts Options) (*Agent, error) {
	if opts.Client == nil {
		return nil, errors.New("agent: Options.Client is required")
	}
	if opts.Workspace == nil {
		return nil, errors.New("agent: Options.Workspace is required")
	}
	if opts.MaxIterations <= 0 {
		opts.MaxIterations = 25
	}
	if opts.ContextTokens <= 0 {
		opts.ContextTokens = 8192
	}
	if opts.MaxReplyTokens <= 0 {
		// Half the window: room to write a whole file in one call, while
		// a model that rambles still stops long before the window is full.
		opts.MaxReplyTokens = max(1024, opts.ContextTokens/2)
	}
	if opts.MaxReplyBytes <= 0 {
		opts.MaxReplyBytes = 1 << 20
	}
	if opts.Sink == nil {
		opts.Sink = event.Discard
	}
	if opts.Env.Workspace == "" {
		opts.Env.Workspace = "/workspace"
	}
	switch opts.ToolMode {
	case "":
		opts.ToolMode = ToolModeAuto
	case ToolModeAuto, ToolModeNative, ToolModeText:
	default:
		return nil, fmt.Errorf("agent: unknown tool mode %q (want auto, native or text)", opts.ToolMode)
	}
	if _, err := catalog(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{opts: opts, sink: opts.Sink}
	a.mode = ToolModeNative
	if opts.ToolMode == ToolModeText {
		a.mode = ToolModeText
	}
	if err := a.openSession(); err != nil {
		return nil, err
	}
	prefix := a.header.ID + "-"
	a.runner = newToolRunner(opts.Workspace, newArtifactStore(opts.ArtifactDir, prefix), opts.Spawner)
	a.runner.hooks = opts.Hooks
	a.runner.memory = opts.Memory
	a.runner.allow = opts.AllowedTools
	a.runner.user = opts.User
	a.runner.planMode = opts.PlanMode
	a.runner.online = !opts.Env.Offline
	a.runner.todos = lastTodos(a.history)
	a.runner.hookSink = a.hookEvent
	names := a.runner.names()
	cat := mustCatalog()
	// The tool definitions must leave most of the window to the work: in a
	// smaller window the optional tools are left out first, then the core
	// tools get their short descriptions.
	budget := opts.ContextTokens * leanPct / 100
	if need := estimateTools(cat.wire, names) + len(promptText)/charsPerToken; need > budget {
		all := names
		a.runner.coreOnly = true
		names = a.runner.names()
		a.lean = estimateTools(cat.wire, names)+len(promptText)/charsPerToken > budget
		a.toolsNotice = toolsLeftOut(opts.ContextTokens, need, all, names, a.lean)
	}
	a.refreshTools()
	return a, nil
}

// refreshTools recomputes what depends on the offered tools (after MCP
// servers added theirs).
func (a *Agent) refreshTools() {
	names := a.runner.names()
	a.toolsTok = estimateTools(a.toolDefs(), names)
	a.parser = toolparse.New(append(names, aliasNames()...)...).WithCheck(func(name, args string) bool {
		_, err := a.runner.checkCall(canonicalTool(name), []byte(args))
		return err == nil
	})
	// Only our own names hint at an action: aliases like "run(" are common
	// words in a final summary.
	a.actionParser = toolparse.New(names...)
}

// openSession creates or reopens the transcript.
func (a *Agent) openSession() error {
	o := a.opts
	h := session.Header{
		Model: o.Model, Agent: o.Name, Task: o.Task,
		Workspace: o.Env.Workspace, Branch: o.Env.Branch, BaseCommit: o.Env.BaseCommit, Offline: o.Env.Offline,
	}
	if o.SessionPath == "" {
		if o.Resume {
			return errors.New("agent: Resume needs Options.SessionPath")
		}
		h.ID = session.NewID()
		a.header = h
		return nil
	}
	if !o.Resume {
		w, hh, err := session.Create(o.SessionPath, h)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		a.sess, a.header = w, hh
		return nil
	}
	w, hh, msgs, err := session.Open(o.SessionPath)
	if err != nil {
		return fmt.Errorf("agent: resuming: %w", err)
	}
	a.sess, a.header = w, hh
	a.history = restoreHistory(msgs)
	if o.ToolMode == ToolModeAuto {
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == llm.RoleSystem {
				if strings.Contains(msgs[i].Content, textModeMarker) {
					a.mode = ToolModeText // it had switched before
				}
				break
			}
		}
	}
	return nil
}

// lastTodos finds the todo list the last todo_write call in a resumed
// conversation set.
func lastTodos(h []llm.Message) []todoItem {
	for i := len(h) - 1; i >= 0; i-- {
		calls := h[i].ToolCalls
		for j := len(calls) - 1; j >= 0; j-- {
			if canonicalTool(calls[j].Function.Name) != ToolTodoWrite {
				continue
			}
			var a struct {
				Todos []todoItem `json:"todos"`
			}
			if json.Unmarshal(canonicalArgs(ToolTodoWrite, normalizeArgs([]byte(calls[j].Function.Arguments))), &a) == nil {
				return a.Todos
			}
		}
	}
	return nil
}

// Close closes the transcript.
func (a *Agent) Close() error {
	a.closeMCP()
	if a.sess == nil {
		return nil
	}
	return a.sess.Close()
}

// SessionID is the transcript's id (also used to name artifacts).
func (a *Agent) SessionID() string { return a.header.ID }

// Messages returns a copy of the context as it would be sent now.
func (a *Agent) Messages() []llm.Message { return append([]llm.Message(nil), a.history...) }

func (a *Agent) emit(e event.Event) {
	e.Time = time.Now()
	e.Agent = a.opts.Name
	e.Task = a.opts.Task
	a.sink.Emit(e)
}

func (a *Agent) hookEvent(hook string, res ToolResult) {
	// The sandbox's shell reports a silent command as "(no output)".
	if out := strings.TrimSpace(res.Output); !hookFailed(res) && (out == "" || out == "(no output)") {
		return // a quiet, successful hook is not news
	}
	a.emit(event.Event{Kind: event.Notice, Text: "hook " + hook + ": " + shorten(res.Output, 512, "cut"),
		ExitCode: res.ExitCode, IsError: hookFailed(res), Duration: res.Duration})
}

// record appends m to the context and the transcript. A transcript that
// cannot be written is an infrastructure failure: the run stops rather than
// losing the record of what the agent did.
func (a *Agent) record(m llm.Message) error {
	m2 := m
	m2.Reasoning = "" // kept in the transcript, never sent back
	a.history = append(a.history, m2)
	if a.sess != nil {
		if err := a.sess.Append(m); err != nil {
			return fmt.Errorf("agent: transcript: %w", err)
		}
	}
	return nil
}

// appendTranscript writes m to the transcript only.
func (a *Agent) appendTranscript(m llm.Message) error {
	if a.sess == nil {
		return nil
	}
	if err := a.sess.Append(m); err != nil {
		return fmt.Errorf("agent: transcript: %w", err)
	}
	return nil
}

// Run sends prompt as the next user message and drives the conversation
// until the model answers without a tool call, a guard stops it, or ctx is
// cancelled. With an empty prompt it continues a resumed conversation.
//
// Tool failures are results for the model; the error is for infrastructure
// failures (LLM server, workspace, transcript), cancellation (wrapping
// ctx.Err()) and ErrContextFull/ErrReplyTooLong. The Result is filled in
// either way.
func (a *Agent) Run(ctx context.Context, prompt string) (Result, error) {
	res := Result{SessionID: a.header.ID}
	if a.sess != nil {
		res.SessionPath = a.sess.Path()
	}
	err := a.run(ctx, prompt, &res)
	if err != nil {
		if ctx.Err() != nil {
			res.StopReason = StopCancelled
			res.Text = "cancelled"
			err = fmt.Errorf("agent: run stopped: %w", ctx.Err())
		} else {
			res.StopReason = StopError
			res.Text = err.Error()
			a.emit(event.Event{Kind: event.Error, Text: res.Text})
		}
	}
	a.emit(event.Event{Kind: event.Done, Text: res.Text, State: string(res.StopReason)})
	return res, err
}

// toolsLeftOut says which tools a small window left out and the window that
// would offer them all: need is the estimate of the full definitions and
// the base prompt, which may take leanPct of the window.
func toolsLeftOut(window, need int, all, kept []string, lean bool) string {
	has := make(map[string]bool, len(kept))
	for _, n := range kept {
		has[n] = true
	}
	var out []string
	for _, n := range all {
		if !has[n] {
			out = append(out, n)
		}
	}
	msg := fmt.Sprintf("the %d-token context window leaves no room for every tool: left out %s", window, strings.Join(out, ", "))
	if lean {
		msg += "; the other tools get short descriptions"
	}
	return msg + fmt.Sprintf(". Their definitions and the prompt need about %d tokens, which fits a window of %d tokens or more (agent.context_tokens)",
		need, (need*100+leanPct-1)/leanPct)
}
