// Package session stores an agent conversation as a JSONL transcript: one
// header line (format version, id, creation time, model, workspace facts),
// then one llm.Message per line, appended and written through as the
// conversation goes, so a crash loses at most the line being written.
// Load tolerates a torn last line; Open continues a transcript for a
// resumed run.
//
// It owns the file format only. It must never interpret the conversation
// (that is the agent's job), never hold the whole file in memory for
// appending, and never touch the workspace.
package session
