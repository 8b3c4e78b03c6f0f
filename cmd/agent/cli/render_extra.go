package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator/store"
)

// think writes a piece of the model's thinking: after a "thinking:" mark
// in plain mode, dimmed on a terminal.
func (r *eventRenderer) think(e event.Event) {
	if !r.thinking {
		_ = r.text.Flush()
		if r.midLine {
			fmt.Fprintln(r.w)
			r.midLine = false
		}
		r.thinking = true
		if r.mode == renderLive && r.dim.on {
			fmt.Fprint(r.w, "\x1b[2m")
		}
		fmt.Fprint(r.w, termtext.Text(who(e))+"thinking: ")
	}
	text := termtext.Text(e.Text)
	fmt.Fprint(r.w, text)
	r.midLine = !strings.HasSuffix(text, "\n")
}

// endThinking ends a run of thinking before anything else is written.
func (r *eventRenderer) endThinking() {
	if !r.thinking {
		return
	}
	r.thinking = false
	if r.mode == renderLive && r.dim.on {
		fmt.Fprint(r.w, "\x1b[0m")
	}
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
}

// speedTotals sums the speed figures of a run's model requests.
type speedTotals struct {
	requests, processed, cached, genTokens int
	firstMS                                int64
	genMS                                  float64
	server                                 bool
}

func (s *speedTotals) add(sp *event.Speed) {
	if sp == nil {
		return
	}
	s.requests++
	s.processed += sp.PromptProcessed
	s.cached += sp.PromptCached
	s.firstMS += sp.FirstTokenMS
	s.genTokens += sp.GenTokens
	s.genMS += sp.GenMS
	s.server = s.server || sp.Server
}

// String is the totals in one line, "" when nothing was measured.
func (s *speedTotals) String() string {
	if s.requests == 0 {
		return ""
	}
	return speedLine(s.requests, s.processed, s.cached, s.firstMS/int64(s.requests), s.genTokens, s.genMS, s.server)
}

// maxStreamRate is the fastest generation a stream-measured rate is
// believed at; no local model streams this fast.
const maxStreamRate = 5000

// speedLine formats speed figures: prompt tokens computed and cached, the
// average time to first token, generation tokens per second.
func speedLine(requests, processed, cached int, avgFirstMS int64, genTokens int, genMS float64, server bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d request(s) · prompt %d computed", requests, processed)
	if server {
		fmt.Fprintf(&b, ", %d cached", cached)
	}
	fmt.Fprintf(&b, " · first token %.2fs avg", float64(avgFirstMS)/1000)
	switch rate := float64(genTokens) / genMS * 1000; {
	case genMS <= 0:
	case !server && rate > maxStreamRate:
		// Measured from the stream, such a rate means the reply came in
		// one burst (a scripted model, a buffering proxy): not a speed.
		b.WriteString(" · generation speed not measurable (each reply arrived at once)")
	default:
		fmt.Fprintf(&b, " · %.1f tok/s generated", rate)
	}
	if !server {
		b.WriteString(" (measured from the stream: the server sent no timings)")
	}
	return b.String()
}

// printSpeed writes a task's speed totals (review, agent log).
// It wraps at width (0: no limit).
func printSpeed(w io.Writer, t store.Tokens, width int) {
	if t.Requests == 0 {
		return
	}
	p := &reviewPrinter{w: w, width: width}
	p.wrap("Speed:     ", speedLine(t.Requests, t.PromptProcessed, t.PromptCached, t.AvgFirstTokenMS, t.GenTokens, t.GenMS, t.ServerTimings))
}

// reopen makes a closed renderer draw its live status line again, for the
// next round of a task (Request changes).
func (r *eventRenderer) reopen() {
	if r.mode != renderLive {
		return
	}
	r.mu.Lock()
	r.start = r.now()
	r.mu.Unlock()
	r.stopTick = redrawEvery(200*time.Millisecond, &r.mu, r.drawStatus)
}
