package cli

import (
	"strings"
	"testing"

	"github.com/localagent/agent/agent/event"
)

// --show-thinking prints the thinking (escaped) before the text; without it
// the thinking stays out of the output.
func TestRendererShowThinking(t *testing.T) {
	for _, show := range []bool{false, true} {
		ios, _, _, errOut := TestStreams()
		r := newEventRenderer(ios, false)
		r.showThinking = show
		r.Emit(event.Event{Kind: event.ThinkingDelta, Text: "weigh \x1b[31mthe options"})
		r.Emit(event.Event{Kind: event.ThinkingDelta, Text: " carefully"})
		r.Emit(event.Event{Kind: event.TextDelta, Text: "Answer."})
		r.Emit(event.Event{Kind: event.ToolStarted, Tool: "bash", Args: `{"command":"true"}`})
		r.Close()
		got := errOut.String()
		if strings.Contains(got, "\x1b") {
			t.Errorf("an escape sequence reached the output: %q", got)
		}
		hasThinking := strings.Contains(got, `thinking: weigh \x1b[31mthe options carefully`)
		if hasThinking != show {
			t.Errorf("show=%v: output %q", show, got)
		}
		if !strings.Contains(got, "Answer.") || !strings.Contains(got, "> bash $ true") {
			t.Errorf("text or tool line missing: %q", got)
		}
		if show && !strings.Contains(got, "carefully\nAnswer.") {
			t.Errorf("the thinking does not end before the text: %q", got)
		}
	}
}
