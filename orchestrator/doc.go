// Package orchestrator owns the task lifecycle: git worktrees and branches on
// the host (orchestrator/worktree), the sandbox per task, the agent loop wired
// to both, the state store (orchestrator/store) and its reconciler (gc), and
// the llama-server lifecycle (orchestrator/llamaserver). It is the only place
// where sandboxes and worktrees meet.
//
// A task goes: lock the repository -> branch + worktree -> sandbox with the
// worktree at /workspace -> agent loop (every tool call through the sandbox)
// -> commit on the task branch -> review -> merge, squash, keep or discard.
// The task record is saved atomically at every step, so a killed process
// leaves a task that `resume` continues and `gc` recognises as interrupted.
//
// It must never write to the terminal (it emits events), never run host git
// except through orchestrator/worktree, never open files in a worktree on the
// agent's behalf, never delete a branch or worktree with unmerged or
// uncommitted work unless the user chose discard, and never remove Docker
// resources that do not carry its own state directory's label.
package orchestrator
