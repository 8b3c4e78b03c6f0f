package llm

import (
	"context"
	"encoding/json"
)

// Role of a chat message, as the OpenAI-compatible API spells it.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one chat message. It marshals to the OpenAI wire format and is
// also the unit a session transcript stores.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content"`
	// Reasoning holds thinking text (llama-server's reasoning_content). It is
	// kept in transcripts but not sent back to the server.
	Reasoning  string     `json:"reasoning_content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is a complete (assembled) tool call requested by the model.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // always "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the tool and carries its arguments as the raw JSON text
// the model produced (possibly invalid: validating it is the caller's job).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool describes one tool offered to the model.
type Tool struct {
	Type     string      `json:"type"` // always "function"
	Function FunctionDef `json:"function"`
}

// FunctionDef is a tool's name, description and JSON-schema parameters.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Request is one chat completion request.
type Request struct {
	Model       string    `json:"model,omitempty"`
	Messages    []Message `json:"messages"`
	Tools       []Tool    `json:"tools,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	// Slot pins the request to one llama-server slot (id_slot), and turns
	// prompt caching on: the slot keeps the previous request's prompt, so
	// a turn that only appends to it re-processes only the new tokens.
	// nil: the server picks a slot (and other servers see no extra field).
	Slot *int `json:"id_slot,omitempty"`
}

// Usage is the token accounting the server reports. Zero values mean the
// server did not say.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Timings are the speed figures llama-server reports with a reply
// ("timings"). Zero values mean the server did not say.
type Timings struct {
	// PromptN is the prompt tokens the server processed; CacheN those it
	// took from its prompt cache instead.
	PromptN  int     `json:"prompt_n" yaml:"prompt_n"`
	CacheN   int     `json:"cache_n" yaml:"cache_n"`
	PromptMS float64 `json:"prompt_ms" yaml:"prompt_ms"`
	// PredictedN is the tokens generated, in PredictedMS.
	PredictedN  int     `json:"predicted_n" yaml:"predicted_n"`
	PredictedMS float64 `json:"predicted_ms" yaml:"predicted_ms"`
	// PerSecond rates as the server computed them.
	PromptPerSecond    float64 `json:"prompt_per_second" yaml:"prompt_per_second"`
	PredictedPerSecond float64 `json:"predicted_per_second" yaml:"predicted_per_second"`
}

// DeltaKind says what a Delta carries.
type DeltaKind int

const (
	DeltaText      DeltaKind = iota + 1 // Text holds visible text
	DeltaReasoning                      // Text holds thinking text
	DeltaToolCall                       // ToolIndex/ToolName/Text: a tool-call fragment
)

// Delta is one streamed piece of a reply, handed to the caller as it arrives
// (for live display). The assembled result is in Response.
type Delta struct {
	Kind      DeltaKind
	Text      string
	ToolIndex int
	ToolName  string
}

// Response is a complete assistant reply.
type Response struct {
	Message      Message `json:"message"`
	FinishReason string  `json:"finish_reason"`
	Usage        Usage   `json:"usage"`
	// Timings are the server's speed figures, nil when it sent none.
	Timings *Timings `json:"timings,omitempty"`
	// Model is the model name the server reported in its reply ("" if it
	// did not say); a scripted server names itself "scripted".
	Model string `json:"model,omitempty"`
}

// Client is a chat completion client. Stream sends req, calls onDelta for
// every piece as it arrives (onDelta may be nil) and returns the assembled
// reply. Errors are infrastructure failures (connection, HTTP, protocol,
// server-side error events), never the model's content.
type Client interface {
	Stream(ctx context.Context, req Request, onDelta func(Delta)) (Response, error)
}
