// Package agent is the coding agent: the streaming loop, the tools offered
// to the model, tool-call fallbacks for weak models, doom-loop guards,
// context compaction, hooks and resumable sessions.
//
// Entry points: New(Options) and (*Agent).Run drive a conversation;
// RunTool runs one tool call exactly as the loop does (validation,
// workspace call, artifacts) for `agent sandbox tool`. Sub-agents are
// started through the Spawner the orchestrator provides.
//
// It acts on the workspace only through the Workspace interface it declares
// here: every file and shell tool, the project's AGENTS.md and every hook
// run inside the sandbox, never on the host. Long tool outputs are kept as
// artifacts in a host directory the orchestrator chooses, never inside the
// workspace. The package must never import Docker, the sandbox or the
// orchestrator (that import rule is what keeps the sandbox a real
// boundary), never print to the terminal (it emits events), and never
// treat a failed tool call as a Go error: it is a result for the model.
package agent
