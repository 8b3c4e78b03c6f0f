package llm

import (
	"bytes"
	"encoding/json"
	"strings"
)

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireRequest struct {
	Model         string         `json:"model,omitempty"`
	Messages      []Message      `json:"messages"`
	Tools         []Tool         `json:"tools,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	// llama-server's own fields, sent only with a slot.
	IDSlot      *int  `json:"id_slot,omitempty"`
	CachePrompt *bool `json:"cache_prompt,omitempty"`
}

func newWireRequest(req Request, model string, stream bool) wireRequest {
	w := wireRequest{
		Model:       req.Model,
		Messages:    make([]Message, len(req.Messages)),
		Tools:       req.Tools,
		Temperature: req.Temperature,
		MaxTokens:   req.MaxTokens,
		Stream:      stream,
	}
	if w.Model == "" {
		w.Model = model
	}
	if req.Slot != nil {
		slot, on := *req.Slot, true
		w.IDSlot, w.CachePrompt = &slot, &on
	}
	for i, m := range req.Messages {
		// Reasoning stays in the transcript and is not sent back (the
		// field is omitempty).
		m.Reasoning = ""
		w.Messages[i] = m
	}
	if stream {
		// Without this, OpenAI and vLLM send no usage at all when streaming;
		// llama-server sends it either way.
		w.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	return w
}

// wireToolCallDelta is one tool-call fragment in a streamed chunk.
type wireToolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      rawText `json:"name"`
		Arguments rawText `json:"arguments"`
	} `json:"function"`
}

// wireDelta is a chunk's delta, or a full message in a non-streamed reply.
type wireDelta struct {
	Role             string  `json:"role"`
	Content          rawText `json:"content"`
	ReasoningContent rawText `json:"reasoning_content"`
	// Reasoning is the field name Ollama and OpenRouter use.
	Reasoning rawText             `json:"reasoning"`
	ToolCalls []wireToolCallDelta `json:"tool_calls"`
}

type wireChoice struct {
	Index        int       `json:"index"`
	Delta        wireDelta `json:"delta"`
	Message      wireDelta `json:"message"`
	FinishReason *string   `json:"finish_reason"`
}

// wireChunk is one streamed chunk or a whole non-streamed completion.
type wireChunk struct {
	Model   string          `json:"model"`
	Choices []wireChoice    `json:"choices"`
	Usage   *Usage          `json:"usage"`
	Timings *Timings        `json:"timings"`
	Error   json.RawMessage `json:"error"`
}

// serverError extracts a message and type from the shapes servers use:
// {"error":{"message":..,"type":..,"code":..}}, {"error":"text"},
// {"message":..}, or plain text.
func serverError(body []byte) (msg, typ string) {
	body = bytes.TrimSpace(body)
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(body, &env) != nil {
		return truncate(string(body), 500), ""
	}
	if len(env.Error) > 0 {
		return errorValue(env.Error)
	}
	if env.Message != "" {
		return env.Message, ""
	}
	if env.Detail != nil {
		b, _ := json.Marshal(env.Detail)
		return truncate(string(b), 500), ""
	}
	return truncate(string(body), 500), ""
}

// errorValue reads the value of an "error" field: a string or an object.
func errorValue(raw json.RawMessage) (msg, typ string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, ""
	}
	var o struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return truncate(string(raw), 500), ""
	}
	typ = o.Type
	if c, ok := o.Code.(string); ok && typ == "" {
		typ = c
	}
	if o.Message == "" {
		o.Message = truncate(string(raw), 500)
	}
	return o.Message, typ
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
