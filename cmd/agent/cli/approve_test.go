package cli

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/huh"

	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/worktree"
)

// Keystrokes as a terminal sends them; they go through an io.Pipe into the
// real huh form and bubbletea's real input parser.
const (
	keyUp    = "\x1b[A"
	keyDown  = "\x1b[B"
	keyLeft  = "\x1b[D"
	keyEnter = "\r"
	keyCtrlC = "\x03"
	keyEsc   = "\x1b"
)

// typeKeys writes each key with a pause, so the event loop sees them one
// by one (a lone ESC must not merge with the next key).
func typeKeys(t *testing.T, w *io.PipeWriter, keys ...string) {
	t.Helper()
	for _, k := range keys {
		time.Sleep(40 * time.Millisecond)
		if _, err := w.Write([]byte(k)); err != nil {
			return // the form has finished reading
		}
	}
}

// waitFor, put before a text among the keys, waits until the form shows
// that text before typing on: the confirmation group of the approval form
// is built after the first answer, and keys typed before it has the focus
// would land nowhere when the machine is busy.
const waitFor = "\x00wait:"

// typeKeysShown types keys like typeKeys; at a waitFor entry it waits
// until the form has written its text to shown.
func typeKeysShown(t *testing.T, w *io.PipeWriter, shown *syncBuffer, keys ...string) {
	t.Helper()
	for _, k := range keys {
		text, ok := strings.CutPrefix(k, waitFor)
		if !ok {
			typeKeys(t, w, k)
			continue
		}
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(shown.String(), text) {
			if time.Now().After(deadline) {
				t.Fatalf("the form never showed %q:\n%s", text, shown.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func sampleReview() *orchestrator.Review {
	return &orchestrator.Review{
		Task: "abc123", Branch: "agent/x-abc123", Base: "main", BaseBranch: "main", Unmerged: 1,
		Commits: []worktree.Commit{{ID: "0123456789", Subject: "change"}},
	}
}

func TestApprovalFormKeystrokes(t *testing.T) {
	tests := []struct {
		name string
		keys []string
		want orchestrator.Decision
	}{
		{"enter keeps (the default)", []string{keyEnter}, orchestrator.Keep},
		{"up once squashes", []string{keyUp, keyEnter}, orchestrator.Squash},
		{"up twice merges", []string{keyUp, keyUp, keyEnter}, orchestrator.Merge},
		{"down discards", []string{keyDown, keyEnter}, orchestrator.Discard},
		{"j/k move too", []string{"k", "k", "j", keyEnter}, orchestrator.Squash},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var choice orchestrator.Decision
			var sure bool
			f := newApprovalForm(sampleReview(), 0, 0, &choice, &sure)
			r, w := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- runForm(f.WithWidth(80), r, io.Discard) }()
			typeKeys(t, w, tt.keys...)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("form did not finish")
			}
			_ = w.Close()
			if choice != tt.want {
				t.Errorf("choice = %s, want %s", choice, tt.want)
			}
		})
	}
}

func TestApprovalFormAbortKeeps(t *testing.T) {
	for name, key := range map[string]string{"ctrl-c": keyCtrlC, "esc": keyEsc} {
		t.Run(name, func(t *testing.T) {
			r, w := io.Pipe()
			ios := &IOStreams{In: r, Out: io.Discard, ErrOut: io.Discard, InTTY: true, OutTTY: true}
			type res struct {
				d   orchestrator.Decision
				err error
			}
			done := make(chan res, 1)
			go func() {
				d, err := askDecision(ios, sampleReview(), 1, 0)
				done <- res{d, err}
			}()
			// Move to discard first: aborting must still keep.
			typeKeys(t, w, keyDown, key)
			select {
			case got := <-done:
				// Keep, then exit 130 (ErrCancelled).
				if !errors.Is(got.err, ErrCancelled) || got.d != orchestrator.Keep {
					t.Errorf("got %s, %v; want keep, cancelled", got.d, got.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("form did not finish")
			}
			_ = w.Close()
		})
	}
	// The raw form reports the abort as ErrCancelled.
	var choice orchestrator.Decision
	var sure bool
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- runForm(newApprovalForm(sampleReview(), 1, 0, &choice, &sure), r, io.Discard) }()
	typeKeys(t, w, keyCtrlC)
	if err := <-done; !errors.Is(err, ErrCancelled) {
		t.Errorf("ctrl-c: %v, want ErrCancelled", err)
	}
	_ = w.Close()
}

func TestDiscardAsksAgain(t *testing.T) {
	tests := []struct {
		name                 string
		unmerged, uncommited int
		keys                 []string
		want                 orchestrator.Decision
	}{
		{"unmerged, confirm declined by default", 2, 0, []string{keyDown, keyEnter, waitFor + "unmerged commit", keyEnter}, orchestrator.Keep},
		{"unmerged, confirmed", 2, 0, []string{keyDown, keyEnter, waitFor + "unmerged commit", keyLeft, keyEnter}, orchestrator.Discard},
		{"uncommitted, y confirms", 0, 3, []string{keyDown, keyEnter, waitFor + "uncommitted file", "y", keyEnter}, orchestrator.Discard},
		{"ctrl-c in the confirmation keeps", 1, 0, []string{keyDown, keyEnter, waitFor + "unmerged commit", keyCtrlC}, orchestrator.Keep},
		{"nothing to lose: no second question", 0, 0, []string{keyDown, keyEnter}, orchestrator.Discard},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w := io.Pipe()
			var out syncBuffer
			ios := &IOStreams{In: r, Out: io.Discard, ErrOut: &out, InTTY: true, OutTTY: true}
			rv := sampleReview()
			rv.Unmerged = tt.unmerged
			type res struct {
				d   orchestrator.Decision
				err error
			}
			done := make(chan res, 1)
			go func() {
				d, err := askDecision(ios, rv, tt.unmerged, tt.uncommited)
				done <- res{d, err}
			}()
			typeKeysShown(t, w, &out, tt.keys...)
			select {
			case got := <-done:
				wantErr := strings.Contains(tt.name, "ctrl-c")
				if (got.err != nil) != wantErr || got.d != tt.want {
					t.Errorf("got %s, %v; want %s (cancelled: %v)", got.d, got.err, tt.want, wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("form did not finish")
			}
			_ = w.Close()
		})
	}
}

func TestNoPromptWithoutTerminal(t *testing.T) {
	ios, _, _, _ := TestStreams()
	err := taskRun(t.Context(), &TaskOptions{IO: ios, Factory: NewFactory(ios), Prompt: "x", Approve: "ask"})
	var ue *usageError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want a usage error", err)
	}
	if want := "pass --approve merge|squash|keep|discard"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if _, err := parseApprove("sometimes"); err == nil {
		t.Error("bad --approve accepted")
	}
}

// A task that changed nothing has nothing to keep: Enter discards it.
func TestApprovalFormNothingChangedDefaultsToDiscard(t *testing.T) {
	r, w := io.Pipe()
	var out syncBuffer
	ios := &IOStreams{In: r, Out: io.Discard, ErrOut: &out, InTTY: true, OutTTY: true}
	rv := sampleReview()
	rv.Commits, rv.Stat.Files, rv.Unmerged = nil, nil, 0
	done := make(chan orchestrator.Decision, 1)
	go func() {
		d, _ := askDecision(ios, rv, 0, 0)
		done <- d
	}()
	typeKeysShown(t, w, &out, waitFor+"> Discard", keyEnter)
	select {
	case d := <-done:
		if d != orchestrator.Discard {
			t.Errorf("Enter on a task with no changes chose %s, want discard", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("form did not finish")
	}
	_ = w.Close()
	// Control: a task with changes still defaults to keep.
	r, w = io.Pipe()
	ios = &IOStreams{In: r, Out: io.Discard, ErrOut: &out, InTTY: true, OutTTY: true}
	go func() {
		d, _ := askDecision(ios, sampleReview(), 1, 0)
		done <- d
	}()
	typeKeys(t, w, keyEnter)
	if d := <-done; d != orchestrator.Keep {
		t.Errorf("Enter on a task with changes chose %s, want keep", d)
	}
	_ = w.Close()
}

// Esc while filtering a list ends the filter and leaves the form open;
// Esc outside the filter still quits it (control).
func TestEscInFilterDoesNotQuit(t *testing.T) {
	var answer string
	f := newAskForm("Whom should I greet?", []string{"Ada Lovelace", "Grace Hopper"}, &answer)
	f.Init()
	send := func(msg tea.Msg) {
		m, _ := f.Update(escEndsFilter(f, msg))
		f = m.(*huh.Form)
	}
	filtering := func() bool { return f.GetFocusedField().(interface{ GetFiltering() bool }).GetFiltering() }
	send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("/")})
	if !filtering() {
		t.Fatal("/ did not start the filter")
	}
	send(tea.KeyMsg{Type: tea.KeyEsc})
	if f.State == huh.StateAborted || filtering() {
		t.Fatalf("Esc in the filter: state %v, filtering %v", f.State, filtering())
	}
	send(tea.KeyMsg{Type: tea.KeyEsc})
	if f.State != huh.StateAborted {
		t.Fatalf("Esc outside the filter did not quit: state %v", f.State)
	}
}
