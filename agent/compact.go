package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
)

// Context thresholds, as fractions (percent) of the per-slot window.
// At checkpointPct an LLM-written summary replaces older turns (the model
// keeps the gist); at hardPct old tool outputs are cut and old turns
// dropped without asking the model (it may be too full to summarise).
const (
	checkpointPct = 65
	hardPct       = 80
	// hardTargetPct is what hard compaction aims for, so the next few
	// turns fit without compacting again at once.
	hardTargetPct = 50
	// tailPct of the window is kept verbatim after a checkpoint.
	tailPct = 25
	// charsPerToken estimates tokens when the server reports no usage.
	charsPerToken = 4
	// msgOverhead approximates the template tokens around each message.
	msgOverhead = 4
	// oldToolOutput is what hard compaction keeps of an old tool output.
	oldToolOutput = 1 << 10
	// checkpointName marks a checkpoint summary in the transcript; the
	// number after it is how many messages before it were kept verbatim.
	checkpointName = "checkpoint"
)

// compactAction is what the context needs before the next request.
type compactAction int

const (
	compactNone compactAction = iota
	compactCheckpoint
	compactHard
)

func (c compactAction) String() string {
	return [...]string{"none", "checkpoint", "hard"}[c]
}

// compactionFor decides from the estimated prompt size and the window.
func compactionFor(used, window int) compactAction {
	switch {
	case window <= 0:
		return compactNone
	case used*100 >= window*hardPct:
		return compactHard
	case used*100 >= window*checkpointPct:
		return compactCheckpoint
	}
	return compactNone
}

// tokenCounter estimates the context's size. Reported usage anchors it:
// prompt+completion tokens of the last reply cover history[:n]; only the
// messages after that are estimated from their length.
//
// The estimate itself is calibrated: scale is the server's count over our
// estimate of the same prompt, learnt from each reported usage (4 bytes a
// token is far off for code and for some tokenizers: a third low is
// common), so a threshold fires where the server's count crosses it.
type tokenCounter struct {
	n      int
	tokens int
	scale  float64 // 0 until a server reported a count
}

// anchor records that the server counted tokens for history[:n], which we
// had estimated at est.
func (t *tokenCounter) anchor(n, tokens, est int) {
	t.n, t.tokens = n, tokens
	if tokens > 0 && est > 0 {
		t.scale = min(4, max(0.5, float64(tokens)/float64(est)))
	}
}

// reset forgets the anchor (the history changed under it); the scale stays.
func (t *tokenCounter) reset() { t.n, t.tokens = 0, 0 }

// scaled turns an estimate into the server's tokens.
func (t *tokenCounter) scaled(est int) int {
	if t.scale == 0 {
		return est
	}
	return int(math.Ceil(float64(est) * t.scale))
}

// unscaled turns the server's tokens into estimate units.
func (t *tokenCounter) unscaled(tokens int) int {
	if t.scale == 0 {
		return tokens
	}
	return int(float64(tokens) / t.scale)
}

func (t *tokenCounter) estimate(history []llm.Message, extra int) int {
	if t.n > 0 && t.n <= len(history) {
		return t.tokens + t.scaled(estimateMessages(history[t.n:]))
	}
	return t.scaled(estimateMessages(history) + extra)
}

func estimateMessage(m llm.Message) int {
	n := len(m.Content) + len(m.Name)
	for _, c := range m.ToolCalls {
		n += len(c.Function.Name) + len(c.Function.Arguments) + 16
	}
	return n/charsPerToken + msgOverhead
}

func estimateMessages(ms []llm.Message) int {
	n := 0
	for i := range ms {
		n += estimateMessage(ms[i])
	}
	return n
}

func estimateTools(defs map[string]llm.Tool, names []string) int {
	n := 0
	for _, name := range names {
		w := defs[name]
		n += len(w.Function.Name) + len(w.Function.Description) + len(w.Function.Parameters) + 32
	}
	return n / charsPerToken
}

// minReply is the least room a request leaves for the reply.
func (a *Agent) minReply() int {
	return min(a.opts.MaxReplyTokens, max(64, a.opts.ContextTokens/8))
}

// fit compacts the context as its size demands and refuses to send a
// request that cannot fit.
func (a *Agent) fit(ctx context.Context, res *Result) error {
	window := a.opts.ContextTokens
	if a.tokens.n == 0 {
		a.exactCount(ctx)
	}
	used := a.tokens.estimate(a.history, a.extraTokens())
	switch compactionFor(used, window) {
	case compactCheckpoint:
		if err := a.checkpoint(ctx, res); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, errNothingToSummarise) {
				a.emit(event.Event{Kind: event.Notice, Text: "checkpoint summary failed (" + err.Error() + "); compacting instead"})
			}
			a.hardCompact(window*hardTargetPct/100, false)
		}
	case compactHard:
		a.hardCompact(window*hardTargetPct/100, false)
	}
	used = a.tokens.estimate(a.history, a.extraTokens())
	if used+a.minReply() > window {
		a.hardCompact(window-a.minReply(), true)
		used = a.tokens.estimate(a.history, a.extraTokens())
		if used+a.minReply() > window {
			return fmt.Errorf("%w: about %d tokens are needed but the window is %d. "+
				"Start the model server with a larger per-slot context (agent llm up --ctx, fewer --parallel slots) "+
				"or shorten the project instructions", ErrContextFull, used+a.minReply(), window)
		}
	}
	return nil
}

// head returns the index of the first message after the system prompt and
// the first user message: everything before it is always kept.
func (a *Agent) head() int {
	for i := 1; i < len(a.history); i++ {
		if a.history[i].Role == llm.RoleUser {
			return i + 1
		}
	}
	return len(a.history)
}

// turnStart reports whether a cut before history[i] keeps tool calls and
// their results together: never start a kept tail with a tool message.
func turnStart(h []llm.Message, i int) bool {
	return i >= len(h) || h[i].Role != llm.RoleTool
}

// tailStart is the first index of the recent turns to keep verbatim: as
// many whole turns from the end as fit in budget tokens, at least the last
// one.
func tailStart(h []llm.Message, from, budget int) int {
	start := len(h)
	used := 0
	for i := len(h) - 1; i >= from; i-- {
		used += estimateMessage(h[i])
		if !turnStart(h, i) {
			continue
		}
		if used > budget && start < len(h) {
			break
		}
		start = i
	}
	return start
}

// hardCompact shrinks the context towards target tokens without the model,
// in steps from the least to the most lossy: outputs and call arguments of
// older turns are cut to a head and tail, then the oldest turns after the
// first user message are dropped (whole turns, so calls keep their results)
// with a note saying so. The newest turn holds results the model has not
// seen yet: only when mustFit (the request could not be sent otherwise) are
// they, and the first user message, cut too.
func (a *Agent) hardCompact(target int, mustFit bool) {
	h := a.history
	from := a.head()
	a.tokens.reset()
	// Sizes here are in estimate units, the target too.
	target = a.tokens.unscaled(target)
	size := func() int { return estimateMessages(h) + a.extraTokens() }
	before := size()
	defer func() {
		a.history = h
		a.noteCompaction("hard", a.tokens.scaled(before), a.tokens.scaled(size()))
	}()
	last := tailStart(h, from, 0)
	keep := tailStart(h, from, a.opts.ContextTokens*tailPct/100)
	// 1. Older outputs, then everything the model has already seen.
	cutOutputs(h, from, keep, oldToolOutput)
	if size() <= target {
		return
	}
	cutOutputs(h, from, last, oldToolOutput)
	if size() <= target {
		return
	}
	// 2. Drop the oldest whole turns before the newest one.
	drop := from
	over := size() - target
	for drop < last && over > 0 {
		over -= estimateMessage(h[drop])
		drop++
		for drop < last && !turnStart(h, drop) {
			over -= estimateMessage(h[drop])
			drop++
		}
	}
	if drop > from {
		note := llm.Message{Role: llm.RoleUser, Name: checkpointName,
			Content: fmt.Sprintf("[%d earlier messages were removed to fit the context window. "+
				"Re-read files you need rather than relying on memory of them.]", drop-from) + a.todoNote()}
		nh := make([]llm.Message, 0, len(h)-(drop-from)+1)
		nh = append(nh, h[:from]...)
		nh = append(nh, note)
		nh = append(nh, h[drop:]...)
		last -= drop - from - 1
		h = nh
	}
	if size() <= target || !mustFit {
		return
	}
	// 3. The newest results, to the room that is left (at least 256 bytes
	// each, so the model still sees how they start and end).
	var n, newest int
	for i := last; i < len(h); i++ {
		if h[i].Role == llm.RoleTool {
			n++
			newest += estimateMessage(h[i])
		}
	}
	if n > 0 {
		// 96 bytes each for the note that says what was cut.
		room := (target-(size()-newest))*charsPerToken/n - 96
		cutOutputs(h, last, len(h), max(256, room))
	}
	// 4. The first user message itself may be huge (a pasted log).
	if size() > target && from > 1 {
		room := (target - (size() - estimateMessage(h[from-1]))) * charsPerToken
		if room > 512 {
			h[from-1].Content = shorten(h[from-1].Content, room, "message cut to fit the context window")
		}
	}
}

// cutOutputs cuts tool outputs and call arguments in h[from:to] to about
// limit bytes each.
func cutOutputs(h []llm.Message, from, to, limit int) {
	for i := from; i < to && i < len(h); i++ {
		switch m := &h[i]; m.Role {
		case llm.RoleTool:
			if len(m.Content) > limit {
				m.Content = shorten(m.Content, limit, "output cut to save context")
			}
		case llm.RoleAssistant:
			// A write_file of a big file keeps the whole file in the call's
			// arguments; the file is in the workspace anyway.
			if len(m.ToolCalls) > 0 {
				calls := make([]llm.ToolCall, len(m.ToolCalls))
				copy(calls, m.ToolCalls)
				for j := range calls {
					calls[j].Function.Arguments = shrinkArgs(calls[j].Function.Arguments, limit)
				}
				m.ToolCalls = calls
			}
		}
	}
}

// todoNote restates the todo list after compaction: the todo_write call
// that set it may be among the removed turns.
func (a *Agent) todoNote() string {
	a.runner.mu.Lock()
	defer a.runner.mu.Unlock()
	if len(a.runner.todos) == 0 {
		return ""
	}
	return "\n\nYour current todo list:\n" + renderTodos(a.runner.todos)
}

// shrinkArgs cuts long string values in a call's JSON arguments and keeps
// the result valid JSON: servers parse the arguments of earlier calls when
// they render the conversation.
func shrinkArgs(args string, limit int) string {
	if len(args) <= limit {
		return args
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return "{}"
	}
	for k, val := range v {
		if str, ok := val.(string); ok && len(str) > limit {
			v[k] = shorten(str, limit, fmt.Sprintf("%d bytes cut to save context", len(str)-limit))
		} else if !ok {
			if b, _ := json.Marshal(val); len(b) > limit {
				v[k] = fmt.Sprintf("[%d bytes of JSON cut to save context]", len(b))
			}
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(out)
}

func (a *Agent) noteCompaction(kind string, before, after int) {
	if after >= before {
		return // nothing could be cut
	}
	a.emit(event.Event{Kind: event.Notice, Text: fmt.Sprintf("context compacted (%s): about %d -> %d tokens of %d",
		kind, before, after, a.opts.ContextTokens)})
}

const checkpointSystem = "You write checkpoint summaries of a coding agent's work so it can continue after its older " +
	"messages are removed. Be factual and specific: file paths, function names, commands and their results, " +
	"error messages. Do not invent anything. Do not call tools."

const checkpointRequest = "Summarise the conversation above for the agent that continues it. Use these sections:\n" +
	"## Goal\n## Done so far (files changed, commands run and their results)\n## Current state\n" +
	"## Next steps\n## Important facts (paths, names, errors, decisions)\n"

// errNothingToSummarise: the recent turns the checkpoint keeps verbatim are
// all there is after the first message.
var errNothingToSummarise = errors.New("nothing old enough to summarise")

// checkpoint asks the model for a structured summary of the older turns
// and puts it in their place, keeping the system prompt, the first user
// message and the recent turns verbatim.
func (a *Agent) checkpoint(ctx context.Context, res *Result) error {
	h := a.history
	from := a.head()
	window := a.opts.ContextTokens
	keep := tailStart(h, from, window*tailPct/100)
	if keep <= from+1 {
		return errNothingToSummarise
	}
	// The summary request carries the old turns as text, tool outputs cut,
	// within 55% of the window, leaving room for the summary itself.
	var b strings.Builder
	for _, m := range h[1:keep] {
		switch m.Role {
		case llm.RoleTool:
			fmt.Fprintf(&b, "[tool result %s]\n%s\n\n", m.Name, shorten(m.Content, 1500, "cut"))
		case llm.RoleAssistant:
			fmt.Fprintf(&b, "[assistant]\n%s\n", m.Content)
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "(call %s %s)\n", c.Function.Name, shorten(c.Function.Arguments, 800, "cut"))
			}
			b.WriteString("\n")
		default:
			fmt.Fprintf(&b, "[%s]\n%s\n\n", m.Role, shorten(m.Content, 4000, "cut"))
		}
	}
	maxOut := min(1024, window/8)
	budget := (window*55/100 - maxOut) * charsPerToken
	if budget < 1024 {
		return fmt.Errorf("window too small to summarise")
	}
	convo := b.String()
	if len(convo) > budget {
		convo = shorten(convo, budget, "middle of the conversation cut")
	}
	// On the agent's own slot: a summary request elsewhere would evict
	// another agent's cached prompt.
	req := llm.Request{Model: a.opts.Model, MaxTokens: maxOut, Slot: a.opts.Slot, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: checkpointSystem},
		{Role: llm.RoleUser, Content: "<conversation>\n" + convo + "</conversation>\n\n" + checkpointRequest},
	}}
	a.emit(event.Event{Kind: event.Progress, Text: "writing a checkpoint summary of older turns"})
	resp, err := a.opts.Client.Stream(ctx, req, nil)
	if err != nil {
		return err
	}
	u := resp.Usage
	if u.PromptTokens == 0 && u.CompletionTokens == 0 {
		u.PromptTokens, u.CompletionTokens = estimateMessages(req.Messages), estimateMessage(resp.Message)
	}
	a.countUsage(res, u, nil)
	summary := visibleText(resp.Message.Content)
	if summary == "" {
		return fmt.Errorf("the model wrote an empty summary")
	}
	before := estimateMessages(h) + a.extraTokens()
	cp := llm.Message{Role: llm.RoleUser, Name: checkpointName + "-" + strconv.Itoa(len(h)-keep),
		Content: "[Checkpoint: summary of the earlier conversation, which was removed to save context]\n" + summary + a.todoNote()}
	nh := make([]llm.Message, 0, from+1+len(h)-keep)
	nh = append(nh, h[:from]...)
	nh = append(nh, cp)
	nh = append(nh, h[keep:]...)
	a.history = nh
	a.tokens.reset()
	if err := a.appendTranscript(cp); err != nil {
		return err
	}
	a.noteCompaction("checkpoint", a.tokens.scaled(before), a.tokens.scaled(estimateMessages(nh)+a.extraTokens()))
	return nil
}

// restoreHistory rebuilds the context of a resumed session from its
// transcript: system prompts are dropped (a fresh one is built), and when
// the transcript holds a checkpoint, the context is the first user message,
// the checkpoint, the messages it kept and everything after it.
func restoreHistory(msgs []llm.Message) []llm.Message {
	var conv []llm.Message
	for _, m := range msgs {
		if m.Role != llm.RoleSystem {
			m.Reasoning = ""
			conv = append(conv, m)
		}
	}
	cp := -1
	for i := len(conv) - 1; i >= 0; i-- {
		if conv[i].Role == llm.RoleUser && strings.HasPrefix(conv[i].Name, checkpointName+"-") {
			cp = i
			break
		}
	}
	if cp < 0 {
		return conv
	}
	first := -1
	for i, m := range conv {
		if m.Role == llm.RoleUser && !strings.HasPrefix(m.Name, checkpointName) {
			first = i
			break
		}
	}
	kept, err := strconv.Atoi(strings.TrimPrefix(conv[cp].Name, checkpointName+"-"))
	if err != nil || kept < 0 || kept > cp {
		kept = 0
	}
	start := cp - kept
	for start < cp && !turnStart(conv, start) {
		start++
	}
	var out []llm.Message
	if first >= 0 && first < start {
		out = append(out, conv[first])
	}
	out = append(out, conv[cp])
	for _, m := range conv[start:cp] {
		if !strings.HasPrefix(m.Name, checkpointName) || m.Role != llm.RoleUser {
			out = append(out, m)
		}
	}
	out = append(out, conv[cp+1:]...)
	return out
}

// tokenCountingClient is a client whose server counts a prompt's tokens
// (llama-server).
type tokenCountingClient interface {
	CountTokens(ctx context.Context, req llm.Request) (int, error)
}

// exactCount anchors the token counter on the server's count of the request
// as it stands, when no reply's usage does (the first request, after a
// compaction): the estimate decides nothing the server can tell exactly.
// A server that cannot count is not asked again.
func (a *Agent) exactCount(ctx context.Context) {
	tc, ok := a.opts.Client.(tokenCountingClient)
	if !ok || a.noCount {
		return
	}
	req := a.request()
	n, err := tc.CountTokens(ctx, req)
	if err != nil || n <= 0 {
		a.noCount = true
		return
	}
	a.tokens.anchor(len(a.history), n, estimateMessages(req.Messages)+a.extraTokens())
}
