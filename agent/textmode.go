package agent

import (
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/toolparse"
)

// parseText extracts tool calls written in the reply text (toolparse knows
// the formats local models use) and reports whether the text ends inside
// an unfinished call, which deserves a continuation request. Call ids are
// left empty; the loop assigns unique ones.
func (a *Agent) parseText(content string) ([]llm.ToolCall, bool) {
	r := a.parser.Parse(content)
	if len(r.Calls) == 0 {
		return nil, r.Incomplete
	}
	calls := make([]llm.ToolCall, len(r.Calls))
	for i, c := range r.Calls {
		calls[i] = llm.ToolCall{Type: "function", Function: llm.FunctionCall{Name: c.Name, Arguments: c.Arguments}}
	}
	return calls, r.Incomplete
}

// visibleText is the reply without reasoning and tool-call markup, trimmed:
// what the user reads as the answer.
func visibleText(s string) string {
	return toolparse.New().Parse(s).Text
}

// looksLikeAction reports a reply that seems to want a tool call it did
// not make; the loop then sends one nudge. A wrong nudge costs one request,
// a missed one ends the task early.
func (a *Agent) looksLikeAction(content string) bool {
	return a.actionParser.LooksLikeAction(content)
}
