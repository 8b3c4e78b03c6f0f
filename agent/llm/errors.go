package llm

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrorKind classifies a failure so callers can decide what to do without
// reading messages.
type ErrorKind int

const (
	// KindUnavailable: the server could not be reached, went away mid-reply,
	// or said it is busy or loading (502, 503, 504, 429). Retriable.
	KindUnavailable ErrorKind = iota + 1
	// KindTimeout: no byte arrived for too long (first byte or idle).
	// Retriable.
	KindTimeout
	// KindServer: the server answered with an error (HTTP status or an error
	// event inside a 200 stream). Not retriable as is.
	KindServer
	// KindContextExceeded: the prompt does not fit the context window.
	// Compact the conversation and try again.
	KindContextExceeded
	// KindToolsUnsupported: the server rejected the tools parameter (no
	// tool-capable chat template). Fall back to text tool calls.
	KindToolsUnsupported
	// KindEmptyStream: the server answered 200 with no data at all, and a
	// non-streaming probe did not explain why.
	KindEmptyStream
	// KindProtocol: the reply could not be understood (malformed chunk) or
	// grew past the configured cap.
	KindProtocol
)

// Sentinels for errors.Is; an *Error matches the one of its Kind.
var (
	ErrUnavailable      = errors.New("LLM server unavailable")
	ErrTimeout          = errors.New("LLM server timed out")
	ErrServer           = errors.New("LLM server error")
	ErrContextExceeded  = errors.New("prompt exceeds the context window")
	ErrToolsUnsupported = errors.New("server does not support tools")
	ErrEmptyStream      = errors.New("server sent an empty reply")
	ErrProtocol         = errors.New("malformed reply from LLM server")
)

var kindSentinel = map[ErrorKind]error{
	KindUnavailable:      ErrUnavailable,
	KindTimeout:          ErrTimeout,
	KindServer:           ErrServer,
	KindContextExceeded:  ErrContextExceeded,
	KindToolsUnsupported: ErrToolsUnsupported,
	KindEmptyStream:      ErrEmptyStream,
	KindProtocol:         ErrProtocol,
}

// Error is a failure talking to the LLM server. Cancellation through the
// caller's context is not an *Error: it is returned wrapping ctx's error.
type Error struct {
	Kind ErrorKind
	// StatusCode is the HTTP status, 0 when there was none (connection
	// failure, error event inside a 200 stream).
	StatusCode int
	// Message is the server's own message when it gave one, else a
	// description of what went wrong.
	Message string
	// Type is the server's error type or code when it gave one
	// (e.g. "exceed_context_size_error").
	Type string
	// URL is the endpoint that failed.
	URL string
	// Partial is set when part of the reply had already been received:
	// the caller has seen deltas, so a retry must discard them.
	Partial bool
	// Err is the underlying cause, if any.
	Err error

	retryAfter time.Duration // from a Retry-After header
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(kindSentinel[e.Kind].Error())
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.StatusCode)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil && (e.Message == "" || !strings.Contains(e.Message, e.Err.Error())) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Partial {
		b.WriteString(" (after partial output)")
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) and friends work.
func (e *Error) Is(target error) bool { return kindSentinel[e.Kind] == target }

// Retriable reports whether the same request may succeed if sent again
// (after a pause): the server was unreachable, busy, loading or silent.
func (e *Error) Retriable() bool {
	return e.Kind == KindUnavailable || e.Kind == KindTimeout || e.Kind == KindEmptyStream
}

// IsRetriable reports whether err is an *Error that is Retriable.
func IsRetriable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retriable()
}

// classifyStatus maps an HTTP error status and the server's message to a
// Kind. Messages are matched only where servers give no machine-readable
// type (vLLM, Ollama); the type field is preferred.
func classifyStatus(status int, typ, msg string, withTools bool) ErrorKind {
	lt, lm := strings.ToLower(typ), strings.ToLower(msg)
	switch {
	case strings.Contains(lt, "context") || strings.Contains(lm, "context size") ||
		strings.Contains(lm, "context length") || strings.Contains(lm, "context window") ||
		strings.Contains(lm, "maximum context"):
		return KindContextExceeded
	case status == 502 || status == 503 || status == 504 || status == 429:
		return KindUnavailable
	case withTools && status >= 400 && toolsUnsupported(lm):
		return KindToolsUnsupported
	}
	return KindServer
}

// toolsUnsupportedSays are what servers say when they cannot take the
// tools parameter at all. Only these: any other error that mentions a
// tool (a malformed tool message, an unknown tool_call_id) is not cured by
// switching to text tool calls, and saying so would mislead.
var toolsUnsupportedSays = []string{
	"--jinja",                 // llama-server: "tools param requires --jinja flag"
	"support tool",            // Ollama: "<model> does not support tools"
	"auto-tool-choice",        // vLLM: "auto" tool choice requires --enable-auto-tool-choice
	"tool-call-parser",        // vLLM
	"tools are not supported", // generic
	"tools is not supported",
	"tool calling is not supported",
	"tool use is not supported",
}

func toolsUnsupported(lm string) bool {
	for _, s := range toolsUnsupportedSays {
		if strings.Contains(lm, s) {
			return true
		}
	}
	return false
}
