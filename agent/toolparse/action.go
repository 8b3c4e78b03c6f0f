package toolparse

import (
	"regexp"
	"strings"
)

var (
	// An announced action: "Let me run ...", "I'll edit ...".
	announce = regexp.MustCompile(`(?i)\b(?:let me|let's|i'll|i will|i am going to|i'm going to|i need to|next,? i(?:'ll| will))\s+(?:now\s+|first\s+|quickly\s+)?(?:run|execute|read|open|check|look at|inspect|view|edit|modify|update|create|write|list|search|grep|find|call|use|fix|add|change|apply|install|build|test|compile|replace|delete|remove)\b`)
	// A shell block the model wants run rather than a tool call.
	shellFence = regexp.MustCompile("(?s)```(?:bash|sh|shell|console|zsh)\\s*\\n\\s*\\S")
	// A tool-call opener the parser could not complete.
	callOpener = regexp.MustCompile(`<tool_call>|<\|tool_call\|>|\[TOOL_CALLS?\]|<function_call>|<function=|"arguments"\s*:|\[ARGS\]|<｜tool|<\|tool_calls?_(?:section_)?begin\|>|to=functions\.|<minimax:tool_call>|<invoke name=`)
)

// LooksLikeAction reports whether a reply that carried no tool call reads as
// if the model meant to act ("Let me run the tests", a bash block, a call it
// mangled). The loop uses it to send one nudge asking for a real tool call
// instead of treating the reply as the final answer.
func LooksLikeAction(text string) bool {
	visible, _ := StripThink(text)
	if strings.TrimSpace(visible) == "" {
		return false
	}
	return announce.MatchString(visible) || shellFence.MatchString(visible) || callOpener.MatchString(visible)
}

// LooksLikeAction is the package function plus a check for a known tool
// named like a function call ("read_file(" or "`bash`:").
func (p *Parser) LooksLikeAction(text string) bool {
	if LooksLikeAction(text) {
		return true
	}
	visible, _ := StripThink(text)
	for name := range p.known {
		if strings.Contains(visible, name+"(") || strings.Contains(visible, name+" (") {
			return true
		}
	}
	return false
}
