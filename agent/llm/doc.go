// Package llm is the client for OpenAI-compatible chat servers
// (llama-server, Ollama, LM Studio, vLLM, OpenAI): streaming, tool-call
// assembly, server facts (/health, /props, /v1/models), and llama-server's
// exact count of a prompt's tokens (/apply-template, /tokenize).
//
// HTTPClient implements Client. A reply streams as server-sent events; the
// assembler joins text, reasoning_content and tool-call fragments (keyed by
// index; id and name arrive once, argument fragments are concatenated as
// bytes so a character split across chunks survives) and usage. Failures are
// *Error values classified by Kind (errors.Is against ErrUnavailable,
// ErrTimeout, ErrContextExceeded, ...) so callers can tell "server went
// away, retry" from "the request is wrong". Requests are retried with
// backoff only before any reply byte arrived; an idle timer that every
// received byte resets ends a stalled stream, with a separate, generous
// first-byte timeout for long prompt processing.
//
// The SSE parsing is written here rather than taken from openai-go,
// go-openai or an SSE library because each of them gets in the way of a
// requirement: they decode strings with encoding/json (a UTF-8 character
// split across chunks becomes two U+FFFD), they have no per-chunk idle
// timeout (only a whole-request deadline, which a long generation exceeds),
// they do not surface llama-server's "error:" line or an {"error":...}
// payload inside a 200 stream as an error, and reasoning_content is either
// missing or reachable only through raw-JSON escape hatches. The event-stream
// format itself is a few dozen lines (sse.go).
//
// It knows nothing of tools' meaning, sandboxes or Docker, and never writes
// to the terminal.
package llm
