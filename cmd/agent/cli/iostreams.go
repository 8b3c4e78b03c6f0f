package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/charmbracelet/x/ansi"
	"golang.org/x/term"
)

// IOStreams are the streams a command reads and writes. Commands never use
// os.Stdout directly, so tests can capture output and pretend to be a TTY.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	// InTTY, OutTTY and ErrTTY say whether each stream is a terminal.
	InTTY, OutTTY, ErrTTY bool

	// Dumb is set for TERM=dumb: no cursor movement, no colour, no escape
	// sequence of any kind.
	Dumb bool
	// NoColor is set by NO_COLOR (https://no-color.org): no colour or
	// other text styling.
	NoColor bool
	// Columns is the width stdout should fit in: the terminal's when stdout
	// is one, else $COLUMNS; 0 means no limit (a pipe). ErrColumns is the
	// same for stderr (status lines).
	Columns, ErrColumns func() int
	// Pager is the command output is paged through on a terminal ("" or
	// "cat": none).
	Pager string

	// jsonDone: the command printed its final JSON object itself.
	jsonDone bool

	pager  *exec.Cmd
	out    io.Writer // Out before the pager replaced it
	pumpMu sync.Mutex
	pump   *keyPump // shares a non-file In between forms (keypump.go)
}

// System returns the process's own streams.
func System() *IOStreams {
	isTTY := func(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
	s := &IOStreams{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		InTTY: isTTY(os.Stdin), OutTTY: isTTY(os.Stdout), ErrTTY: isTTY(os.Stderr),
		Dumb:    os.Getenv("TERM") == "dumb",
		NoColor: os.Getenv("NO_COLOR") != "",
		Pager:   pagerCommand(),
	}
	size := func(f *os.File) func() int {
		return func() int {
			if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
				return w
			}
			return envColumns()
		}
	}
	s.Columns, s.ErrColumns = size(os.Stdout), size(os.Stderr)
	return s
}

// envColumns is $COLUMNS, 0 when unset or not a number.
func envColumns() int {
	n, err := strconv.Atoi(os.Getenv("COLUMNS"))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// pagerCommand follows git's order: AGENT_PAGER, then PAGER, then less.
func pagerCommand() string {
	for _, k := range []string{"AGENT_PAGER", "PAGER"} {
		if v, ok := os.LookupEnv(k); ok {
			return v
		}
	}
	return "less"
}

// TestStreams returns streams backed by buffers, none of them a TTY.
func TestStreams() (ios *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

// CanPrompt reports whether an interactive form may be shown.
func (s *IOStreams) CanPrompt() bool { return s.InTTY && s.OutTTY && !s.Dumb }

// Width is the number of columns to fit output in; 0 means no limit.
func (s *IOStreams) Width() int {
	if s.Columns == nil {
		return 0
	}
	return s.Columns()
}

// ErrWidth is Width for stderr.
func (s *IOStreams) ErrWidth() int {
	if s.ErrColumns == nil {
		return s.Width()
	}
	return s.ErrColumns()
}

// Color reports whether text on a stream that is (or is not) a terminal may
// be coloured: only on a terminal, never under NO_COLOR or TERM=dumb.
func (s *IOStreams) Color(tty bool) bool { return tty && !s.NoColor && !s.Dumb }

// StartPager sends Out through the pager when Out is a terminal, like git
// does for diff and log. less gets -FRX unless $LESS is set, so short
// output is printed as it is and colours pass through.
func (s *IOStreams) StartPager() error {
	if !s.OutTTY || s.Dumb || s.Pager == "" || s.Pager == "cat" || s.pager != nil {
		return nil
	}
	cmd := exec.Command("/bin/sh", "-c", s.Pager)
	cmd.Env = os.Environ()
	if _, ok := os.LookupEnv("LESS"); !ok {
		cmd.Env = append(cmd.Env, "LESS=FRX")
	}
	if _, ok := os.LookupEnv("LV"); !ok {
		cmd.Env = append(cmd.Env, "LV=-c")
	}
	cmd.Stdout, cmd.Stderr = s.Out, s.ErrOut
	w, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pager %q: %w (set PAGER, or pass --no-pager)", s.Pager, err)
	}
	s.pager, s.out, s.Out = cmd, s.Out, &pagerWriter{w}
	return nil
}

// StopPager closes the pager's input and waits until the user quits it.
func (s *IOStreams) StopPager() {
	if s.pager == nil {
		return
	}
	_ = s.Out.(*pagerWriter).Close()
	_ = s.pager.Wait()
	s.Out, s.pager = s.out, nil
}

// pagerWriter turns the error of a pager that quit early into success:
// the user has seen what they wanted.
type pagerWriter struct{ io.WriteCloser }

func (w *pagerWriter) Write(p []byte) (int, error) {
	n, err := w.WriteCloser.Write(p)
	if err != nil && (errors.Is(err, os.ErrClosed) || strings.Contains(err.Error(), "broken pipe")) {
		return len(p), nil
	}
	return n, err
}

// fit cuts s to width columns (0: no limit), ending it with "…".
func fit(s string, width int) string {
	if width <= 0 || ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}
