package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
)

// Messages the loop adds to the conversation. They are written for small
// models: say what went wrong and what to do instead.
const (
	nudgeNative = "Your last reply described an action but did not call a tool, so nothing happened. " +
		"If you want to act, call the tool now using the function-calling interface. " +
		"If the task is done, reply with your final summary and no tool call."
	nudgeText = "Your last reply described an action but contained no <tool_call> block, so nothing happened. " +
		"If you want to act, write the call now as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>. " +
		"If the task is done, reply with your final summary and no tool call."
	nudgeEmpty = "Your last reply was empty. Continue the task: call a tool, or, if the task is done, " +
		"reply with your final summary."
	continuePrompt = "Your reply was cut off inside a tool call. Continue exactly where it stopped, " +
		"without repeating what you already wrote."
	cutPrompt = "Your last reply reached the output limit (%d tokens) and was cut off, so a tool call in it may be " +
		"incomplete. Keep replies shorter: write a large file in parts (write_file with the start, then edit_file " +
		"or more calls to add the rest)."
	redirectPrompt = "The call %s has now failed 3 times with the same arguments. Do not send it again. " +
		"Read the error message, check your assumptions (does the file exist? is the text exactly as in the file?), " +
		"and try a different approach."
	notRunResult     = "not run: %s"
	interruptedCall  = "error: this call was interrupted before it finished (the agent stopped). Check its effects before repeating it."
	summaryArgsLimit = 2 << 10
	// maxParallelReads bounds the read-only calls of one reply in flight
	// at once: a model may send dozens, the sandbox has a few cores.
	maxParallelReads = 8
	// maxCallsPerReply bounds the calls run from one reply; a looping model
	// can emit hundreds.
	maxCallsPerReply = 32
)

// start prepares the conversation once: session-start hooks, project
// instructions and the system prompt, all read through the workspace.
func (a *Agent) start(ctx context.Context) error {
	if a.started {
		return nil
	}
	if len(a.opts.Hooks.SessionStart) > 0 {
		out, err := a.runner.sessionStart(ctx)
		if err != nil {
			return err
		}
		a.hookOut = out
	}
	name, text, err := readInstructions(ctx, a.opts.Workspace)
	if err != nil {
		return fmt.Errorf("agent: project instructions: %w", err)
	}
	a.projFile, a.projInstr = name, text
	if a.memNotes, err = memoryNotes(a.opts.Memory); err != nil {
		return fmt.Errorf("agent: memory: %w", err)
	}
	sys := llm.Message{Role: llm.RoleSystem, Content: a.systemPrompt()}
	resumed := len(a.history) > 0
	a.history = append([]llm.Message{sys}, a.history...)
	if err := a.appendTranscript(sys); err != nil {
		return err
	}
	if resumed {
		if err := a.repairDangling(); err != nil {
			return err
		}
		a.emit(event.Event{Kind: event.Notice, Text: fmt.Sprintf("resumed session %s (%d messages)", a.header.ID, len(a.history)-1)})
	}
	if a.toolsNotice != "" {
		a.emit(event.Event{Kind: event.Notice, Text: a.toolsNotice})
	}
	a.started = true
	return nil
}

// repairDangling answers tool calls that have no result (the run stopped
// while they ran): every assistant tool call must be followed by its tool
// message, or servers reject the conversation. The calls are not run again:
// they may have had effects.
func (a *Agent) repairDangling() error {
	var fixed []llm.Message
	for i := 0; i < len(a.history); i++ {
		m := a.history[i]
		fixed = append(fixed, m)
		if m.Role != llm.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		answered := map[string]bool{}
		j := i + 1
		for ; j < len(a.history) && a.history[j].Role == llm.RoleTool; j++ {
			answered[a.history[j].ToolCallID] = true
			fixed = append(fixed, a.history[j])
		}
		for _, c := range m.ToolCalls {
			if answered[c.ID] {
				continue
			}
			tm := llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Function.Name, Content: interruptedCall}
			fixed = append(fixed, tm)
			if err := a.appendTranscript(tm); err != nil {
				return err
			}
		}
		i = j - 1
	}
	a.history = fixed
	return nil
}

func (a *Agent) run(ctx context.Context, prompt string, res *Result) error {
	if err := a.start(ctx); err != nil {
		return err
	}
	if prompt != "" {
		if err := a.record(llm.Message{Role: llm.RoleUser, Content: prompt}); err != nil {
			return err
		}
	} else {
		switch last := a.history[len(a.history)-1]; {
		case last.Role == llm.RoleSystem:
			return errors.New("agent: nothing to do: the conversation is empty, give a prompt")
		case last.Role == llm.RoleAssistant && len(last.ToolCalls) == 0:
			// A resumed conversation that had already finished.
			res.StopReason = StopDone
			res.Text = visibleText(last.Content)
			return nil
		}
	}

	if a.opts.CompactFirst {
		a.opts.CompactFirst = false
		used := a.tokens.estimate(a.history, a.extraTokens())
		a.hardCompact(used/2, false)
		if after := a.tokens.estimate(a.history, a.extraTokens()); after >= used {
			a.emit(event.Event{Kind: event.Notice, Text: "nothing to compact: the conversation holds no old tool output to cut"})
		}
	}
	guard := newLoopGuard()
	nudged := false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if res.Iterations >= a.opts.MaxIterations {
			res.StopReason = StopMaxIterations
			res.Text = fmt.Sprintf("stopped after %d model requests (the limit per message); the work so far is kept. "+
				"Send a follow-up message to go on (agent continue), or raise agent.max_iterations.", res.Iterations)
			return nil
		}
		res.Iterations++
		msg, cut, err := a.reply(ctx, res)
		if err != nil {
			return err
		}
		if err := a.record(msg); err != nil {
			return err
		}
		if len(msg.ToolCalls) == 0 {
			answer := visibleText(msg.Content)
			empty := answer == ""
			if !nudged && (empty || a.looksLikeAction(msg.Content)) {
				nudged = true
				nudge := nudgeNative
				switch {
				case empty:
					nudge = nudgeEmpty
				case a.mode == ToolModeText:
					nudge = nudgeText
				}
				if err := a.record(llm.Message{Role: llm.RoleUser, Content: nudge}); err != nil {
					return err
				}
				continue
			}
			res.StopReason = StopDone
			res.Text = answer
			if res.Text == "" {
				res.Text = "(the model finished without a final answer)"
			}
			if n := a.repliesWithoutTools(); n > 0 {
				a.emit(event.Event{Kind: event.Notice, Text: a.noToolDiagnosis(n)})
			}
			return nil
		}

		sigs := callSignatures(msg.ToolCalls)
		if v := guard.before(sigs); v.stop {
			for _, c := range msg.ToolCalls {
				if err := a.recordResult(c, ToolResult{Output: fmt.Sprintf(notRunResult, v.reason), IsError: true}); err != nil {
					return err
				}
			}
			res.StopReason = StopDoomLoop
			res.Text = v.reason
			return nil
		}
		run := msg.ToolCalls
		if len(run) > maxCallsPerReply {
			run = run[:maxCallsPerReply]
		}
		results, err := a.execute(ctx, run, res)
		for range msg.ToolCalls[len(run):] {
			results = append(results, &ToolResult{IsError: true, Output: fmt.Sprintf(notRunResult,
				fmt.Sprintf("a reply may make at most %d calls; send the rest in your next reply", maxCallsPerReply))})
		}
		// Results are recorded even when the workspace failed, so every
		// call in the transcript has its answer.
		for i, c := range msg.ToolCalls {
			r := results[i]
			if r == nil {
				r = &ToolResult{Output: interruptedCall, IsError: true}
			}
			if rerr := a.recordResult(c, *r); rerr != nil && err == nil {
				err = rerr
			}
		}
		if err != nil {
			return err
		}
		failed := make([]bool, len(results))
		for i, r := range results {
			failed[i] = r.IsError
		}
		if cut {
			if err := a.record(llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf(cutPrompt, a.lastMaxTokens)}); err != nil {
				return err
			}
		}
		v := guard.after(sigs, failed)
		switch {
		case v.stop:
			res.StopReason = StopRepeatedFailure
			res.Text = v.reason
			return nil
		case v.redirect != "":
			if err := a.record(llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf(redirectPrompt, v.redirect)}); err != nil {
				return err
			}
		}
	}
}

// recordResult adds a tool message for call c.
func (a *Agent) recordResult(c llm.ToolCall, r ToolResult) error {
	out := r.Output
	if strings.TrimSpace(out) == "" {
		out = "(no output)"
	}
	return a.record(llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Function.Name, Content: out})
}

// execute runs one reply's calls: consecutive read-only calls concurrently,
// anything that writes or runs a command alone and in order. results[i] is
// nil for a call that did not run because the workspace failed.
func (a *Agent) execute(ctx context.Context, calls []llm.ToolCall, res *Result) ([]*ToolResult, error) {
	results := make([]*ToolResult, len(calls))
	records := make([]ToolCallRecord, len(calls))
	var firstErr error
	for i := 0; i < len(calls) && firstErr == nil; {
		j := i + 1
		if a.runner.readOnly(canonicalTool(calls[i].Function.Name)) {
			for j < len(calls) && a.runner.readOnly(canonicalTool(calls[j].Function.Name)) {
				j++
			}
		}
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			sem = make(chan struct{}, maxParallelReads)
		)
		for k := i; k < j; k++ {
			run := func() {
				r, rec, err := a.runOne(ctx, calls[k])
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				results[k], records[k] = &r, rec
			}
			if j-i == 1 {
				run()
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				run()
			}()
		}
		wg.Wait()
		i = j
	}
	for i := range calls {
		if results[i] != nil {
			res.ToolCalls = append(res.ToolCalls, records[i])
		}
	}
	return results, firstErr
}

// runOne runs one call with its events.
func (a *Agent) runOne(ctx context.Context, c llm.ToolCall) (ToolResult, ToolCallRecord, error) {
	name := canonicalTool(c.Function.Name)
	a.emit(event.Event{Kind: event.ToolStarted, Tool: name, CallID: c.ID, Args: cutUTF8(c.Function.Arguments, summaryArgsLimit)})
	start := time.Now()
	r, err := a.runner.run(ctx, name, []byte(c.Function.Arguments))
	if err != nil {
		a.emit(event.Event{Kind: event.ToolFinished, Tool: name, CallID: c.ID, IsError: true,
			Duration: time.Since(start), Text: err.Error()})
		return r, ToolCallRecord{}, err
	}
	a.emit(event.Event{Kind: event.ToolFinished, Tool: name, CallID: c.ID, ExitCode: r.ExitCode,
		IsError: r.IsError, TimedOut: r.TimedOut, OOMKill: r.OOMKilled, Duration: r.Duration, Text: firstLine(r.Output, 200),
		Output: cutUTF8(r.Output, event.OutputLimit), OutputTail: tailUTF8(r.Output, event.OutputLimit)})
	return r, ToolCallRecord{
		ID: c.ID, Name: name, Args: c.Function.Arguments, ExitCode: r.ExitCode,
		IsError: r.IsError, Truncated: r.Truncated, Duration: r.Duration,
	}, nil
}

func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return cutUTF8(s, n)
}

// reply gets the model's next message: it fits the context, streams the
// request in the current tool mode, downgrades to text mode when native
// tool calls do not work, and asks for the rest of a cut-off text call.
//
// cut reports a reply that stopped at the output limit (finish_reason
// "length") rather than by itself.
func (a *Agent) reply(ctx context.Context, res *Result) (msg llm.Message, cut bool, err error) {
	for attempt := 0; ; attempt++ {
		if err := a.fit(ctx, res); err != nil {
			return llm.Message{}, false, err
		}
		req := a.request()
		resp, err := a.stream(ctx, req, res)
		if err != nil {
			switch {
			case errors.Is(err, llm.ErrToolsUnsupported) && a.canDowngrade():
				a.downgrade("the server cannot take native tool calls (" + cutUTF8(err.Error(), 200) + ")")
				continue
			case errors.Is(err, llm.ErrContextExceeded) && attempt == 0:
				// Our estimate was too low for this model's tokenizer: cut
				// harder and try once more.
				a.tokens.reset()
				a.hardCompact(a.opts.ContextTokens*40/100, true)
				continue
			}
			return llm.Message{}, false, err
		}
		msg = resp.Message
		msg.Role = llm.RoleAssistant
		if a.mode == ToolModeNative {
			if a.canDowngrade() && a.nativeCallsBroken(msg.ToolCalls) {
				a.downgrade("the model sent native tool calls without their required arguments")
				continue
			}
			if len(msg.ToolCalls) == 0 {
				// Some servers pass a model's own tool-call markup through
				// as text; take the calls rather than lose them.
				if calls, _ := a.parseText(msg.Content); len(calls) > 0 {
					msg.ToolCalls = calls
				}
			}
		} else {
			msg.ToolCalls = nil
			calls, cut := a.parseText(msg.Content)
			if cut {
				more, err := a.continuation(ctx, req, msg, res)
				if err != nil {
					return llm.Message{}, false, err
				}
				msg.Content += more
				calls, _ = a.parseText(msg.Content)
			}
			msg.ToolCalls = calls
		}
		seen := make(map[string]bool, len(msg.ToolCalls))
		for i := range msg.ToolCalls {
			c := &msg.ToolCalls[i]
			c.Type = "function"
			// Results are matched to calls by id: some servers send none,
			// or the same one for every call.
			if c.ID == "" || seen[c.ID] {
				a.nextID++
				c.ID = "call_" + a.header.ID + "_" + strconv.Itoa(a.nextID)
			}
			seen[c.ID] = true
		}
		return msg, resp.FinishReason == "length", nil
	}
}

func (a *Agent) canDowngrade() bool {
	return a.opts.ToolMode == ToolModeAuto && a.mode == ToolModeNative
}

// textModeMarker is in the system prompt exactly when it is in text mode;
// a resumed session finds the mode it had switched to by it.
const textModeMarker = "\n# Calling tools\n"

func (a *Agent) downgrade(why string) {
	a.mode = ToolModeText
	a.history[0].Content = a.systemPrompt()
	a.tokens.reset()
	a.emit(event.Event{Kind: event.Notice, Text: why + "; switching to text tool calls"})
	// Recorded so that a resumed session starts in text mode at once.
	if err := a.appendTranscript(a.history[0]); err != nil {
		a.emit(event.Event{Kind: event.Notice, Text: err.Error()})
	}
}

// nativeCallsBroken reports calls that lack required arguments: models
// without real tool-call training often send a bare name.
func (a *Agent) nativeCallsBroken(calls []llm.ToolCall) bool {
	for _, c := range calls {
		name := canonicalTool(c.Function.Name)
		if !a.runner.offered(name) {
			continue
		}
		if _, err := a.runner.checkCall(name, []byte(c.Function.Arguments)); missingRequired(err) {
			return true
		}
	}
	return false
}

// continuation asks for the rest of a reply that stopped inside a tool
// call, once.
func (a *Agent) continuation(ctx context.Context, req llm.Request, partial llm.Message, res *Result) (string, error) {
	req.Messages = append(req.Messages[:len(req.Messages):len(req.Messages)],
		llm.Message{Role: llm.RoleAssistant, Content: partial.Content},
		llm.Message{Role: llm.RoleUser, Content: continuePrompt})
	resp, err := a.stream(ctx, req, res)
	if err != nil {
		return "", err
	}
	return resp.Message.Content, nil
}

// request builds the wire request for the current mode.
func (a *Agent) request() llm.Request {
	req := llm.Request{Model: a.opts.Model, Messages: wireMessages(a.history, a.mode), Slot: a.opts.Slot}
	if a.mode == ToolModeNative {
		defs := a.toolDefs()
		for _, n := range a.runner.names() {
			req.Tools = append(req.Tools, defs[n])
		}
	}
	used := a.tokens.estimate(a.history, a.extraTokens())
	req.MaxTokens = max(a.minReply(), min(a.opts.MaxReplyTokens, a.opts.ContextTokens-used))
	a.lastMaxTokens = req.MaxTokens
	return req
}

// extraTokens are the request's tokens outside the messages.
func (a *Agent) extraTokens() int {
	if a.mode == ToolModeNative {
		return a.toolsTok
	}
	return 0
}

// stream sends one request and emits its deltas. A reply that streams past
// MaxReplyBytes is cut off: an endless stream must not hang the task.
func (a *Agent) stream(ctx context.Context, req llm.Request, res *Result) (llm.Response, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var n atomic.Int64
	var tooLong atomic.Bool
	limit := int64(a.opts.MaxReplyBytes)
	var (
		mu    sync.Mutex // onDelta is called from the client's goroutine
		split thinkSplitter
	)
	emitText := func(vis, think string) {
		if think != "" {
			a.emit(event.Event{Kind: event.ThinkingDelta, Text: think})
		}
		if vis != "" {
			a.emit(event.Event{Kind: event.TextDelta, Text: vis})
		}
	}
	sent := time.Now()
	var first atomic.Int64 // unix nanoseconds of the first delta
	onDelta := func(d llm.Delta) {
		first.CompareAndSwap(0, time.Now().UnixNano())
		if n.Add(int64(len(d.Text))) > limit {
			if !tooLong.Swap(true) {
				cancel()
			}
			return
		}
		switch d.Kind {
		case llm.DeltaText:
			mu.Lock()
			vis, think := split.feed(d.Text)
			mu.Unlock()
			emitText(vis, think)
		case llm.DeltaReasoning:
			a.emit(event.Event{Kind: event.ThinkingDelta, Text: d.Text})
		}
	}
	resp, err := a.opts.Client.Stream(sctx, req, onDelta)
	done := time.Now()
	mu.Lock()
	emitText(split.flush())
	mu.Unlock()
	if tooLong.Load() {
		return llm.Response{}, fmt.Errorf("%w: it streamed more than %d bytes; stopped it. The model may be looping: "+
			"try another model or a lower temperature", ErrReplyTooLong, limit)
	}
	if err != nil {
		if ctx.Err() != nil {
			return llm.Response{}, ctx.Err()
		}
		return llm.Response{}, fmt.Errorf("agent: model request: %w", err)
	}
	u := resp.Usage
	if u.PromptTokens == 0 && u.CompletionTokens == 0 {
		u.PromptTokens = estimateMessages(req.Messages) + a.extraTokens()
		u.CompletionTokens = estimateMessage(resp.Message)
		a.tokens.reset()
	} else {
		// The prompt covered the history as it is now; the reply, once
		// recorded, is estimated from its length like anything newer.
		a.tokens.anchor(len(a.history), u.PromptTokens, estimateMessages(req.Messages)+a.extraTokens())
	}
	a.countUsage(res, u, measureSpeed(u, resp.Timings, sent, first.Load(), done))
	return resp, nil
}

// measureSpeed gives a request's speed figures: the server's timings when
// it sent them (llama-server does), else what the stream shows (time to
// the first delta, then the tokens counted over the rest).
func measureSpeed(u llm.Usage, t *llm.Timings, sent time.Time, firstNano int64, done time.Time) *event.Speed {
	s := &event.Speed{PromptProcessed: u.PromptTokens, GenTokens: u.CompletionTokens}
	firstAt := done
	if firstNano != 0 {
		firstAt = time.Unix(0, firstNano)
	}
	s.FirstTokenMS = firstAt.Sub(sent).Milliseconds()
	s.GenMS = float64(done.Sub(firstAt).Microseconds()) / 1000
	if t != nil {
		s.Server = true
		s.PromptProcessed, s.PromptCached = t.PromptN, t.CacheN
		if t.PredictedN > 0 {
			s.GenTokens, s.GenMS = t.PredictedN, t.PredictedMS
		}
	}
	return s
}

// countUsage adds one request's tokens to the Run's total and reports them
// with the request's speed (nil when not measured).
func (a *Agent) countUsage(res *Result, u llm.Usage, speed *event.Speed) {
	res.Usage.PromptTokens += u.PromptTokens
	res.Usage.CompletionTokens += u.CompletionTokens
	res.Usage.TotalTokens += u.PromptTokens + u.CompletionTokens
	a.emit(event.Event{Kind: event.Usage, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, Speed: speed, Slot: a.opts.Slot})
}

// wireMessages converts the context to what the server gets in a mode.
// In text mode tool calls live in the assistant's text and results come
// back as user messages, because the model's template may not know tool
// roles. Adjacent user messages are merged: strict templates require
// user/assistant alternation.
func wireMessages(history []llm.Message, mode ToolMode) []llm.Message {
	out := make([]llm.Message, 0, len(history))
	for _, m := range history {
		m.Reasoning = ""
		switch {
		case m.Role == llm.RoleUser:
			m.Name = ""
		case mode == ToolModeText && m.Role == llm.RoleAssistant && len(m.ToolCalls) > 0:
			if !strings.Contains(m.Content, "<tool_call>") {
				m.Content = strings.TrimSpace(m.Content + "\n" + renderTextCalls(m.ToolCalls))
			}
			m.ToolCalls = nil
		case mode == ToolModeText && m.Role == llm.RoleTool:
			m = llm.Message{Role: llm.RoleUser, Content: "<tool_response name=\"" + m.Name + "\">\n" + m.Content + "\n</tool_response>"}
		}
		if n := len(out); n > 0 && m.Role == llm.RoleUser && out[n-1].Role == llm.RoleUser {
			out[n-1].Content += "\n\n" + m.Content
			continue
		}
		out = append(out, m)
	}
	return out
}

// renderTextCalls writes calls in the text-mode format.
func renderTextCalls(calls []llm.ToolCall) string {
	var b strings.Builder
	for _, c := range calls {
		args := json.RawMessage(normalizeArgs([]byte(c.Function.Arguments)))
		if !json.Valid(args) {
			args, _ = json.Marshal(c.Function.Arguments)
		}
		line, _ := json.Marshal(struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}{c.Function.Name, args})
		b.WriteString("<tool_call>\n")
		b.Write(line)
		b.WriteString("\n</tool_call>\n")
	}
	return strings.TrimSpace(b.String())
}

// repliesWithoutTools is the number of the model's replies in the
// conversation when none of them called a tool, else 0.
func (a *Agent) repliesWithoutTools() int {
	n := 0
	for _, m := range a.history {
		if m.Role != llm.RoleAssistant {
			continue
		}
		if len(m.ToolCalls) > 0 {
			return 0
		}
		n++
	}
	return n
}

// noToolDiagnosis says what a conversation without a single tool call
// suggests and what to try: a model that ends at once having read nothing
// is rarely right, and one that emits garbage ends the same way.
func (a *Agent) noToolDiagnosis(n int) string {
	try := "start llama-server with --jinja (agent llm up does), use a model trained for tool calls, or set agent.tool_mode: text"
	if a.mode == ToolModeText {
		try = "use a model trained for tool calls (its reply should hold <tool_call> blocks), or a larger quantisation of this one"
	}
	return fmt.Sprintf("the model made no tool call in %d repl%s and ended: if it was meant to act, is its chat template tool-aware? Try: %s",
		n, map[bool]string{true: "y", false: "ies"}[n == 1], try)
}
