// Package gguftest writes tiny but real GGUF models for tests: a llama
// architecture with random weights and a byte-level vocabulary, which
// llama-server loads in well under a second and can generate from (the
// text is noise, the protocol is real).
//
// It exists for tests only: no command or production package imports it,
// and it never downloads or converts real models.
package gguftest
