// Package orchestrator owns the task lifecycle: git worktrees and branches on
// the host, the sandbox per task and per sub-agent, the agent loop wired to
// both, the state store and its reconciler (gc), and the llama-server
// lifecycle. It is the only place where sandboxes and worktrees meet.
package orchestrator
