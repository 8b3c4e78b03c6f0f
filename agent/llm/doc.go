// Package llm is the client for OpenAI-compatible chat servers
// (llama-server, Ollama, LM Studio, vLLM, OpenAI): streaming, tool-call
// assembly, server facts (/health, /props, /v1/models).
//
// It knows nothing of tools' meaning, sandboxes or Docker.
package llm
