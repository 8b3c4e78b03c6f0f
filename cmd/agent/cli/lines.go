package cli

import (
	"bytes"
	"io"
)

// lineWriter passes whole lines through fn before writing them (fn gets
// the line without its newline). Used to escape and colour streamed
// output line by line.
type lineWriter struct {
	w   io.Writer
	fn  func(string) string
	buf []byte
}

func newLineWriter(w io.Writer, fn func(string) string) *lineWriter {
	return &lineWriter{w: w, fn: fn}
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if _, err := io.WriteString(l.w, l.fn(string(l.buf[:i]))+"\n"); err != nil {
			return 0, err
		}
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

// Flush writes a last line that had no newline.
func (l *lineWriter) Flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	_, err := io.WriteString(l.w, l.fn(string(l.buf)))
	l.buf = nil
	return err
}
