package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/localagent/agent/agent/llm"
)

// Doom-loop thresholds. Small models get stuck repeating themselves; these
// counts stop that early without cutting off a model that legitimately
// re-runs a command after changing a file.
const (
	repeatStop      = 3 // the same reply (all calls identical) this many times in a row: stop
	failureRedirect = 3 // the same failing call this many times: one redirect message
	failureStop     = 4 // ... and this many: stop
)

// loopGuard detects a model going round in circles within one Run.
type loopGuard struct {
	last          string // signature of the previous reply's calls
	repeats       int    // how many times in a row last was seen
	lastAllFailed bool
	failures      map[string]int
	redirected    map[string]bool
}

type verdict struct {
	stop     bool
	reason   string
	redirect string // the call to warn about, when a redirect is due
}

func newLoopGuard() *loopGuard {
	return &loopGuard{failures: map[string]int{}, redirected: map[string]bool{}}
}

// before is asked before a reply's calls run. The same calls a third time in
// a row are not run: the model saw the same results twice already. A reply
// whose calls all failed is left to the failure rule in after, which warns
// the model once before stopping.
func (g *loopGuard) before(sigs []string) verdict {
	sig := strings.Join(sigs, "\x00")
	if sig == g.last {
		g.repeats++
	} else {
		g.last, g.repeats, g.lastAllFailed = sig, 1, false
	}
	if g.repeats >= repeatStop && !g.lastAllFailed {
		return verdict{stop: true, reason: fmt.Sprintf(
			"stopped: the model sent the same tool calls %d times in a row (%s) and got the same results; "+
				"it is stuck in a loop. Try rephrasing the task or a stronger model.", g.repeats, describeSigs(sigs))}
	}
	return verdict{}
}

// after is told which of the calls failed.
func (g *loopGuard) after(sigs []string, failed []bool) verdict {
	all := len(failed) > 0
	var v verdict
	for i, sig := range sigs {
		if !failed[i] {
			all = false
			continue
		}
		g.failures[sig]++
		n := g.failures[sig]
		switch {
		case n >= failureStop:
			return verdict{stop: true, reason: fmt.Sprintf(
				"stopped: the call %s failed %d times with the same arguments, also after a warning. "+
					"Check the tool's error in the transcript; the task may need a different approach.", describeSig(sig), n)}
		case n >= failureRedirect && !g.redirected[sig]:
			g.redirected[sig] = true
			v.redirect = describeSig(sig)
		}
	}
	g.lastAllFailed = all
	return v
}

// callSignatures identifies each call by its name and canonical arguments
// (keys sorted, whitespace gone), so formatting differences do not hide a
// repeat.
func callSignatures(calls []llm.ToolCall) []string {
	sigs := make([]string, len(calls))
	for i, c := range calls {
		sigs[i] = c.Function.Name + " " + canonicalJSON(c.Function.Arguments)
	}
	return sigs
}

func canonicalJSON(s string) string {
	raw := normalizeArgs([]byte(s))
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(bytes.TrimSpace(raw))
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(out)
}

func describeSig(sig string) string { return cutUTF8(sig, 200) }

func describeSigs(sigs []string) string {
	parts := make([]string, len(sigs))
	for i, s := range sigs {
		parts[i] = describeSig(s)
	}
	return strings.Join(parts, "; ")
}
