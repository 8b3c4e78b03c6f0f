package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
)

// renderMode says how events reach the user.
type renderMode int

const (
	renderPlain renderMode = iota // one line per step (not a terminal)
	renderLive                    // streamed text and a status line (terminal)
	renderJSON                    // one JSON object per event on stdout
)

// eventRenderer turns an event stream into terminal output. It is an
// event.Sink and safe for concurrent use.
type eventRenderer struct {
	mu    sync.Mutex
	mode  renderMode
	w     io.Writer        // human output
	text  *termtext.Writer // streamed model text, escaped, onto w
	jsonw io.Writer        // JSON lines (renderJSON)
	start time.Time

	midLine   bool // streamed text left the cursor mid-line
	status    statusLine
	tokensIn  int
	tokensOut int
	tools     int
	running   string // the tool running now
	stopTick  func() // ends the status line's clock (live mode)
	dim       colors // styling of the status line (off under NO_COLOR)
	now       func() time.Time

	// showThinking prints the model's thinking (dimmed on a terminal).
	showThinking bool
	thinking     bool // the last text written was thinking
	speed        speedTotals
}

// newEventRenderer picks the mode from the streams: JSON when asked, live
// when stderr is a terminal, plain lines otherwise. Human output goes to
// stderr (stdout stays for results and JSON).
func newEventRenderer(ios *IOStreams, jsonOut bool) *eventRenderer {
	r := &eventRenderer{w: ios.ErrOut, text: termtext.NewWriter(ios.ErrOut), jsonw: ios.Out,
		status: statusLine{w: ios.ErrOut, width: ios.ErrWidth}, start: time.Now(), now: time.Now, dim: colors{on: ios.Color(ios.ErrTTY)}}
	switch {
	case jsonOut:
		r.mode = renderJSON
	case ios.ErrTTY && !ios.Dumb:
		r.mode = renderLive
		// Elapsed time moves while the model thinks or a command runs.
		r.stopTick = redrawEvery(200*time.Millisecond, &r.mu, r.drawStatus)
	default:
		r.mode = renderPlain
	}
	return r
}

// Close stops the live status line and ends any half-written line.
func (r *eventRenderer) Close() {
	if r.stopTick != nil {
		r.stopTick()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.clear()
	_ = r.text.Flush()
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
}

// Emit renders one event.
func (r *eventRenderer) Emit(e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = r.now()
	}
	switch e.Kind {
	case event.Usage:
		r.tokensIn += e.PromptTokens
		r.tokensOut += e.CompletionTokens
		if e.Agent == "" {
			r.speed.add(e.Speed)
		}
	case event.ToolStarted:
		r.tools++
		r.running = e.Tool
	case event.ToolFinished:
		r.running = ""
	}
	if r.mode == renderJSON {
		_ = writeJSONLine(r.jsonw, e)
		return
	}
	r.status.clear()
	r.human(e)
	if r.mode == renderLive {
		r.drawStatus()
	}
}

func (r *eventRenderer) elapsed() string {
	return fmt.Sprintf("%5.1fs", r.now().Sub(r.start).Seconds())
}

func who(e event.Event) string {
	if e.Agent != "" {
		return "[" + termtext.Line(e.Agent) + "] "
	}
	return ""
}

// line writes a whole line, ending streamed text first.
func (r *eventRenderer) line(format string, a ...any) {
	_ = r.text.Flush()
	r.endThinking()
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
	fmt.Fprintf(r.w, format+"\n", a...)
}

func (r *eventRenderer) human(e event.Event) {
	switch e.Kind {
	case event.TextDelta:
		if e.Text == "" {
			return
		}
		r.endThinking()
		if r.mode == renderPlain && !r.midLine {
			fmt.Fprint(r.w, who(e))
		}
		// Model text is streamed as it comes, escaped (a character split
		// between two deltas is held until it is whole).
		_, _ = r.text.Write([]byte(e.Text))
		r.midLine = !strings.HasSuffix(e.Text, "\n")
	case event.ThinkingDelta:
		// Kept in the transcript (agent log); shown live on request.
		if r.showThinking && e.Text != "" {
			r.think(e)
		}
	case event.ToolStarted:
		r.line("%s %s> %s %s", r.elapsed(), who(e), termtext.Line(e.Tool), summarizeArgs(e.Tool, e.Args))
	case event.ToolFinished:
		status := "ok"
		switch {
		case e.TimedOut:
			status = "timed out"
		case e.OOMKill:
			status = "OOM-killed"
		case e.ExitCode != nil && *e.ExitCode != 0:
			status = fmt.Sprintf("exit %d", *e.ExitCode)
		case e.ExitCode != nil:
			status = "exit 0"
		case e.IsError:
			status = "error"
		}
		detail := ""
		failed := e.ExitCode != nil && *e.ExitCode != 0 || e.TimedOut || e.OOMKill
		tail := failureTail(e.Output, 5)
		if e.IsError && e.Text != "" && (!failed || len(tail) == 0) {
			detail = ": " + oneLine(e.Text, 100)
		}
		r.line("%s %s  %s %s (%s)%s", r.elapsed(), who(e), termtext.Line(e.Tool), status, e.Duration.Round(time.Millisecond), detail)
		// A failed command says why at the end of its output (the
		// compiler's error, the test summary), not at its start.
		if failed {
			for _, l := range tail {
				r.line("        %s  │ %s", who(e), l)
			}
		}
	case event.Notice:
		r.line("%s %snote: %s", r.elapsed(), who(e), termtext.Text(e.Text))
	case event.Progress:
		r.line("%s %s%s", r.elapsed(), who(e), termtext.Text(e.Text))
	case event.Egress:
		verdict := "denied"
		if e.Allowed {
			verdict = "allowed"
		}
		r.line("%s %snetwork %s: %s", r.elapsed(), who(e), verdict, termtext.Line(e.Text))
	case event.SubAgent:
		r.line("%s sub-agent %s: %s %s", r.elapsed(), termtext.Line(e.Agent), termtext.Line(e.State), oneLine(e.Text, 100))
	case event.Error:
		r.line("%s %serror: %s", r.elapsed(), who(e), termtext.Text(e.Text))
	case event.Done:
		if e.Agent == "" {
			r.line("%s done (%s) · %d tool calls · tokens %d in / %d out", r.elapsed(), termtext.Line(e.State), r.tools, r.tokensIn, r.tokensOut)
			if s := r.speed.String(); s != "" {
				r.line("%s speed: %s", r.elapsed(), s)
			}
		}
	case event.Usage:
	}
}

// summarizeArgs shows the part of a tool's arguments a user cares about.
func summarizeArgs(tool, args string) string {
	var m map[string]any
	if json.Unmarshal([]byte(args), &m) != nil {
		return oneLine(args, 80)
	}
	for _, k := range []string{"command", "path", "pattern", "thought"} {
		if v, ok := m[k].(string); ok && v != "" {
			switch k {
			case "command":
				return "$ " + oneLine(v, 100)
			case "path":
				return fit(termtext.Path(v), 100)
			}
			return oneLine(v, 100)
		}
	}
	return oneLine(args, 80)
}

// oneLine shows untrusted text on one line: whitespace runs (newlines
// included) become one space, every control is escaped (termtext.Line),
// and the result is cut to n characters.
// failureTail is the last n non-empty lines of a failed command's output,
// escaped and cut to a screen line each, without the toolbox's closing
// "[exit code N]" (the status says it).
func failureTail(out string, n int) []string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if k := len(lines); k > 0 && strings.HasPrefix(lines[k-1], "[exit code ") {
		lines = lines[:k-1]
	}
	var tail []string
	for i := len(lines) - 1; i >= 0 && len(tail) < n; i-- {
		if l := strings.TrimRight(lines[i], " \t\r"); strings.TrimSpace(l) != "" {
			tail = append(tail, oneLine(l, 160))
		}
	}
	slices.Reverse(tail)
	return tail
}

func oneLine(s string, n int) string {
	s = termtext.Line(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// age says how long ago t was in its largest whole unit: 45s, 12m, 5h, 3d.
func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// drawStatus draws the bottom status line (live mode only). Streamed text
// in progress keeps the line free.
func (r *eventRenderer) drawStatus() {
	if r.mode != renderLive || r.midLine {
		return
	}
	el := r.now().Sub(r.start)
	what := "thinking"
	if r.running != "" {
		what = "running " + termtext.Line(r.running)
	}
	s := fmt.Sprintf("%s %s · %s · %d tool calls · tokens %d in / %d out",
		spinner[int(el/(100*time.Millisecond))%len(spinner)], el.Round(time.Second), what, r.tools, r.tokensIn, r.tokensOut)
	r.status.draw(r.dim.Dim(s))
}
