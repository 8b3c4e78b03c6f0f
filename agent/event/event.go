// Package event defines the typed events the agent loop and the orchestrator
// emit. Renderers in cmd/agent turn them into a live terminal view, plain
// lines or JSON lines; the same stream feeds transcripts and review summaries.
// No package below cmd writes to the terminal: it emits events instead.
package event

import (
	"sync"
	"time"
)

// Kind says what happened.
type Kind string

const (
	TextDelta     Kind = "text_delta"     // Text: visible model output
	ThinkingDelta Kind = "thinking_delta" // Text: reasoning output
	ToolStarted   Kind = "tool_started"   // Tool, Args
	ToolFinished  Kind = "tool_finished"  // Tool, ExitCode, Duration, IsError, TimedOut, OOMKill, Text (short summary)
	Usage         Kind = "usage"          // PromptTokens, CompletionTokens, PromptProcessed, PromptCached
	Egress        Kind = "egress"         // Text: host:port, Allowed
	SubAgent      Kind = "sub_agent"      // Agent, State
	Progress      Kind = "progress"       // Text: a step of something slow (image build, server load)
	Notice        Kind = "notice"         // Text: something the user should know
	Error         Kind = "error"          // Text
	Done          Kind = "done"           // Text: final answer or reason for stopping
)

// Event is one thing that happened. Only the fields its Kind names are set.
type Event struct {
	Time  time.Time `json:"time"`
	Kind  Kind      `json:"kind"`
	Task  string    `json:"task,omitempty"`
	Agent string    `json:"agent,omitempty"` // "" for the main agent, else the sub-agent's name

	Text     string        `json:"text,omitempty"`
	Tool     string        `json:"tool,omitempty"`
	CallID   string        `json:"call_id,omitempty"`
	Args     string        `json:"args,omitempty"`
	ExitCode *int          `json:"exit_code,omitempty"`
	IsError  bool          `json:"is_error,omitempty"`
	TimedOut bool          `json:"timed_out,omitempty"`  // ToolFinished: the command hit its timeout
	OOMKill  bool          `json:"oom_killed,omitempty"` // ToolFinished: the command was OOM-killed
	Duration time.Duration `json:"duration,omitempty"`
	Allowed  bool          `json:"allowed,omitempty"`
	State    string        `json:"state,omitempty"`

	PromptTokens     int `json:"prompt_tokens,omitempty"`
	CompletionTokens int `json:"completion_tokens,omitempty"`
	// Output is the start of a tool's output (ToolFinished; at most
	// OutputLimit bytes), for views that expand a tool call.
	Output string `json:"output,omitempty"`
	// OutputTail is the end of a tool's output (ToolFinished; at most
	// OutputLimit bytes): where test runners print their summary.
	OutputTail string `json:"output_tail,omitempty"`
	// Speed are the figures of the model request a Usage event counts.
	Speed *Speed `json:"speed,omitempty"`
	// Slot is the llama-server slot the agent is pinned to (Usage; nil:
	// none).
	Slot *int `json:"slot,omitempty"`
}

// OutputLimit bounds Event.Output.
const OutputLimit = 2048

// Speed are one model request's speed figures.
type Speed struct {
	// PromptProcessed prompt tokens were computed, PromptCached taken from
	// the server's prompt cache (known only from the server's timings).
	PromptProcessed int `json:"prompt_processed"`
	PromptCached    int `json:"prompt_cached"`
	// FirstTokenMS is the time from sending the request to the first
	// streamed byte of the reply (prompt processing, mostly).
	FirstTokenMS int64 `json:"first_token_ms"`
	// GenTokens tokens were generated in GenMS.
	GenTokens int     `json:"gen_tokens"`
	GenMS     float64 `json:"gen_ms"`
	// Server says the figures are the server's own timings; otherwise they
	// are measured by the client from the stream.
	Server bool `json:"server,omitempty"`
}

// GenPerSecond is the generation speed in tokens per second (0: unknown).
func (s Speed) GenPerSecond() float64 {
	if s.GenMS <= 0 {
		return 0
	}
	return float64(s.GenTokens) / s.GenMS * 1000
}

// Sink receives events. Implementations must be safe for concurrent use:
// sub-agents emit from their own goroutines.
type Sink interface {
	Emit(Event)
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(Event)

// Emit calls f(e).
func (f SinkFunc) Emit(e Event) { f(e) }

// Discard drops every event.
var Discard Sink = SinkFunc(func(Event) {})

// Recorder keeps every event; for tests and review summaries.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Emit records e.
func (r *Recorder) Emit(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of what was recorded.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Tee sends every event to each sink in turn.
func Tee(sinks ...Sink) Sink {
	return SinkFunc(func(e Event) {
		for _, s := range sinks {
			s.Emit(e)
		}
	})
}
