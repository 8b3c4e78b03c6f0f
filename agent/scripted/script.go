package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/localagent/agent/agent/llm"
)

// ModelName is the model every reply names, so a scripted run is never
// mistaken for a real model. A script's Model is appended to it.
const ModelName = "scripted"

// Script is what the server answers, one Turn per chat request, in order.
//
//	model: demo            # replies name the model "scripted/demo"
//	slots: 2               # /props total_slots (default 1)
//	n_ctx: 8192            # /props per-slot n_ctx (default 8192)
//	chunk: 8               # runes per streamed text chunk (default 8)
//	turns:
//	  - text: "I will read the file."
//	    tool_calls:
//	      - {name: read_file, arguments: {path: main.go}}
//	  - expect: {last_role: tool, tool_result_contains: "package main"}
//	    text: Done.
type Script struct {
	Model string `yaml:"model" json:"model"`
	Slots int    `yaml:"slots" json:"slots"`
	NCtx  int    `yaml:"n_ctx" json:"n_ctx"`
	Chunk int    `yaml:"chunk" json:"chunk"`
	// Loading makes the first N /health requests answer 503 "Loading model",
	// as llama-server does while it loads.
	Loading int `yaml:"loading" json:"loading"`
	// Final, if set, answers every chat request after the last turn.
	// Without it such a request gets an error naming the script's end.
	Final *Turn  `yaml:"final" json:"final"`
	Turns []Turn `yaml:"turns" json:"turns"`
}

// Turn is one chat completion reply.
type Turn struct {
	Text      string `yaml:"text" json:"text"`
	Reasoning string `yaml:"reasoning" json:"reasoning"`
	ToolCalls []Call `yaml:"tool_calls" json:"tool_calls"`
	// Error makes the reply fail (after Text, if Error.Event is set).
	Error *Error `yaml:"error" json:"error"`
	// Delay waits before the first byte (simulates prompt processing).
	Delay time.Duration `yaml:"delay" json:"delay"`
	// Stall stops sending for this long halfway through the reply.
	Stall time.Duration `yaml:"stall" json:"stall"`
	// Cut ends the stream halfway (after any Stall) without finish_reason
	// or [DONE]; Drop aborts the connection there instead.
	Cut  bool `yaml:"cut" json:"cut"`
	Drop bool `yaml:"drop" json:"drop"`
	// Empty answers 200 with an empty stream.
	Empty bool `yaml:"empty" json:"empty"`
	// FinishReason overrides the default ("tool_calls" when there are
	// calls, else "stop").
	FinishReason string `yaml:"finish_reason" json:"finish_reason"`
	// Usage overrides the estimated token counts.
	Usage *llm.Usage `yaml:"usage" json:"usage"`
	// Timings, when set, are sent with the reply as llama-server sends its
	// speed figures ("timings" in the last chunk).
	Timings *llm.Timings `yaml:"timings" json:"timings"`
	// Expect is checked against the request before answering; a mismatch
	// is answered with HTTP 400 naming it, and recorded (Mismatches).
	Expect *Expect `yaml:"expect" json:"expect"`
}

// Call is one scripted tool call. Arguments is a mapping (sent as its JSON)
// or a string (sent verbatim, so invalid JSON can be scripted).
type Call struct {
	ID        string `yaml:"id" json:"id"`
	Name      string `yaml:"name" json:"name"`
	Arguments any    `yaml:"arguments" json:"arguments"`
}

// Error is a scripted failure: an HTTP status with an OpenAI-style error
// body, or (Event) an SSE error event inside a 200 stream.
type Error struct {
	Status  int    `yaml:"status" json:"status"`   // default 500
	Message string `yaml:"message" json:"message"` // default "scripted error"
	Type    string `yaml:"type" json:"type"`
	Event   bool   `yaml:"event" json:"event"`
}

// Expect holds assertions on a chat request. Empty fields are not checked.
type Expect struct {
	// LastRole is the role of the request's last message.
	LastRole string `yaml:"last_role" json:"last_role"`
	// LastContains must occur in the last message's content.
	LastContains string `yaml:"last_contains" json:"last_contains"`
	// Contains must occur in some message's content.
	Contains string `yaml:"contains" json:"contains"`
	// SystemContains must occur in the system message.
	SystemContains string `yaml:"system_contains" json:"system_contains"`
	// ToolResultContains must occur in a tool message after the last
	// assistant message.
	ToolResultContains string `yaml:"tool_result_contains" json:"tool_result_contains"`
	// Tools must all be offered in the request's tools.
	Tools []string `yaml:"tools" json:"tools"`
	// NoTools: the request must offer no tools (text tool-call mode).
	NoTools bool `yaml:"no_tools" json:"no_tools"`
}

// Load reads a script file (YAML or JSON).
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read script: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	return s, nil
}

// Parse reads a script from YAML or JSON (JSON is YAML) and checks it.
func Parse(data []byte) (*Script, error) {
	var s Script
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a typo in a field name should fail loudly
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the script is empty: give at least one turn under \"turns:\"")
		}
		return nil, fmt.Errorf("parse script: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks that every turn makes sense, so a bad script fails when
// loaded rather than halfway through a run.
func (s *Script) Validate() error {
	if s.Slots < 0 || s.NCtx < 0 || s.Chunk < 0 || s.Loading < 0 {
		return errors.New("script: slots, n_ctx, chunk and loading must not be negative")
	}
	check := func(where string, t *Turn) error {
		for j, c := range t.ToolCalls {
			if c.Name == "" {
				return fmt.Errorf("script: %s: tool call %d has no name", where, j+1)
			}
			if _, err := c.argumentsJSON(); err != nil {
				return fmt.Errorf("script: %s: tool call %d (%s): %w", where, j+1, c.Name, err)
			}
		}
		if t.Error != nil && t.Error.Status != 0 && (t.Error.Status < 400 || t.Error.Status > 599) {
			return fmt.Errorf("script: %s: error status %d is not an HTTP error status (400-599)", where, t.Error.Status)
		}
		if t.Delay < 0 || t.Stall < 0 {
			return fmt.Errorf("script: %s: delay and stall must not be negative", where)
		}
		return nil
	}
	for i := range s.Turns {
		if err := check(fmt.Sprintf("turn %d", i+1), &s.Turns[i]); err != nil {
			return err
		}
	}
	if s.Final != nil {
		return check("final", s.Final)
	}
	return nil
}

// argumentsJSON renders a call's arguments as the JSON text sent on the wire.
func (c Call) argumentsJSON() (string, error) {
	switch a := c.Arguments.(type) {
	case nil:
		return "{}", nil
	case string:
		return a, nil
	default:
		b, err := json.Marshal(a)
		if err != nil {
			return "", fmt.Errorf("arguments cannot be written as JSON: %w", err)
		}
		return string(b), nil
	}
}
