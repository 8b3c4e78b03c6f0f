package termtext

import (
	"io"
	"unicode/utf8"
)

// Writer escapes everything written through it like Text before passing it
// on. A multi-byte character split across two writes is held back until it
// is complete, so streamed text (model deltas, command output) is escaped
// exactly as if it had come in one piece.
type Writer struct {
	w       io.Writer
	pending []byte // an incomplete UTF-8 sequence (or a '\r') at the end of the last write
}

// NewWriter returns a Writer escaping onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it; it reports len(p) on success.
func (w *Writer) Write(p []byte) (int, error) {
	buf := append(w.pending, p...)
	w.pending = nil
	cut := len(buf)
	// Hold back an incomplete trailing UTF-8 sequence (at most 3 bytes).
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-3; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	// And a trailing '\r' that may be the start of "\r\n".
	if cut == len(buf) && cut > 0 && buf[cut-1] == '\r' {
		cut--
	}
	w.pending = append([]byte(nil), buf[cut:]...)
	if cut == 0 {
		return len(p), nil
	}
	if _, err := io.WriteString(w.w, Text(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what was held back (escaped as it is).
func (w *Writer) Flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	s := Text(string(w.pending))
	w.pending = nil
	_, err := io.WriteString(w.w, s)
	return err
}
