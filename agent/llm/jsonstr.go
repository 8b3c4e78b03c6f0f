package llm

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// rawText is a JSON value decoded to bytes for assembly. A JSON string is
// unquoted without replacing invalid UTF-8: some servers split a multi-byte
// character across two chunks, and encoding/json would turn each half into
// U+FFFD before the halves could be joined. Any other JSON value (an object
// given as "arguments" by some servers) is kept as its raw JSON text.
type rawText []byte

// UnmarshalJSON implements json.Unmarshaler.
func (t *rawText) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) == 0 || string(b) == "null":
		*t = nil
		return nil
	case b[0] == '"':
		out, err := unquoteBytes(b)
		if err != nil {
			return err
		}
		*t = out
		return nil
	default:
		// encoding/json may reuse b after we return: copy it.
		*t = append(rawText(nil), b...)
		return nil
	}
}

var errBadString = errors.New("malformed JSON string")

// unquoteBytes decodes a quoted JSON string, keeping bytes that are not valid
// UTF-8 as they are. encoding/json has already checked the syntax, so this
// only has to decode escapes.
func unquoteBytes(b []byte) ([]byte, error) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return nil, errBadString
	}
	b = b[1 : len(b)-1]
	esc := -1
	for i, c := range b {
		if c == '\\' {
			esc = i
			break
		}
	}
	if esc < 0 {
		return append([]byte(nil), b...), nil
	}
	out := make([]byte, 0, len(b))
	out = append(out, b[:esc]...)
	for i := esc; i < len(b); {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(b) {
			return nil, errBadString
		}
		switch e := b[i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b[i+2:])
			if !ok {
				return nil, errBadString
			}
			i += 6
			if utf16.IsSurrogate(r) {
				// A pair is two escapes in a row; a lone half becomes U+FFFD.
				r2, ok2 := rune(-1), false
				if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
					r2, ok2 = hex4(b[i+2:])
				}
				if dec := utf16.DecodeRune(r, r2); ok2 && dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, errBadString
		}
		i += 2
	}
	return out, nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// completePrefix returns how many leading bytes of b end on a character
// boundary: a trailing, possibly incomplete UTF-8 sequence is held back so a
// live display never shows half a character. Invalid bytes are not held.
func completePrefix(b []byte) int {
	n := len(b)
	for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return n // ASCII: everything before is complete
		}
		if !utf8.RuneStart(c) {
			continue // continuation byte: look further back for the start
		}
		need := 0
		switch {
		case c&0xE0 == 0xC0:
			need = 2
		case c&0xF0 == 0xE0:
			need = 3
		case c&0xF8 == 0xF0:
			need = 4
		default:
			return n // not a valid start byte; nothing to wait for
		}
		if n-i < need {
			return i
		}
		return n
	}
	return n
}
