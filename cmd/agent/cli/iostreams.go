package cli

import (
	"bytes"
	"io"
	"os"
	"sync"

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

	pumpMu sync.Mutex
	pump   *keyPump // shares a non-file In between forms (keypump.go)
}

// System returns the process's own streams.
func System() *IOStreams {
	isTTY := func(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
	return &IOStreams{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		InTTY: isTTY(os.Stdin), OutTTY: isTTY(os.Stdout), ErrTTY: isTTY(os.Stderr),
	}
}

// TestStreams returns streams backed by buffers, none of them a TTY.
func TestStreams() (ios *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

// CanPrompt reports whether an interactive form may be shown.
func (s *IOStreams) CanPrompt() bool { return s.InTTY && s.OutTTY }
