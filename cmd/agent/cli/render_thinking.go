package cli

import (
	"fmt"
	"strings"

	"github.com/localagent/agent/agent/event"
)

// think writes a piece of the model's thinking: after a "thinking:" mark
// in plain mode, dimmed on a terminal.
func (r *eventRenderer) think(e event.Event) {
	if !r.thinking {
		if r.midLine {
			fmt.Fprintln(r.w)
			r.midLine = false
		}
		r.thinking = true
		if r.mode == renderLive {
			fmt.Fprint(r.w, "\x1b[2m")
		}
		fmt.Fprint(r.w, who(e)+"thinking: ")
	}
	fmt.Fprint(r.w, e.Text)
	r.midLine = !strings.HasSuffix(e.Text, "\n")
}

// endThinking ends a run of thinking before anything else is written.
func (r *eventRenderer) endThinking() {
	if !r.thinking {
		return
	}
	r.thinking = false
	if r.mode == renderLive {
		fmt.Fprint(r.w, "\x1b[0m")
	}
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
}
