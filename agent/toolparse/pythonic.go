package toolparse

import (
	"strconv"
	"strings"
)

// Pythonic calls (Llama 3.2 and 4, LFM2, some small fine-tunes): a list of
// Python function calls with keyword arguments, bare or inside LFM2's
// <|tool_call_start|> tags:
//
//	[read_file(path="a.go"), bash(command="go test ./...", timeout=60)]
//
// Arguments are Python literals: strings, numbers, True/False/None, lists,
// dicts. Positional arguments are not a call: the schema names every
// argument.

// pythonicList reads a whole tag body as a call list.
func (p *Parser) pythonicList(body string, untagged bool) ([]Call, bool) {
	calls, end, _, ok := p.parsePy(body, 0)
	if !ok || strings.TrimSpace(body[end:]) != "" {
		return nil, false
	}
	if untagged {
		for _, c := range calls {
			if !p.checked(c.Name, c.Arguments) {
				return nil, false
			}
		}
	}
	return calls, true
}

// pythonic finds bare call lists in running text, outside taken spans.
func (p *Parser) pythonic(s string, taken []span, res *Result) []span {
	var out []span
	for i := 0; i < len(s); i++ {
		if s[i] != '[' || overlaps(taken, i, i+1) || overlaps(out, i, i+1) || mentioned(s, i) {
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] == ' ' || s[j] == '\n') {
			j++
		}
		k := j
		for k < len(s) && isIdent(s[k]) {
			k++
		}
		if k == j || k >= len(s) || s[k] != '(' || !p.isKnown(s[j:k]) {
			continue
		}
		calls, end, cut, ok := p.parsePy(s, i)
		if cut && !overlaps(taken, i, len(s)) {
			res.Incomplete, res.Fragment = true, s[i:]
			return append(out, span{start: i, end: len(s), cut: true})
		}
		if !ok {
			continue
		}
		good := true
		for _, c := range calls {
			good = good && p.checked(c.Name, c.Arguments)
		}
		if good && !overlaps(taken, i, end) {
			out = append(out, span{start: i, end: end, calls: calls})
			i = end - 1
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c == '-' || c == '.' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

// pyReader reads Python literals. cut is set when the text ends inside one.
type pyReader struct {
	s   string
	i   int
	cut bool
}

func (r *pyReader) space() {
	for r.i < len(r.s) && strings.IndexByte(" \t\r\n", r.s[r.i]) >= 0 {
		r.i++
	}
}

// eat consumes c after spaces.
func (r *pyReader) eat(c byte) bool {
	r.space()
	if r.i >= len(r.s) {
		r.cut = true
		return false
	}
	if r.s[r.i] != c {
		return false
	}
	r.i++
	return true
}

func (r *pyReader) peek() byte {
	r.space()
	if r.i >= len(r.s) {
		r.cut = true
		return 0
	}
	return r.s[r.i]
}

func (r *pyReader) ident() string {
	r.space()
	j := r.i
	for r.i < len(r.s) && isIdent(r.s[r.i]) {
		r.i++
	}
	if r.i >= len(r.s) {
		r.cut = true
	}
	return r.s[j:r.i]
}

// parsePy reads "[call, ...]" at s[i:]; every call must name a known tool
// and take keyword arguments only.
func (p *Parser) parsePy(s string, i int) (calls []Call, end int, cut, ok bool) {
	r := &pyReader{s: s, i: i}
	if !r.eat('[') {
		return nil, 0, r.cut, false
	}
	for {
		name := r.ident()
		if !p.isKnown(name) || !r.eat('(') {
			return nil, 0, r.cut && p.isKnown(name), false
		}
		args := map[string]any{}
		for r.peek() != ')' {
			if r.cut {
				return nil, 0, true, false
			}
			k := r.ident()
			if k == "" || !r.eat('=') {
				return nil, 0, r.cut, false
			}
			v, good := r.value(0)
			if !good {
				return nil, 0, r.cut, false
			}
			args[k] = v
			if r.peek() == ',' {
				r.i++
			}
		}
		r.i++ // ')'
		a, good := compactJSON(args)
		if !good {
			return nil, 0, false, false
		}
		calls = append(calls, Call{Name: name, Arguments: a})
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			r.i++
			return calls, r.i, false, true
		default:
			return nil, 0, r.cut, false
		}
	}
}

// value reads one literal.
func (r *pyReader) value(depth int) (any, bool) {
	if depth > 32 {
		return nil, false
	}
	switch c := r.peek(); {
	case r.cut:
		return nil, false
	case c == '"' || c == '\'':
		return r.str()
	case c == '[' || c == '(':
		closing := byte(']')
		if c == '(' {
			closing = ')'
		}
		r.i++
		list := []any{}
		for r.peek() != closing {
			if r.cut {
				return nil, false
			}
			v, ok := r.value(depth + 1)
			if !ok {
				return nil, false
			}
			list = append(list, v)
			if r.peek() == ',' {
				r.i++
			} else if r.peek() != closing {
				return nil, false
			}
		}
		r.i++
		return list, true
	case c == '{':
		r.i++
		obj := map[string]any{}
		for r.peek() != '}' {
			if r.cut {
				return nil, false
			}
			k, ok := r.value(depth + 1)
			ks, isStr := k.(string)
			if !ok || !isStr || !r.eat(':') {
				return nil, false
			}
			v, ok := r.value(depth + 1)
			if !ok {
				return nil, false
			}
			obj[ks] = v
			if r.peek() == ',' {
				r.i++
			} else if r.peek() != '}' {
				return nil, false
			}
		}
		r.i++
		return obj, true
	default:
		j := r.i
		for r.i < len(r.s) && (isIdent(r.s[r.i]) || r.s[r.i] == '+') {
			r.i++
		}
		if r.i >= len(r.s) {
			r.cut = true
			return nil, false
		}
		switch w := r.s[j:r.i]; w {
		case "True", "true":
			return true, true
		case "False", "false":
			return false, true
		case "None", "null":
			return nil, true
		default:
			if n, err := strconv.ParseInt(w, 10, 64); err == nil {
				return n, true
			}
			if f, err := strconv.ParseFloat(w, 64); err == nil {
				return f, true
			}
			return nil, false
		}
	}
}

// str reads a quoted string (”, "", or triple-quoted) with Python escapes.
func (r *pyReader) str() (any, bool) {
	q := r.s[r.i]
	delim := string(q)
	if strings.HasPrefix(r.s[r.i:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	r.i += len(delim)
	var b strings.Builder
	for {
		if r.i >= len(r.s) {
			r.cut = true
			return nil, false
		}
		if strings.HasPrefix(r.s[r.i:], delim) {
			r.i += len(delim)
			return b.String(), true
		}
		c := r.s[r.i]
		if c == '\n' && len(delim) == 1 {
			return nil, false
		}
		if c != '\\' {
			b.WriteByte(c)
			r.i++
			continue
		}
		if r.i+1 >= len(r.s) {
			r.cut = true
			return nil, false
		}
		e := r.s[r.i+1]
		r.i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
}
