package termtext

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// passthrough turns escaping off; only control runs in tests set it.
var passthrough atomic.Bool

// Passthrough turns escaping off until restore is called. It exists so a
// test can show that the bytes it checks for really reach the output
// without this package (a control run); production code never calls it.
func Passthrough() (restore func()) {
	passthrough.Store(true)
	return func() { passthrough.Store(false) }
}

// Line escapes s for a one-line context (a table cell, a status line, a
// form title): every control is escaped, newlines and tabs included.
func Line(s string) string { return escape(s, false) }

// Text escapes s for a multi-line context (a transcript, a diff, command
// output): newlines and tabs are kept, every other control is escaped, and
// a carriage return ending a line ("\r\n") becomes a plain newline.
func Text(s string) string { return escape(s, true) }

// needsEscape reports whether r must be shown escaped.
func needsEscape(r rune, multiline bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return !multiline
	case r < 0x20 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f:
		return true
	case isBidi(r):
		return true
	case r == utf8.RuneError:
		return false // handled by the caller (it may be a real U+FFFD)
	case r == 0x2028 || r == 0x2029:
		return true // line and paragraph separators
	}
	return !unicode.IsPrint(r) && !unicode.IsSpace(r)
}

// isBidi reports the characters that reorder text on display (Trojan
// Source): embeddings, overrides and isolates.
func isBidi(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c
}

func clean(s string, multiline bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f {
			if multiline && (c == '\n' || c == '\t') {
				continue
			}
			return false
		}
	}
	return true
}

func escape(s string, multiline bool) string {
	if passthrough.Load() || clean(s, multiline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case multiline && r == '\r' && i+1 < len(s) && s[i+1] == '\n':
			// CRLF line ends: show the line, not a stray \r.
		case needsEscape(r, multiline):
			writeEscaped(&b, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func writeEscaped(b *strings.Builder, r rune) {
	switch r {
	case '\n':
		b.WriteString(`\n`)
	case '\t':
		b.WriteString(`\t`)
	case '\r':
		b.WriteString(`\r`)
	default:
		if r < 0x80 {
			fmt.Fprintf(b, `\x%02x`, r)
		} else {
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
}

// Path shows a file name the way git does with core.quotePath=false: as it
// is when it holds only printable characters, otherwise in double quotes
// with C escapes (\n, \t, \", \\, octal \ooo for other bytes). Printable
// non-ASCII letters stay readable; bytes that are not valid UTF-8 and
// unprintable characters are shown in octal, like git.
func Path(p string) string {
	if passthrough.Load() {
		return p
	}
	quote := false
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		if (r == utf8.RuneError && size <= 1) || r == '"' || r == '\\' || needsEscape(r, false) {
			quote = true
			break
		}
		i += size
	}
	if !quote {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1, r != '"' && r != '\\' && needsEscape(r, false):
			for _, c := range []byte(p[i : i+size]) {
				switch c {
				case '\a':
					b.WriteString(`\a`)
				case '\b':
					b.WriteString(`\b`)
				case '\t':
					b.WriteString(`\t`)
				case '\n':
					b.WriteString(`\n`)
				case '\v':
					b.WriteString(`\v`)
				case '\f':
					b.WriteString(`\f`)
				case '\r':
					b.WriteString(`\r`)
				default:
					fmt.Fprintf(&b, `\%03o`, c)
				}
			}
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(p[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// Paths applies Path to each of ps.
func Paths(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = Path(p)
	}
	return out
}

// JSON makes encoded JSON safe to print: encoding/json already escapes C0
// controls inside strings, but leaves C1 controls and bidi overrides as
// they are. They can only occur inside strings, where \uXXXX means the
// same character, so the document decodes to the same value.
func JSON(b []byte) []byte {
	if passthrough.Load() {
		return b
	}
	var out []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if size > 1 && ((r >= 0x80 && r <= 0x9f) || isBidi(r) || r == 0x2028 || r == 0x2029) {
			if out == nil {
				out = append(make([]byte, 0, len(b)+16), b[:i]...)
			}
			out = fmt.Appendf(out, `\u%04x`, r)
		} else if out != nil {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	if out == nil {
		return b
	}
	return out
}
