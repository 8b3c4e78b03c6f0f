package llm

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// textBuf accumulates streamed bytes and hands out only complete UTF-8 text,
// so a character split across two chunks is shown once it is whole.
type textBuf struct {
	b       []byte
	emitted int
}

// add appends p and returns the newly complete text, with bytes that can
// never become a character shown as U+FFFD (as the final text has them).
func (t *textBuf) add(p []byte) string {
	t.b = append(t.b, p...)
	end := t.emitted + completePrefix(t.b[t.emitted:])
	s := strings.ToValidUTF8(string(t.b[t.emitted:end]), "\uFFFD")
	t.emitted = end
	return s
}

// flush returns whatever add held back.
func (t *textBuf) flush() string {
	s := strings.ToValidUTF8(string(t.b[t.emitted:]), "\uFFFD")
	t.emitted = len(t.b)
	return s
}

func (t *textBuf) String() string { return strings.ToValidUTF8(string(t.b), "\uFFFD") }

type callPart struct {
	index int
	id    string
	name  string
	args  textBuf
}

// assembler builds a Response from streamed chunks. It is fed one SSE data
// payload at a time and is not safe for concurrent use.
type assembler struct {
	content   textBuf
	reasoning textBuf
	calls     []*callPart
	byIndex   map[int]*callPart
	lastCall  *callPart
	finish    string
	usage     Usage
	timings   *Timings
	model     string
	chunks    int // chunks parsed
	size      int // payload bytes received
	max       int // cap on size; 0 means none
	emit      func(Delta)
	output    bool // a non-empty delta was produced
}

func newAssembler(max int, onDelta func(Delta)) *assembler {
	if onDelta == nil {
		onDelta = func(Delta) {}
	}
	return &assembler{byIndex: map[int]*callPart{}, max: max, emit: onDelta}
}

// add parses one data payload. A payload carrying {"error":...} is returned
// as a KindServer error.
func (a *assembler) add(data []byte) error {
	a.size += len(data)
	if a.max > 0 && a.size > a.max {
		return &Error{Kind: KindProtocol, Partial: a.output,
			Message: fmt.Sprintf("reply exceeds %d bytes; the model is probably looping (raise the limit or lower max_tokens)", a.max)}
	}
	var c wireChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return &Error{Kind: KindProtocol, Partial: a.output,
			Message: fmt.Sprintf("cannot parse chunk %q", truncate(string(data), 200)), Err: err}
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		msg, typ := errorValue(c.Error)
		return &Error{Kind: classifyStatus(0, typ, msg, false), Message: msg, Type: typ, Partial: a.output}
	}
	a.chunks++
	if c.Model != "" {
		a.model = c.Model
	}
	if c.Usage != nil && *c.Usage != (Usage{}) {
		a.usage = *c.Usage
	}
	if c.Timings != nil && *c.Timings != (Timings{}) {
		t := *c.Timings
		a.timings = &t
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // n > 1 is never requested
		}
		a.addDelta(&ch.Delta)
		a.addDelta(&ch.Message) // non-streamed replies, and servers that mix shapes
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finish = *ch.FinishReason
		}
	}
	return nil
}

func (a *assembler) addDelta(d *wireDelta) {
	if len(d.Content) > 0 {
		a.text(DeltaText, &a.content, d.Content)
	}
	if len(d.ReasoningContent) > 0 {
		a.text(DeltaReasoning, &a.reasoning, d.ReasoningContent)
	} else if len(d.Reasoning) > 0 {
		a.text(DeltaReasoning, &a.reasoning, d.Reasoning)
	}
	for i := range d.ToolCalls {
		a.toolCall(&d.ToolCalls[i])
	}
}

func (a *assembler) text(kind DeltaKind, buf *textBuf, p []byte) {
	if s := buf.add(p); s != "" {
		a.output = true
		a.emit(Delta{Kind: kind, Text: s})
	}
}

func (a *assembler) toolCall(tc *wireToolCallDelta) {
	var p *callPart
	switch {
	case tc.Index != nil:
		p = a.byIndex[*tc.Index]
		if p == nil {
			p = a.newCall(*tc.Index)
		}
	case tc.ID != "" && (a.lastCall == nil || (a.lastCall.id != "" && a.lastCall.id != tc.ID)):
		// No index (some servers omit it): a new id starts a new call.
		next := 0
		for _, c := range a.calls {
			next = max(next, c.index+1)
		}
		p = a.newCall(next)
	case a.lastCall != nil:
		p = a.lastCall
	default:
		p = a.newCall(0)
	}
	a.lastCall = p
	if tc.ID != "" && p.id == "" {
		p.id = tc.ID
	}
	newName := false
	if len(tc.Function.Name) > 0 && p.name == "" {
		// The name arrives once; servers that repeat it are ignored.
		p.name = string(tc.Function.Name)
		newName = true
	}
	s := p.args.add(tc.Function.Arguments)
	if newName || s != "" {
		a.output = true
		a.emit(Delta{Kind: DeltaToolCall, ToolIndex: p.index, ToolName: p.name, Text: s})
	}
}

func (a *assembler) newCall(index int) *callPart {
	p := &callPart{index: index}
	a.byIndex[index] = p
	a.calls = append(a.calls, p)
	return p
}

// response flushes held-back bytes and returns what was assembled so far.
func (a *assembler) response() Response {
	if s := a.content.flush(); s != "" {
		a.output = true
		a.emit(Delta{Kind: DeltaText, Text: s})
	}
	if s := a.reasoning.flush(); s != "" {
		a.output = true
		a.emit(Delta{Kind: DeltaReasoning, Text: s})
	}
	msg := Message{Role: RoleAssistant, Content: a.content.String(), Reasoning: a.reasoning.String()}
	calls := append([]*callPart(nil), a.calls...)
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].index < calls[j].index })
	for _, c := range calls {
		if s := c.args.flush(); s != "" {
			a.output = true
			a.emit(Delta{Kind: DeltaToolCall, ToolIndex: c.index, ToolName: c.name, Text: s})
		}
		if c.id == "" {
			c.id = newCallID()
		}
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{
			ID: c.id, Type: "function",
			Function: FunctionCall{Name: c.name, Arguments: c.args.String()},
		})
	}
	finish := a.finish
	if finish == "" && len(msg.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	return Response{Message: msg, FinishReason: finish, Usage: a.usage, Timings: a.timings, Model: a.model}
}

// newCallID makes an id for a call the server sent without one; the id only
// has to pair the call with its result inside one conversation.
func newCallID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}
