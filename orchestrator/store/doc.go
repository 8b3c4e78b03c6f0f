// Package store keeps task records: one JSON file per task under the state
// directory, replaced atomically (write a temporary file, fsync, rename) at
// every step of a task so that a crash at any moment leaves either the old
// or the new record, never a torn one. It also resolves task ids from
// unique prefixes and tells whether the process running a task is alive
// (an flock the running process holds; pid numbers get reused).
//
// It must never delete a record on its own or touch worktrees, branches or
// containers: it only stores what the orchestrator decides.
package store
