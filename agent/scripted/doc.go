// Package scripted is an OpenAI-compatible chat server that answers from a
// script instead of a model: text streamed in chunks, reasoning, tool calls,
// HTTP errors, error events inside a 200 stream, stalls, cut or dropped
// streams. It records every request so tests can assert on what the agent
// sent, and it can check expectations on each request itself.
//
// It exists for tests and for the demo (`agent task --llm script:FILE`):
// the real HTTP client in agent/llm talks to it over loopback, so streaming,
// timeouts and errors are exercised for real. Its replies name the model
// "scripted" so that no one mistakes them for a model's output.
//
// It must never be used as a proxy to a real model, and it never listens on
// anything but 127.0.0.1.
package scripted
