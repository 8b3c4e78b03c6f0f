package toolparse

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Call is one tool call found in text.
type Call struct {
	Name string
	// Arguments is the JSON text of the arguments: an object when the model
	// wrote one, "{}" when it gave none, or the model's string verbatim when
	// that string is not JSON (the caller's validation then reports it).
	Arguments string
}

// Result is what Parse found.
type Result struct {
	// Calls in the order they appear.
	Calls []Call
	// Text is the visible reply: without reasoning and without the calls.
	Text string
	// Thinking is the text of the <think> blocks that were removed.
	Thinking string
	// Incomplete is set when a call was opened but the reply ended before
	// it was complete (an unclosed <tool_call>, JSON cut off): the caller
	// should ask the model to continue. Fragment holds that unfinished part.
	Incomplete bool
	Fragment   string
}

// Parser finds calls to a known set of tools.
type Parser struct {
	known map[string]bool
	check func(name, args string) bool
}

// New returns a Parser that accepts calls to the named tools only. With no
// names it accepts any name (only useful in tests and tools listings).
func New(tools ...string) *Parser {
	p := &Parser{known: map[string]bool{}}
	for _, t := range tools {
		p.known[t] = true
	}
	return p
}

// WithCheck sets a check of a call's arguments (against the tool's schema)
// and returns p. Calls in formats without markers of their own (pythonic
// lists, Functionary's recipients) count only when it passes: written in
// prose, they are otherwise too easily an example. Calls in a tagged format
// are returned either way, so the caller can tell the model what was wrong.
func (p *Parser) WithCheck(check func(name, args string) bool) *Parser {
	p.check = check
	return p
}

func (p *Parser) isKnown(name string) bool {
	if name == "" {
		return false
	}
	return len(p.known) == 0 || p.known[name]
}

// span is a region of the text: a found call (calls set), or one that must
// not be searched again (a code block without calls).
type span struct {
	start, end int
	calls      []Call
	cut        bool // the unfinished call that made the Result Incomplete
	drop       bool // format markup without a call: removed from the text
}

// tag is a pair of delimiters some model family writes around calls.
type tag struct {
	open, close string
	// toEnd: there is no close tag (Mistral's [TOOL_CALLS]): the block
	// runs to the end of the reply.
	toEnd bool
}

var tags = []tag{
	{open: "<tool_call>", close: "</tool_call>"},
	{open: "<tool_calls>", close: "</tool_calls>"},
	{open: "<|tool_call|>", close: "<|/tool_call|>"},
	{open: "<|tool_call_start|>", close: "<|tool_call_end|>"},
	{open: "[TOOL_CALL]", close: "[/TOOL_CALL]"},
	{open: "[TOOL_CALLS]", toEnd: true},
	{open: "<function_call>", close: "</function_call>"},
	{open: "<minimax:tool_call>", close: "</minimax:tool_call>"},
	{open: "<seed:tool_call>", close: "</seed:tool_call>"},
	{open: "<|START_ACTION|>", close: "<|END_ACTION|>"},
	{open: "<TOOLCALL>", close: "</TOOLCALL>"},
}

var (
	// <function=NAME>{...}</function> (Llama 3.1 style).
	functionEq = regexp.MustCompile(`(?s)<function=([A-Za-z0-9_.\-]+)>(.*?)(</function>|$)`)
)

// Parse finds the calls in a reply.
func (p *Parser) Parse(text string) Result {
	visible, thinking := StripThink(text)
	visible, harmonyThinking := harmonySplit(visible)
	if harmonyThinking != "" {
		thinking = strings.Join(nonEmpty([]string{thinking, harmonyThinking}), "\n\n")
	}
	res := Result{Thinking: thinking}
	spans := p.dialects(visible, &res)

	for _, t := range tags {
		for _, sp := range p.tagged(visible, t, spans, &res) {
			if !overlaps(spans, sp.start, sp.end) {
				spans = append(spans, sp)
			}
		}
	}
	var fnMatches [][]int
	if strings.Contains(visible, "<function=") { // skip the regexp in the common case
		fnMatches = functionEq.FindAllStringSubmatchIndex(visible, -1)
	}
	for _, m := range fnMatches {
		if overlaps(spans, m[0], m[1]) {
			continue
		}
		name := visible[m[2]:m[3]]
		if !p.isKnown(name) {
			continue
		}
		args, whole := functionArgs(visible[m[4]:m[5]])
		if m[6] == m[7] && !whole { // no </function> and the body is cut off
			res.Incomplete, res.Fragment = true, visible[m[0]:]
			spans = append(spans, span{start: m[0], end: m[1], cut: true})
			continue
		}
		spans = append(spans, span{start: m[0], end: m[1], calls: []Call{{Name: name, Arguments: args}}})
	}
	for _, f := range fences(visible) {
		if overlaps(spans, f.start, f.end) {
			continue
		}
		calls, _ := p.callsIn([]byte(strings.TrimSpace(visible[f.bodyStart:f.bodyEnd])), false)
		// A code block is never searched again for bare JSON: the JSON in
		// a block that is not a call is an example or file content.
		spans = append(spans, span{start: f.start, end: f.end, calls: calls})
	}
	spans = append(spans, p.pythonic(visible, spans, &res)...)
	spans = append(spans, p.bare(visible, spans, &res)...)

	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var out strings.Builder
	last := 0
	for _, s := range spans {
		if len(s.calls) == 0 && !s.cut && !s.drop {
			continue // protected block without calls: keep it visible
		}
		if s.start < last {
			continue // overlaps one already taken (the earlier one wins)
		}
		out.WriteString(visible[last:s.start])
		last = s.end
		res.Calls = append(res.Calls, s.calls...)
	}
	out.WriteString(visible[last:])
	res.Text = tidy(out.String())
	return res
}

// tagged finds the blocks delimited by t.
func (p *Parser) tagged(s string, t tag, taken []span, res *Result) []span {
	var out []span
	from := 0
	for {
		i := strings.Index(s[from:], t.open)
		if i < 0 {
			return out
		}
		start := from + i
		bodyStart := start + len(t.open)
		if overlaps(taken, start, bodyStart) {
			from = bodyStart // read by a format of its own
			continue
		}
		if mentioned(s, start) {
			from = mentionEnd(s, start)
			out = append(out, span{start: start, end: from})
			continue
		}
		end, bodyEnd := len(s), len(s)
		closed := false
		if !t.toEnd {
			if j := strings.Index(s[bodyStart:], t.close); j >= 0 {
				bodyEnd, end, closed = bodyStart+j, bodyStart+j+len(t.close), true
			} else if k := strings.Index(s[bodyStart:], t.open); k >= 0 {
				// Several calls, each opened but none closed.
				bodyEnd, end = bodyStart+k, bodyStart+k
			}
		}
		body := []byte(strings.TrimSpace(s[bodyStart:bodyEnd]))
		body = bytes.TrimSpace(stripFence(body))
		calls, ok := p.callsIn(body, true)
		switch {
		case ok:
		case bytes.HasPrefix(body, []byte("<function=")):
			calls, ok = p.functionCalls(string(body))
		case bytes.HasPrefix(body, []byte("[")):
			calls, ok = p.pythonicList(string(body), false)
		case !closed:
			// Elements can follow one another until the close tag: without
			// it, the call may not be whole.
		case bytes.HasPrefix(body, []byte("<invoke")):
			calls, ok = p.minimaxCalls(string(body))
		case t.open == "<tool_call>":
			calls, ok = p.glmCall(string(body))
		}
		switch {
		case ok:
			// Closed, or whole without its closing tag (a stop sequence
			// ate it): a call either way.
			out = append(out, span{start: start, end: end, calls: calls})
		case !closed && end == len(s) && !json.Valid(body):
			// Opened and never closed, and what follows is not whole.
			res.Incomplete, res.Fragment = true, s[start:]
			out = append(out, span{start: start, end: end, cut: true})
		default:
			// Closed but not a call we know: leave it as text.
		}
		from = end
		if from >= len(s) {
			return out
		}
	}
}

type fenceLoc struct{ start, end, bodyStart, bodyEnd int }

// fences finds closed ``` code blocks (the info string after the opening
// fence, e.g. "json", is ignored). Written out rather than as a regexp:
// this runs on every reply and the regexp engine was most of the cost.
func fences(s string) []fenceLoc {
	var out []fenceLoc
	from := 0
	for {
		i := strings.Index(s[from:], "```")
		if i < 0 {
			return out
		}
		start := from + i
		nl := strings.IndexByte(s[start+3:], '\n')
		if nl < 0 {
			return out
		}
		bodyStart := start + 3 + nl + 1
		j := strings.Index(s[bodyStart:], "```")
		if j < 0 {
			return out
		}
		bodyEnd := bodyStart + j
		out = append(out, fenceLoc{start: start, end: bodyEnd + 3, bodyStart: bodyStart, bodyEnd: bodyEnd})
		from = bodyEnd + 3
	}
}

// paramTag is one Qwen3-Coder style parameter: <parameter=KEY>VALUE</parameter>.
var paramTag = regexp.MustCompile(`(?s)<parameter=([A-Za-z0-9_.\-]+)>(.*?)</parameter>`)

// functionArgs turns the body of a <function=NAME> block into JSON
// arguments. The body is JSON (Llama 3.1) or a list of <parameter=KEY>
// elements (Qwen3-Coder). whole reports whether the body is complete.
//
// Parameter values are read by paramValue.
func functionArgs(body string) (args string, whole bool) {
	b := strings.TrimSpace(body)
	if b == "" {
		return "{}", true
	}
	if !strings.HasPrefix(b, "<parameter=") {
		return argsText(json.RawMessage(b), true), json.Valid([]byte(b))
	}
	obj := map[string]any{}
	rest := b
	for _, m := range paramTag.FindAllStringSubmatch(b, -1) {
		obj[m[1]] = paramValue(m[2])
		rest = strings.Replace(rest, m[0], "", 1)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return "{}", false
	}
	// Anything left but whitespace is an unclosed parameter.
	return string(out), strings.TrimSpace(rest) == ""
}

// functionCalls reads one or more <function=NAME>...</function> blocks (the
// body of a <tool_call> written by Qwen3-Coder). Every block must name a
// known tool and be complete.
func (p *Parser) functionCalls(body string) ([]Call, bool) {
	var calls []Call
	for _, m := range functionEq.FindAllStringSubmatch(body, -1) {
		if !p.isKnown(m[1]) || m[3] == "" {
			return nil, false
		}
		args, whole := functionArgs(m[2])
		if !whole {
			return nil, false
		}
		calls = append(calls, Call{Name: m[1], Arguments: args})
	}
	return calls, len(calls) > 0
}

// stripFence removes a code fence around a tagged body (```json ... ```).
func stripFence(b []byte) []byte {
	if !bytes.HasPrefix(b, []byte("```")) {
		return b
	}
	if nl := bytes.IndexByte(b, '\n'); nl >= 0 {
		b = b[nl+1:]
	}
	return bytes.TrimSuffix(bytes.TrimSpace(b), []byte("```"))
}

// bare finds call-shaped JSON objects in running text, outside the spans
// already found.
func (p *Parser) bare(s string, spans []span, res *Result) []span {
	var out []span
	attempts := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '{' || overlaps(spans, i, i+1) || overlaps(out, i, i+1) {
			continue
		}
		// Only what can open a JSON object: '{' then '"' (code braces
		// such as "func main() {" are not tried).
		j := i + 1
		for j < len(s) && (s[j] == ' ' || s[j] == '\n' || s[j] == '\r' || s[j] == '\t') {
			j++
		}
		if j < len(s) && s[j] != '"' {
			continue
		}
		if attempts++; attempts > 500 {
			return out // pathological input: stop rather than go quadratic
		}
		dec := json.NewDecoder(strings.NewReader(s[i:]))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || j >= len(s) {
				if p.looksLikeCallStart(s[i:]) && !overlaps(spans, i, len(s)) {
					res.Incomplete, res.Fragment = true, s[i:]
					out = append(out, span{start: i, end: len(s), cut: true})
					return out
				}
			}
			continue
		}
		end := i + int(dec.InputOffset())
		if calls, ok := p.callsIn(raw, false); ok && !overlaps(spans, i, end) {
			out = append(out, span{start: i, end: end, calls: calls})
		}
		i = end - 1 // an object that is not a call is skipped whole
	}
	return out
}

var callStart = regexp.MustCompile(`^\{\s*"(?:name|tool|tool_name|function)"\s*:\s*(?:\{\s*"name"\s*:\s*)?"([^"]+)"`)

// looksLikeCallStart reports whether cut-off JSON began as a call to a
// known tool.
func (p *Parser) looksLikeCallStart(s string) bool {
	m := callStart.FindStringSubmatch(s)
	return m != nil && p.isKnown(m[1])
}

// callsIn reads one call, an array of calls, or {"tool_calls":[...]}.
// tagged relaxes the rules: inside call tags a missing arguments field means
// no arguments.
func (p *Parser) callsIn(body []byte, tagged bool) ([]Call, bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, false
	}
	switch body[0] {
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(body, &items) != nil || len(items) == 0 {
			return nil, false
		}
		var calls []Call
		for _, it := range items {
			c, ok := p.call(it, tagged)
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		}
		return calls, true
	case '{':
		var wrap struct {
			ToolCalls []json.RawMessage `json:"tool_calls"`
		}
		if json.Unmarshal(body, &wrap) == nil && len(wrap.ToolCalls) > 0 {
			arr, _ := json.Marshal(wrap.ToolCalls)
			return p.callsIn(arr, tagged)
		}
		if c, ok := p.call(body, tagged); ok {
			return []Call{c}, true
		}
		if tagged {
			// Some models put several objects one after another.
			return p.sequence(body)
		}
	}
	return nil, false
}

// sequence reads objects written back to back ({..}\n{..}).
func (p *Parser) sequence(body []byte) ([]Call, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var calls []Call
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false
		}
		c, ok := p.call(raw, true)
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
	}
	return calls, len(calls) > 0
}

// call reads one call object in any of the shapes models use:
//
//	{"name": N, "arguments": {..} | "json"}
//	{"name": N, "parameters" | "args" | "input": {..}}
//	{"tool" | "tool_name": N, "parameters" | "args" | "arguments": {..}}
//	{"type": "function", "function": {"name": N, "arguments": ..}}
//	{"function": N, "arguments": {..}}
func (p *Parser) call(raw json.RawMessage, tagged bool) (Call, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return Call{}, false
	}
	if fn, ok := obj["function"]; ok && len(fn) > 0 && fn[0] == '{' {
		inner, ok := p.call(fn, tagged)
		if ok && inner.Arguments == "{}" {
			// {"function": {"name": N}, "arguments": {..}}
			if a, has := firstOf(obj, "arguments", "parameters", "args", "input"); has {
				inner.Arguments = argsText(a, tagged)
			}
		}
		return inner, ok
	}
	var name string
	for _, k := range []string{"name", "tool", "tool_name", "function"} {
		if v, ok := obj[k]; ok {
			if json.Unmarshal(v, &name) == nil && name != "" {
				break
			}
		}
	}
	if !p.isKnown(name) {
		return Call{}, false
	}
	args, has := firstOf(obj, "arguments", "parameters", "args", "input", "tool_input")
	if !has {
		if !tagged {
			return Call{}, false // {"name": "bash"} alone in prose is not a call
		}
		return Call{Name: name, Arguments: "{}"}, true
	}
	a := argsText(args, tagged)
	if a == "" {
		return Call{}, false
	}
	return Call{Name: name, Arguments: a}, true
}

func firstOf(obj map[string]json.RawMessage, keys ...string) (json.RawMessage, bool) {
	for _, k := range keys {
		if v, ok := obj[k]; ok {
			return v, true
		}
	}
	return nil, false
}

// argsText renders arguments as JSON text: objects compacted, strings that
// hold JSON unwrapped, null as {}. Anything else is "" (not a call) unless
// the call was tagged, where the model's text is passed on for the
// validator to reject with a message the model can act on.
func argsText(v json.RawMessage, tagged bool) string {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0 || string(v) == "null":
		return "{}"
	case v[0] == '{':
		var b bytes.Buffer
		if json.Compact(&b, v) != nil {
			return string(v)
		}
		return b.String()
	case v[0] == '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return ""
		}
		s = strings.TrimSpace(s)
		if s == "" {
			return "{}"
		}
		if strings.HasPrefix(s, "{") && json.Valid([]byte(s)) {
			return argsText(json.RawMessage(s), tagged)
		}
		if tagged {
			return s
		}
		return ""
	}
	if tagged {
		return string(v)
	}
	return ""
}

func overlaps(spans []span, start, end int) bool {
	for _, s := range spans {
		if start < s.end && s.start < end {
			return true
		}
	}
	return false
}

var blankLines = regexp.MustCompile(`\n{3,}`)

// tidy trims the visible text left after calls were cut out.
func tidy(s string) string {
	return strings.TrimSpace(blankLines.ReplaceAllString(s, "\n\n"))
}
