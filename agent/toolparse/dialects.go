package toolparse

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
)

// The formats below are the ones llama.cpp's chat parser knows for model
// families whose calls are not JSON inside a plain tag. Each is read only
// when its own markers are present, so a reply in one format is never
// searched with the rules of another.

// mentioned reports a marker written inside inline code (`[TOOL_CALLS]...`):
// a model explaining a format, not using it.
func mentioned(s string, at int) bool {
	return at > 0 && s[at-1] == '`'
}

// mentionEnd is where the inline code holding a mention at ends: its
// closing backtick, or the end of the line.
func mentionEnd(s string, at int) int {
	if i := strings.IndexAny(s[at:], "`\n"); i >= 0 {
		return at + i
	}
	return len(s)
}

// jsonAt decodes the JSON value starting at s[i:] after spaces. end is the
// offset just past it. cut reports that s ended inside the value.
func jsonAt(s string, i int) (raw json.RawMessage, end int, cut, ok bool) {
	j := i
	for j < len(s) && strings.IndexByte(" \t\r\n", s[j]) >= 0 {
		j++
	}
	if j >= len(s) {
		return nil, len(s), true, false
	}
	if s[j] != '{' {
		return nil, j, false, false
	}
	dec := json.NewDecoder(strings.NewReader(s[j:]))
	if err := dec.Decode(&raw); err != nil {
		return nil, len(s), errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF), false
	}
	return raw, j + int(dec.InputOffset()), false, true
}

// dialects finds the calls in the formats with their own markers. The spans
// it returns are calls, cut calls, or regions that look like a format but are
// not a call (an unknown tool, a mention): those are kept as text and no
// other rule may read them.
func (p *Parser) dialects(s string, res *Result) []span {
	var out []span
	add := func(sps []span) {
		for _, sp := range sps {
			if !overlaps(out, sp.start, sp.end) {
				out = append(out, sp)
			}
		}
	}
	if strings.Contains(s, "[ARGS]") {
		add(p.mistral(s, res))
	}
	if strings.Contains(s, "｜tool") {
		add(p.sectioned(s, res, deepseek))
	}
	if strings.Contains(s, "<|tool_call_begin|>") {
		add(p.sectioned(s, res, kimi))
	}
	if strings.Contains(s, "to=functions.") {
		add(p.harmony(s, res, out))
	}
	if strings.Contains(s, ">>>") || functionaryStart.MatchString(s) {
		add(p.functionary(s, res, out))
	}
	return out
}

// Mistral (Devstral, Magistral, Mistral Small 3.2):
// [TOOL_CALLS]NAME[ARGS]{...}, optionally with [CALL_ID]ID before [ARGS];
// several calls follow each other, each with or without its own
// [TOOL_CALLS].
var mistralHead = regexp.MustCompile(`^\s*(\[TOOL_CALLS\])?\s*([A-Za-z0-9_.\-]+)\s*(?:\[CALL_ID\]\s*[A-Za-z0-9_\-]*\s*)?\[ARGS\]`)

func (p *Parser) mistral(s string, res *Result) []span {
	var out []span
	from := 0
	for {
		i := strings.Index(s[from:], "[TOOL_CALLS]")
		if i < 0 {
			return out
		}
		start := from + i
		if mentioned(s, start) {
			from = mentionEnd(s, start)
			out = append(out, span{start: start, end: from})
			continue
		}
		if mistralHead.FindStringSubmatchIndex(s[start:]) == nil {
			// A JSON list after [TOOL_CALLS] (Mistral Nemo) is the tag
			// rule's.
			from = start + len("[TOOL_CALLS]")
			continue
		}
		sp := span{start: start}
		pos, good := start, true
		for {
			m := mistralHead.FindStringSubmatchIndex(s[pos:])
			if m == nil || (pos != start && m[2] < 0 && !p.isKnown(s[pos+m[4]:pos+m[5]])) {
				break
			}
			name := s[pos+m[4] : pos+m[5]]
			raw, end, cut, ok := jsonAt(s, pos+m[1])
			if cut && p.isKnown(name) && good {
				res.Incomplete, res.Fragment = true, s[start:]
				return append(out, span{start: start, end: len(s), cut: true})
			}
			if !ok {
				good = false
				pos = pos + m[1]
				break
			}
			if !p.isKnown(name) {
				good = false
			}
			sp.calls = append(sp.calls, Call{Name: name, Arguments: argsText(raw, true)})
			pos = end
		}
		sp.end = pos
		if !good {
			sp.calls = nil // one unknown or broken call spoils the block
		}
		out = append(out, sp)
		from = pos
	}
}

// sectionFormat is a format of special tokens: an optional section around
// the calls, each call opened and closed, its header and arguments split by
// a separator token.
type sectionFormat struct {
	open, close, callOpen, callClose, sep *regexp.Regexp
	// call turns the text before and after the separator into a name and
	// the arguments' JSON text.
	call func(head, args string) (string, string)
}

// DeepSeek R1 and V3 write the tokens with a fullwidth bar (U+FF5C) and a
// lower eighth block (U+2581); llama.cpp also accepts "_" and " " for the
// block, as models tuned on detokenised text write them.
func dsTok(words string) *regexp.Regexp {
	return regexp.MustCompile(`<｜` + strings.ReplaceAll(words, " ", `\\?[▁_ ]`) + `｜>`)
}

var deepseek = sectionFormat{
	open: dsTok("tool calls begin"), close: dsTok("tool calls end"),
	callOpen: dsTok("tool call begin"), callClose: dsTok("tool call end"), sep: dsTok("tool sep"),
	// R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
	// V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
	call: func(head, args string) (string, string) {
		head = strings.TrimSpace(head)
		if head == "function" {
			name, rest, _ := strings.Cut(strings.TrimLeft(args, " \t"), "\n")
			return strings.TrimSpace(name), unfence(rest)
		}
		return head, unfence(args)
	},
}

// Kimi K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
// <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>
var kimi = sectionFormat{
	open:     regexp.MustCompile(`<\|tool_calls?_section_begin\|>`),
	close:    regexp.MustCompile(`<\|tool_calls?_section_end\|>`),
	callOpen: regexp.MustCompile(`<\|tool_call_begin\|>`), callClose: regexp.MustCompile(`<\|tool_call_end\|>`),
	sep: regexp.MustCompile(`<\|tool_call_argument_begin\|>`),
	call: func(head, args string) (string, string) {
		name := strings.TrimPrefix(strings.TrimSpace(head), "functions.")
		if k := strings.LastIndexByte(name, ':'); k >= 0 {
			name = name[:k]
		}
		return name, strings.TrimSpace(args)
	},
}

// unfence is s without a ```json ... ``` fence around it.
func unfence(s string) string {
	return strings.TrimSpace(string(stripFence([]byte(strings.TrimSpace(s)))))
}

func firstLoc(re *regexp.Regexp, s string, from int) []int {
	loc := re.FindStringIndex(s[from:])
	if loc == nil {
		return nil
	}
	return []int{from + loc[0], from + loc[1]}
}

func (p *Parser) sectioned(s string, res *Result, f sectionFormat) []span {
	var out []span
	from := 0
	for from < len(s) {
		o, c := firstLoc(f.open, s, from), firstLoc(f.callOpen, s, from)
		loc := o
		if loc == nil || (c != nil && c[0] < o[0]) {
			loc = c
		}
		if loc == nil {
			return out
		}
		start := loc[0]
		bodyStart := loc[1]
		if loc[0] == start && c != nil && c[0] == start {
			bodyStart = start // a call without its section
		}
		if mentioned(s, start) {
			from = mentionEnd(s, start)
			out = append(out, span{start: start, end: from})
			continue
		}
		bodyEnd, end, closed := len(s), len(s), false
		if e := firstLoc(f.close, s, bodyStart); e != nil {
			bodyEnd, end, closed = e[0], e[1], true
		} else if bodyStart == start {
			// A lone call runs to its own close token.
			if e := firstLoc(f.callClose, s, bodyStart); e != nil {
				bodyEnd, end, closed = e[1], e[1], true
			}
		}
		body := s[bodyStart:bodyEnd]
		calls, cut, good := p.sectionCalls(body, f)
		switch {
		case cut && !closed && good:
			res.Incomplete, res.Fragment = true, s[start:]
			return append(out, span{start: start, end: len(s), cut: true})
		case good && !cut && len(calls) > 0:
			out = append(out, span{start: start, end: end, calls: calls})
		default:
			out = append(out, span{start: start, end: end})
		}
		from = end
	}
	return out
}

// sectionCalls reads the calls in a section body. cut reports that the
// last one is unfinished; good that none is unknown or malformed.
func (p *Parser) sectionCalls(body string, f sectionFormat) (calls []Call, cut, good bool) {
	locs := f.callOpen.FindAllStringIndex(body, -1)
	if len(locs) == 0 {
		return nil, strings.TrimSpace(body) == "", true
	}
	for i, l := range locs {
		partEnd := len(body)
		if i+1 < len(locs) {
			partEnd = locs[i+1][0]
		}
		part := body[l[1]:partEnd]
		closed := false
		if e := f.callClose.FindStringIndex(part); e != nil {
			part, closed = part[:e[0]], true
		}
		last := i == len(locs)-1
		sl := f.sep.FindStringIndex(part)
		if sl == nil {
			if last && !closed {
				return calls, true, p.isKnown(strings.TrimSpace(part)) || strings.TrimSpace(part) == ""
			}
			return nil, false, false
		}
		name, args := f.call(part[:sl[0]], part[sl[1]:])
		if !p.isKnown(name) {
			return nil, false, false
		}
		if args == "" {
			if last && !closed {
				return calls, true, true
			}
			args = "{}"
		}
		if !json.Valid([]byte(args)) {
			if last && !closed {
				return calls, true, true
			}
			return nil, false, false
		}
		a := argsText(json.RawMessage(args), true)
		calls = append(calls, Call{Name: name, Arguments: a})
	}
	return calls, false, true
}

// gpt-oss (harmony): the reasoning is the analysis channel, the answer the
// final channel, and a call a commentary message addressed to a function:
//
//	<|channel|>analysis<|message|>...<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
//
// The recipient may also come before the channel.
var (
	harmonyCall = regexp.MustCompile(`(?:<\|start\|>\s*assistant\s*)?(?:<\|channel\|>\s*commentary\s*)?to=functions\.([^\s<]+)\s*(?:<\|channel\|>\s*commentary\s*)?(?:<\|constrain\|>\s*)?(?:json\s*)?<\|message\|>`)
	harmonyEnd  = regexp.MustCompile(`^\s*(?:<\|call\|>|<\|end\|>)`)
	// analysis and final channel headers, and the tokens that end a message.
	harmonyAnalysis = regexp.MustCompile(`(?s)(?:<\|start\|>\s*assistant\s*)?<\|channel\|>\s*analysis\s*<\|message\|>(.*?)(?:<\|end\|>|$)`)
	harmonyFinal    = regexp.MustCompile(`(?:<\|start\|>\s*assistant\s*)?<\|channel\|>\s*final\s*<\|message\|>|<\|return\|>|<\|end\|>`)
)

// harmonySplit moves the analysis channel to the reasoning and removes the
// final channel's framing, so that only calls and the answer remain.
func harmonySplit(s string) (visible, thinking string) {
	if !strings.Contains(s, "<|channel|>") && !strings.Contains(s, "<|message|>") {
		return s, ""
	}
	var think []string
	for _, m := range harmonyAnalysis.FindAllStringSubmatch(s, -1) {
		think = append(think, strings.TrimSpace(m[1]))
	}
	s = harmonyAnalysis.ReplaceAllString(s, "")
	return harmonyFinal.ReplaceAllString(s, "\n"), strings.Join(nonEmpty(think), "\n\n")
}

func (p *Parser) harmony(s string, res *Result, taken []span) []span {
	var out []span
	for _, m := range harmonyCall.FindAllStringSubmatchIndex(s, -1) {
		if overlaps(taken, m[0], m[1]) || overlaps(out, m[0], m[1]) {
			continue
		}
		name := s[m[2]:m[3]]
		raw, end, cut, ok := jsonAt(s, m[1])
		switch {
		case mentioned(s, m[0]) || !p.isKnown(name):
			if !ok {
				end = m[1]
			}
			out = append(out, span{start: m[0], end: end})
			continue
		case cut:
			res.Incomplete, res.Fragment = true, s[m[0]:]
			return append(out, span{start: m[0], end: len(s), cut: true})
		case !ok:
			out = append(out, span{start: m[0], end: m[1]})
			continue
		}
		if e := harmonyEnd.FindStringIndex(s[end:]); e != nil {
			end += e[1]
		}
		out = append(out, span{start: m[0], end: end, calls: []Call{{Name: name, Arguments: argsText(raw, true)}}})
	}
	return out
}

// Functionary v3.2: each message starts with ">>>" and a recipient: "all"
// for text, a function name for a call whose arguments follow as JSON:
//
//	>>>all\nLet me look.>>>read_file\n{"path": "a.go"}
//
// The template opens the first ">>>", so a reply may start with the
// recipient alone. An untagged format: its calls must also pass the
// argument check.
var (
	functionaryHead  = regexp.MustCompile(`>>>\s*([A-Za-z0-9_.\-]+)[ \t]*\n`)
	functionaryStart = regexp.MustCompile(`^([A-Za-z0-9_.\-]+)[ \t]*\n\s*\{`)
)

func (p *Parser) functionary(s string, res *Result, taken []span) []span {
	var out []span
	heads := functionaryHead.FindAllStringSubmatchIndex(s, -1)
	if m := functionaryStart.FindStringSubmatchIndex(s); m != nil {
		heads = append([][]int{{0, m[3] + 1, m[2], m[3]}}, heads...)
	}
	if strings.Contains(s, ">>>") && strings.HasPrefix(s, "all\n") {
		out = append(out, span{start: 0, end: len("all\n"), drop: true})
	}
	for _, m := range heads {
		if overlaps(taken, m[0], m[1]) || overlaps(out, m[0], m[1]) || mentioned(s, m[0]) {
			continue
		}
		name := s[m[2]:m[3]]
		if name == "all" {
			out = append(out, span{start: m[0], end: m[1], drop: true})
			continue
		}
		if !p.isKnown(name) {
			continue
		}
		raw, end, cut, ok := jsonAt(s, m[1])
		if cut {
			res.Incomplete, res.Fragment = true, s[m[0]:]
			return append(out, span{start: m[0], end: len(s), cut: true})
		}
		if !ok {
			continue
		}
		a := argsText(raw, true)
		if !p.checked(name, a) {
			out = append(out, span{start: m[0], end: end})
			continue
		}
		out = append(out, span{start: m[0], end: end, calls: []Call{{Name: name, Arguments: a}}})
	}
	return out
}

// GLM 4.5 to 4.7 put the name and key/value pairs inside <tool_call>:
//
//	<tool_call>NAME
//	<arg_key>path</arg_key>
//	<arg_value>a.go</arg_value>
//	</tool_call>
var (
	glmHead = regexp.MustCompile(`^([A-Za-z0-9_.\-]+)\s*(?:<arg_key>|$)`)
	glmArg  = regexp.MustCompile(`(?s)<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>`)
)

func (p *Parser) glmCall(body string) ([]Call, bool) {
	m := glmHead.FindStringSubmatch(body)
	if m == nil || !p.isKnown(m[1]) {
		return nil, false
	}
	rest := strings.TrimSpace(body[len(m[1]):])
	obj := map[string]any{}
	for _, a := range glmArg.FindAllStringSubmatch(rest, -1) {
		obj[strings.TrimSpace(a[1])] = paramValue(a[2])
	}
	if strings.TrimSpace(glmArg.ReplaceAllString(rest, "")) != "" {
		return nil, false // an unclosed or stray element
	}
	out, ok := compactJSON(obj)
	if !ok {
		return nil, false
	}
	return []Call{{Name: m[1], Arguments: out}}, true
}

// MiniMax M2:
//
//	<minimax:tool_call>
//	<invoke name="NAME">
//	<parameter name="path">a.go</parameter>
//	</invoke>
//	</minimax:tool_call>
var (
	minimaxInvoke = regexp.MustCompile(`(?s)<invoke\s+name="([^"]+)"\s*>(.*?)</invoke>`)
	minimaxParam  = regexp.MustCompile(`(?s)<parameter\s+name="([^"]+)"\s*>(.*?)</parameter>`)
)

func (p *Parser) minimaxCalls(body string) ([]Call, bool) {
	var calls []Call
	for _, m := range minimaxInvoke.FindAllStringSubmatch(body, -1) {
		if !p.isKnown(m[1]) {
			return nil, false
		}
		obj := map[string]any{}
		for _, a := range minimaxParam.FindAllStringSubmatch(m[2], -1) {
			obj[a[1]] = paramValue(a[2])
		}
		if strings.TrimSpace(minimaxParam.ReplaceAllString(m[2], "")) != "" {
			return nil, false
		}
		out, ok := compactJSON(obj)
		if !ok {
			return nil, false
		}
		calls = append(calls, Call{Name: m[1], Arguments: out})
	}
	if strings.TrimSpace(minimaxInvoke.ReplaceAllString(body, "")) != "" {
		return nil, false
	}
	return calls, len(calls) > 0
}

// paramValue reads a parameter written as text. A value that reads as a
// JSON object, array, number or boolean is taken as that, since the schema
// is not known here and "timeout: 30" or "replace_all: true" are far more
// common than a string argument that happens to look like a number.
func paramValue(v string) any {
	v = strings.TrimSuffix(strings.TrimPrefix(v, "\n"), "\n")
	var js any
	if t := strings.TrimSpace(v); t != "" && t[0] != '"' && json.Unmarshal([]byte(t), &js) == nil && js != nil {
		return js
	}
	return v
}

// checked runs the argument check on a call in an untagged format.
func (p *Parser) checked(name, args string) bool {
	return p.check == nil || p.check(name, args)
}

// compactJSON is v as compact JSON text.
func compactJSON(v any) (string, bool) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return "", false
	}
	return strings.TrimSpace(b.String()), true
}
