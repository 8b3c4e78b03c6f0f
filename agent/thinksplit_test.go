package agent

import (
	"testing"

	"github.com/localagent/agent/agent/event"
)

func TestThinkSplitter(t *testing.T) {
	tests := []struct {
		chunks          []string
		visible, intern string
	}{
		{[]string{"hello"}, "hello", ""},
		{[]string{"<think>plan</think>answer"}, "answer", "plan"},
		{[]string{"<thi", "nk>pl", "an</th", "ink>ans", "wer"}, "answer", "plan"},
		{[]string{"a < b and c <", "d"}, "a < b and c <d", ""},
		{[]string{"x<think>never closed"}, "x", "never closed"},
		{[]string{"<think>a</think>b<think>c</think>d"}, "bd", "ac"},
		{[]string{"ends with <"}, "ends with <", ""},
	}
	for _, tt := range tests {
		var s thinkSplitter
		var vis, th string
		for _, c := range tt.chunks {
			v, k := s.feed(c)
			vis, th = vis+v, th+k
		}
		v, k := s.flush()
		vis, th = vis+v, th+k
		if vis != tt.visible || th != tt.intern {
			t.Errorf("%q: visible %q thinking %q, want %q %q", tt.chunks, vis, th, tt.visible, tt.intern)
		}
	}
}

func TestThinkingInTextBecomesThinkingEvents(t *testing.T) {
	c, _ := scriptedClient(t, `
chunk: 3
turns:
  - text: "<think>I should answer.</think>The answer is 4."
`)
	rec := &event.Recorder{}
	a := newTestAgent(t, c, newMemWorkspace(nil), func(o *Options) { o.Sink = rec })
	res, err := a.Run(t.Context(), "2+2?")
	if err != nil || res.Text != "The answer is 4." {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	var vis, think string
	for _, e := range rec.Events() {
		switch e.Kind {
		case event.TextDelta:
			vis += e.Text
		case event.ThinkingDelta:
			think += e.Text
		}
	}
	if vis != "The answer is 4." || think != "I should answer." {
		t.Fatalf("text %q, thinking %q", vis, think)
	}
}
