package orchestrator

import (
	"strings"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
)

// deltaBatch joins the text and thinking deltas of a stream into fewer,
// larger events for the task's event log, so that `agent log -f` can show
// what the model writes (and thinks) without a log line per token. A batch
// is written out at a line end, at deltaFlushBytes, after deltaFlushAge, and
// before any other event (order is kept).
type deltaBatch struct {
	cur   *event.Event
	since time.Time
}

const (
	deltaFlushBytes = 512
	deltaFlushAge   = 250 * time.Millisecond
)

// add takes the next event and returns the events to write now, in order.
func (b *deltaBatch) add(e event.Event) []event.Event {
	if e.Kind != event.TextDelta && e.Kind != event.ThinkingDelta {
		return append(b.flush(), e)
	}
	var out []event.Event
	if b.cur != nil && (b.cur.Kind != e.Kind || b.cur.Agent != e.Agent) {
		out = b.flush()
	}
	if b.cur == nil {
		c := e
		b.cur, b.since = &c, e.Time
	} else {
		b.cur.Text += e.Text
	}
	if strings.Contains(e.Text, "\n") || len(b.cur.Text) >= deltaFlushBytes || e.Time.Sub(b.since) >= deltaFlushAge {
		out = append(out, b.flush()...)
	}
	return out
}

// flush returns the pending batch, if any.
func (b *deltaBatch) flush() []event.Event {
	if b.cur == nil {
		return nil
	}
	e := *b.cur
	b.cur = nil
	return []event.Event{e}
}

// addSpeed adds one model request's speed figures to a task's totals.
func addSpeed(t *store.Tokens, s *event.Speed) {
	if s == nil {
		return
	}
	t.Requests++
	t.PromptProcessed += s.PromptProcessed
	t.PromptCached += s.PromptCached
	t.FirstTokenMS += s.FirstTokenMS
	t.GenTokens += s.GenTokens
	t.GenMS += s.GenMS
	t.ServerTimings = t.ServerTimings || s.Server
	t.AvgFirstTokenMS = t.FirstTokenMS / int64(t.Requests)
	if t.GenMS > 0 {
		t.GenPerSecond = float64(int(float64(t.GenTokens)/t.GenMS*10000)) / 10
	}
}
