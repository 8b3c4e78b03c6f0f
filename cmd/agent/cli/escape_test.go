package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
)

// What a hostile model, command or repository can try on a terminal.
const (
	clearScreen = "\x1b[2J\x1b[H"
	osc52       = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
	windowTitle = "\x1b]0;pwned\x07"
	forgedFile  = "notes.txt\n  A forged.txt +1 -0"
)

// hostileReview is a review whose every repository- or model-derived
// field carries an attack.
func hostileReview() *orchestrator.Review {
	one := 1
	return &orchestrator.Review{
		Task: "abc123", Prompt: "fix it" + windowTitle, Branch: "agent/fix-abc123", Base: "main", BaseBranch: "main",
		Unmerged: 1, Model: "m" + clearScreen,
		Commits: []worktree.Commit{{ID: "0123456789abcdef", Subject: "subject" + osc52}},
		Stat: worktree.Stat{Files: []worktree.FileStat{
			{Path: forgedFile, Status: "A", Added: 1},
			{Path: "link", Status: "A", Mode: "120000", LinkTarget: "../" + clearScreen},
		}, Added: 1},
		Uncommitted: []string{"x" + clearScreen},
		Commands:    []store.Command{{Command: "make test" + osc52, ExitCode: &one}},
		Tests:       &orchestrator.TestRun{Command: "make test" + windowTitle, ExitCode: &one, Runs: 1},
		Warnings:    []string{"warning text" + clearScreen},
		Result:      "done" + clearScreen + "\nTests: passed",
	}
}

func hasESC(s string) bool { return strings.ContainsAny(s, "\x1b\x07\u009b") }

func TestReviewEscapesEverything(t *testing.T) {
	var buf bytes.Buffer
	printReview(&buf, hostileReview(), 0, colors{})
	got := buf.String()
	if hasESC(got) {
		t.Errorf("the review holds raw control bytes:\n%q", got)
	}
	for _, want := range []string{`\x1b[2J`, `\x1b]52;c;`, `\x1b]0;pwned\x07`, `"notes.txt\n  A forged.txt +1 -0"`} {
		if !strings.Contains(got, want) {
			t.Errorf("review does not show %q escaped:\n%s", want, got)
		}
	}
	// The file name cannot forge a line of the file list.
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "A forged.txt") {
			t.Errorf("a file name forged a review line: %q", l)
		}
	}

	// Control: with escaping off, the same review carries the raw
	// sequences and the forged line, so the checks above can fail.
	restore := termtext.Passthrough()
	defer restore()
	buf.Reset()
	printReview(&buf, hostileReview(), 0, colors{})
	raw := buf.String()
	if !strings.Contains(raw, clearScreen) || !strings.Contains(raw, osc52) || !strings.Contains(raw, "\n  A forged.txt +1 -0") {
		t.Errorf("control: raw review lacks the attack bytes:\n%q", raw)
	}
}

func TestStreamEscapesModelText(t *testing.T) {
	run := func() string {
		ios, _, _, errOut := TestStreams()
		r := newEventRenderer(ios, false)
		for _, e := range []event.Event{
			{Kind: event.TextDelta, Text: "hello " + clearScreen[:2]},
			{Kind: event.TextDelta, Text: clearScreen[2:] + osc52 + " é"[:2]}, // split ESC sequence and UTF-8
			{Kind: event.TextDelta, Text: " é"[2:] + "\n"},
			{Kind: event.ToolStarted, Tool: "bash", Args: `{"command":"printf '\u001b]0;pwned\u0007'"}`},
			{Kind: event.ToolFinished, Tool: "bash", IsError: true, Text: "boom" + windowTitle},
			{Kind: event.Egress, Text: "evil" + clearScreen + ".example:443"},
			{Kind: event.Notice, Text: "note" + osc52},
			{Kind: event.Error, Text: "err" + clearScreen},
			{Kind: event.SubAgent, Agent: "sub" + windowTitle, State: "done", Text: "x" + osc52},
		} {
			r.Emit(e)
		}
		r.Close()
		return errOut.String()
	}
	got := run()
	if hasESC(got) {
		t.Errorf("the stream holds raw control bytes:\n%q", got)
	}
	if !strings.Contains(got, `hello \x1b[2J\x1b[H\x1b]52;c;`) || !strings.Contains(got, " é\n") {
		t.Errorf("streamed text not escaped as one piece:\n%q", got)
	}
	restore := termtext.Passthrough()
	defer restore()
	if raw := run(); !strings.Contains(raw, clearScreen) || !strings.Contains(raw, osc52) || !strings.Contains(raw, windowTitle) {
		t.Errorf("control: raw stream lacks the attack bytes:\n%q", raw)
	}
}

func TestFormEscapesBranch(t *testing.T) {
	rv := sampleReview()
	rv.Branch = "agent/x" + windowTitle
	rv.BaseBranch = "main" + clearScreen
	var out syncBuffer
	r, w := io.Pipe()
	var choice orchestrator.Decision
	var sure bool
	done := make(chan error, 1)
	go func() { done <- runForm(newApprovalForm(rv, 1, 0, &choice, &sure).WithWidth(200), r, &out) }()
	typeKeysShown(t, w, &out, waitFor+"for review", keyEnter)
	<-done
	_ = w.Close()
	got := ansi.Strip(out.String())
	if strings.Contains(got, "pwned\x07") || strings.Contains(got, "]0;pwned") && !strings.Contains(got, `\x1b]0;pwned`) {
		t.Errorf("the form shows a raw title sequence: %q", got)
	}
	if !strings.Contains(got, `agent/x\x1b]0;pwned\x07`) {
		t.Errorf("the form does not show the branch escaped: %q", got)
	}
}

// An 80-column terminal gets no line over 80 columns from the review.
func TestReviewFitsWidth(t *testing.T) {
	rv := hostileReview()
	rv.Prompt = strings.Repeat("a very long prompt ", 20)
	rv.Warnings = append(rv.Warnings, strings.Repeat("a long warning that must wrap ", 10))
	rv.Stat.Files = append(rv.Stat.Files, worktree.FileStat{Path: strings.Repeat("deep/", 30) + "file.go", Status: "M", Added: 3})
	rv.Commands = append(rv.Commands, store.Command{Command: strings.Repeat("x", 300)})
	rv.Result = strings.Repeat("The agent summarised its work at length. ", 20)
	var buf bytes.Buffer
	printReview(&buf, rv, 80, colors{on: true})
	for _, l := range strings.Split(buf.String(), "\n") {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("line of %d columns: %q", w, l)
		}
	}
	// Control: without a width the same review has longer lines.
	buf.Reset()
	printReview(&buf, rv, 0, colors{})
	long := false
	for _, l := range strings.Split(buf.String(), "\n") {
		long = long || ansi.StringWidth(l) > 80
	}
	if !long {
		t.Error("control: the review has no long line to cut")
	}
}

// NO_COLOR and TERM=dumb: no escape byte at all, even on a terminal.
func TestNoColorAndDumbTerminal(t *testing.T) {
	for _, tc := range []struct {
		name          string
		noColor, dumb bool
	}{{"NO_COLOR", true, false}, {"TERM=dumb", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			ios := &IOStreams{Out: &out, ErrOut: &errOut, OutTTY: true, ErrTTY: true, NoColor: tc.noColor, Dumb: tc.dumb}
			r := newEventRenderer(ios, false)
			if tc.noColor {
				// The live status line may still clear itself, but carries
				// no colour; the renderer itself is checked below.
				r.stopTick()
			}
			for _, e := range sampleEvents() {
				r.Emit(e)
			}
			r.Close()
			printReview(&out, hostileReview(), 0, colors{on: ios.Color(ios.OutTTY)})
			writeDoctor(ios, DoctorReport{OK: true, Checks: []Check{{Name: "x", Verdict: VerdictWarn, Detail: "d", Fix: "f"}}})
			all := out.String() + errOut.String()
			if tc.dumb && strings.Contains(all, "\x1b") {
				t.Errorf("TERM=dumb output holds ESC: %q", all)
			}
			if tc.noColor && strings.Contains(strings.ReplaceAll(all, clearLine, ""), "\x1b") {
				t.Errorf("NO_COLOR output holds an escape other than the status line's clear: %q", all)
			}
		})
	}
	// Control: a colour terminal does get colour.
	var out bytes.Buffer
	ios := &IOStreams{Out: &out, ErrOut: io.Discard, OutTTY: true}
	printReview(&out, hostileReview(), 0, colors{on: ios.Color(ios.OutTTY)})
	if !strings.Contains(out.String(), "\x1b[") {
		t.Error("control: no colour on a colour terminal")
	}
}

// The live status line is cut to the terminal's width: a wrapped one
// would leave a copy on every redraw (clearLine erases one physical line).
func TestStatusLineFitsNarrowTerminal(t *testing.T) {
	var buf bytes.Buffer
	ios := &IOStreams{Out: io.Discard, ErrOut: &buf, ErrTTY: true, Columns: func() int { return 30 }}
	r := newEventRenderer(ios, false)
	fixed := time.Unix(1000, 0)
	r.start, r.now = fixed, func() time.Time { return fixed.Add(2 * time.Second) }
	for _, e := range sampleEvents() {
		r.Emit(e)
	}
	r.Close()
	drawn := 0
	for _, seg := range strings.Split(buf.String(), clearLine) {
		if seg == "" || strings.Contains(seg, "\n") {
			continue // a regular line, not the status line
		}
		drawn++
		if w := ansi.StringWidth(seg); w > 29 {
			t.Errorf("status line of %d columns on a 30-column terminal: %q", w, seg)
		}
	}
	if drawn == 0 {
		t.Error("no status line was drawn")
	}
}

// No code outside tests turns escaping off.
func TestPassthroughOnlyInTests(t *testing.T) {
	root := filepath.Join(moduleRoot())
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("termtext.Passthrough(")) {
			t.Errorf("%s turns escaping off", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
