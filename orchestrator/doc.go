// Package orchestrator owns the task lifecycle: git worktrees and branches on
// the host (orchestrator/worktree), the sandbox per task, the agent loop wired
// to both, the state store (orchestrator/store) and its reconciler (gc), and
// the llama-server lifecycle (orchestrator/llamaserver). It is the only place
// where sandboxes and worktrees meet.
//
// A task goes: lock the repository -> branch + worktree -> sandbox with the
// worktree at /workspace -> agent loop (every tool call through the sandbox)
// -> commit on the task branch -> review -> merge, squash, keep or discard.
// The task record is saved atomically at every step and is the task's
// journal: each step that changes state on disk (branch and worktree, a
// sub-agent, a command, a merge's plan) is recorded before it starts, and
// each is idempotent or undone on recovery (journal.go), so a process killed
// anywhere leaves a task that `resume`, `merge` or `gc` bring to a
// consistent state. Named failpoints (orchestrator/failpoint) let tests kill
// the process at each of those steps.
//
// It must never write to the terminal (it emits events), never run host git
// except through orchestrator/worktree, never open files in a worktree on the
// agent's behalf, never delete a branch or worktree with unmerged or
// uncommitted work unless the user chose discard, and never remove Docker
// resources that do not carry its own state directory's label.
package orchestrator
