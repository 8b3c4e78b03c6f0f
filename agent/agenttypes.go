package agent

import (
	"path"
	"sort"
	"strings"
)

// AgentType is a kind of sub-agent spawn_agents can start: which tools it
// may use, how many model requests it may make, and whether it may change
// the workspace at all.
type AgentType struct {
	Description string `json:"description" mapstructure:"description"`
	// Tools are the tools it is offered, as names or shell-style patterns
	// ("git_*", "mcp__*"); empty offers every tool.
	Tools []string `json:"tools" mapstructure:"tools"`
	// MaxTurns bounds its model requests; 0 means the default.
	MaxTurns int `json:"max_turns" mapstructure:"max_turns"`
	// ReadOnly mounts its workspace read-only; nothing it does is merged
	// back.
	ReadOnly bool `json:"read_only" mapstructure:"read_only"`
	// NoMerge discards its changes instead of merging them back (a verifier
	// that builds and runs tests writes files nobody asked for).
	NoMerge bool `json:"no_merge" mapstructure:"no_merge"`
}

var readTools = []string{ToolReadFile, ToolListDir, ToolGlob, ToolGrep, "git_*", ToolThink, ToolReadArtifact}

// BuiltinAgentTypes are the sub-agent types every configuration has; a
// configured type of the same name replaces one.
func BuiltinAgentTypes() map[string]AgentType {
	return map[string]AgentType{
		"explore": {
			Description: "read-only: find and read code, answer questions about it",
			Tools:       readTools, MaxTurns: 15, ReadOnly: true,
		},
		"plan": {
			Description: "read-only: study the code and write a step-by-step plan (with todo_write)",
			Tools:       append(append([]string(nil), readTools...), ToolTodoWrite), MaxTurns: 10, ReadOnly: true,
		},
		"code": {
			Description: "read, write and run commands: make a change",
			Tools: append(append([]string(nil), readTools...), ToolWriteFile, ToolEditFile, ToolMultiEdit, ToolBash,
				"process_*", ToolTodoWrite, "mcp__*"),
			MaxTurns: 30,
		},
		"verify": {
			Description: "read and run commands (tests, builds); its file changes are discarded",
			Tools:       append(append([]string(nil), readTools...), ToolBash, "process_*"),
			MaxTurns:    20, NoMerge: true,
		},
	}
}

// DefaultAgentType is the type of a spawn_agents task that names none.
const DefaultAgentType = "code"

// Allows reports whether the type offers tool.
func (t AgentType) Allows(tool string) bool {
	return allowed(t.Tools, tool)
}

// allowed matches tool against patterns; no patterns allow everything.
func allowed(patterns []string, tool string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, err := path.Match(p, tool); err == nil && ok {
			return true
		}
	}
	return false
}

// AgentTypeNames lists types' names, sorted, for messages.
func AgentTypeNames(types map[string]AgentType) string {
	names := make([]string, 0, len(types))
	for n := range types {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// AllowsServer reports whether the type may use some tool of the MCP server
// name: a pattern that can match mcp__<name>__<tool> for some tool.
func (t AgentType) AllowsServer(name string) bool {
	if len(t.Tools) == 0 {
		return true
	}
	prefix := mcpToolName(name, "")
	for _, p := range t.Tools {
		if strings.HasPrefix(p, prefix) {
			return true
		}
		// A pattern ending in * that covers the prefix ("mcp__*", "mcp__name*").
		if strings.HasSuffix(p, "*") {
			if ok, err := path.Match(p, prefix+"x"); err == nil && ok {
				return true
			}
		}
	}
	return false
}
