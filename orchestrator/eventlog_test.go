package orchestrator

import (
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
)

func TestDeltaBatchJoinsAndKeepsOrder(t *testing.T) {
	t0 := time.Now()
	var b deltaBatch
	var out []event.Event
	feed := func(e event.Event) { out = append(out, b.add(e)...) }
	feed(event.Event{Time: t0, Kind: event.ThinkingDelta, Text: "let me "})
	feed(event.Event{Time: t0, Kind: event.ThinkingDelta, Text: "think"})
	feed(event.Event{Time: t0, Kind: event.TextDelta, Text: "Hel"})
	feed(event.Event{Time: t0, Kind: event.TextDelta, Text: "lo"})
	if len(out) != 1 || out[0].Kind != event.ThinkingDelta || out[0].Text != "let me think" {
		t.Fatalf("after a change of kind: %+v", out)
	}
	feed(event.Event{Time: t0, Kind: event.ToolStarted, Tool: "bash"})
	if len(out) != 3 || out[1].Text != "Hello" || out[2].Kind != event.ToolStarted {
		t.Fatalf("a tool event must come after the text before it: %+v", out)
	}
	out = nil
	feed(event.Event{Time: t0, Kind: event.TextDelta, Text: "line one\n"})
	if len(out) != 1 {
		t.Fatalf("a line end did not flush: %+v", out)
	}
	out = nil
	feed(event.Event{Time: t0, Kind: event.TextDelta, Text: "a"})
	feed(event.Event{Time: t0.Add(time.Second), Kind: event.TextDelta, Text: "b"})
	if len(out) != 1 || out[0].Text != "ab" {
		t.Fatalf("an old batch did not flush: %+v", out)
	}
	if rest := b.flush(); rest != nil {
		t.Fatalf("left over: %+v", rest)
	}
}
