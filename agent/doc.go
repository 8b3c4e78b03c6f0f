// Package agent is the coding agent: the streaming loop, the tools offered
// to the model, tool-call parsing for weak models, context compaction,
// sessions, hooks.
//
// It acts on the workspace only through the Workspace interface it declares
// here. It must never import Docker, the sandbox or the orchestrator: that
// import rule is what keeps the sandbox a real boundary.
package agent
