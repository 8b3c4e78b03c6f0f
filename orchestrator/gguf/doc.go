// Package gguf reads the header of a GGUF model file (magic, version,
// tensor and metadata counts, the metadata values that matter before a
// model is served: architecture, trained context length, name) so that
// `agent llm up` can refuse a file that llama-server would choke on, with a
// clear message, before any container exists. It also writes GGUF files,
// which tests use to build a tiny but real model.
//
// It never loads tensor data, never follows paths found inside a file and
// never allocates more than the file can back: every length read from the
// file is checked against the bytes that remain, so a hostile or truncated
// file yields an error, not a huge allocation or a panic.
package gguf
