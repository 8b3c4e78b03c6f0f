package agent

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/localagent/agent/agent/llm"
)

// parseTextCalls extracts tool calls written in the reply text and reports
// whether the text ends inside an unfinished <tool_call> block (the reply
// was cut off and deserves a continuation request).
func parseTextCalls(content string) ([]llm.ToolCall, bool) {
	text := stripThink(content)
	var calls []llm.ToolCall
	rest := text
	for {
		i := strings.Index(rest, "<tool_call>")
		if i < 0 {
			break
		}
		body := rest[i+len("<tool_call>"):]
		j := strings.Index(body, "</tool_call>")
		if j < 0 {
			if c, ok := parseCallJSON(body); ok {
				calls = append(calls, c) // closing tag missing but the JSON is whole
				return calls, false
			}
			return calls, true
		}
		if c, ok := parseCallJSON(body[:j]); ok {
			calls = append(calls, c)
		}
		rest = body[j+len("</tool_call>"):]
	}
	return calls, false
}

func parseCallJSON(s string) (llm.ToolCall, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimSuffix(s, "```"), "```json")
	s = strings.TrimSpace(s)
	var v struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Function  *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return llm.ToolCall{}, false
	}
	if v.Function != nil && v.Name == "" {
		v.Name, v.Arguments = v.Function.Name, v.Function.Arguments
	}
	if v.Name == "" {
		return llm.ToolCall{}, false
	}
	args := string(normalizeArgs(v.Arguments))
	return llm.ToolCall{Type: "function", Function: llm.FunctionCall{Name: v.Name, Arguments: args}}, true
}

var thinkRe = regexp.MustCompile(`(?s)<think>.*?(</think>|$)`)

func stripThink(s string) string {
	if !strings.Contains(s, "<think>") {
		return s
	}
	return thinkRe.ReplaceAllString(s, "")
}

var toolCallBlockRe = regexp.MustCompile(`(?s)<tool_call>.*?(</tool_call>|$)`)

// visibleText is the reply without thinking and tool-call markup: what the
// user should read as the answer.
func visibleText(s string) string {
	s = stripThink(s)
	if strings.Contains(s, "<tool_call>") {
		s = toolCallBlockRe.ReplaceAllString(s, "")
	}
	return strings.TrimSpace(s)
}

// actionRe matches replies that announce an action instead of taking it:
// a shell block to run, a call written in some unrecognised markup, or a
// sentence ending in a colon that promises the next step.
var actionRe = regexp.MustCompile(`(?is)(` +
	"```(bash|sh|shell|console)\\s*\\n" +
	`|"name"\s*:\s*"[a-z_]+"\s*,\s*"(arguments|parameters)"` +
	`|<(tool_call|function_call|function|invoke)\b|\[TOOL_CALL` +
	`|\b(let me|i will|i'll|i am going to|i'm going to|next,? i)\b[^.\n]{0,120}(:|\.\.\.)\s*$` +
	`)`)

// looksLikeAction reports a reply that seems to want a tool call it did
// not make. It errs on the side of silence: a wrong nudge costs one request,
// a missed one ends the task early.
func looksLikeAction(content string) bool {
	if strings.Contains(content, "<tool_call>") {
		return true // a call was written but could not be parsed
	}
	return actionRe.MatchString(visibleText(content))
}
