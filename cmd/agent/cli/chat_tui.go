package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
)

// Messages of the chat view.
type (
	chatEventMsg struct{ e event.Event }
	chatPrintMsg struct{ text string }
	chatTurnMsg  struct{ err error }
	chatCmdMsg   struct {
		send string
		quit bool
	}
	chatTickMsg struct{}
	// chatAskMsg: the agent asks the user (ask_user); the next line typed
	// is sent on reply.
	chatAskMsg struct {
		prompt string
		reply  chan chatAnswer
	}
)

// chatAnswer is the user's answer to ask_user; ok is false when they
// declined (Ctrl-C).
type chatAnswer struct {
	text string
	ok   bool
}

// chatBlock is one piece of the transcript on screen.
type chatBlock struct {
	kind string // user, text, thinking, tool, info, error
	text string
	call string // tool call id
	// detail is a tool call's expansion (ctrl+o): an edit as a diff, a
	// command's first line of output.
	detail string
}

// chatModel is the bubbletea view of a chat: a renderer of the task's
// event stream plus an input line; turns and commands run in the session.
type chatModel struct {
	s      *chatSession
	ctx    context.Context
	input  textinput.Model
	width  int
	height int

	blocks       []chatBlock
	showThinking bool
	showDetail   bool
	busy         bool
	cancel       context.CancelFunc
	turnStart    time.Time
	tokensIn     int
	tokensOut    int
	lastPrompt   int
	speed        speedTotals
	running      string
	quitting     bool
	// asking is where the answer to an open ask_user question goes.
	asking chan chatAnswer
}

var (
	styleDim    = lipgloss.NewStyle().Faint(true)
	styleUser   = lipgloss.NewStyle().Bold(true)
	styleTool   = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	styleError  = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	styleStatus = lipgloss.NewStyle().Reverse(true)
)

func newChatModel(ctx context.Context, s *chatSession, showThinking bool) *chatModel {
	in := textinput.New()
	in.Placeholder = "message, or /help"
	in.Prompt = "> "
	in.CharLimit = maxPromptBytes
	in.Focus()
	return &chatModel{s: s, ctx: ctx, input: in, width: 80, height: 24, showThinking: showThinking}
}

func (m *chatModel) Init() tea.Cmd { return textinput.Blink }

func (m *chatModel) add(kind, text string) {
	m.blocks = append(m.blocks, chatBlock{kind: kind, text: text})
}

// appendStream adds streamed text to the last block of its kind, or
// starts one.
func (m *chatModel) appendStream(kind, text string) {
	if n := len(m.blocks); n > 0 && m.blocks[n-1].kind == kind {
		m.blocks[n-1].text += text
		return
	}
	m.add(kind, text)
}

func (m *chatModel) event(e event.Event) {
	e = safeEvent(e)
	sub := ""
	if e.Agent != "" {
		sub = "[" + e.Agent + "] "
	}
	switch e.Kind {
	case event.TextDelta:
		if e.Agent == "" {
			m.appendStream("text", e.Text)
		}
	case event.ThinkingDelta:
		if e.Agent == "" {
			m.appendStream("thinking", e.Text)
		}
	case event.ToolStarted:
		m.running = e.Tool
		m.blocks = append(m.blocks, chatBlock{kind: "tool", call: e.Agent + "\x00" + e.CallID,
			text: sub + "> " + e.Tool + " " + summarizeArgs(e.Tool, e.Args), detail: termtext.Text(toolDetail(e.Tool, e.Args))})
	case event.ToolFinished:
		m.running = ""
		status := "ok"
		switch {
		case e.TimedOut:
			status = "timed out"
		case e.OOMKill:
			status = "OOM-killed"
		case e.ExitCode != nil:
			status = fmt.Sprintf("exit %d", *e.ExitCode)
		case e.IsError:
			status = "error"
		}
		res := fmt.Sprintf(" → %s (%s)", status, e.Duration.Round(time.Millisecond))
		if e.IsError && e.Text != "" {
			res += ": " + oneLine(e.Text, 100)
		}
		key := e.Agent + "\x00" + e.CallID
		for i := len(m.blocks) - 1; i >= 0; i-- {
			if m.blocks[i].kind == "tool" && m.blocks[i].call == key {
				m.blocks[i].text += res
				if out := strings.TrimRight(e.Output, "\n"); out != "" {
					if e.TimedOut || e.OOMKill || e.ExitCode != nil && *e.ExitCode != 0 {
						// A failed command: its end says why.
						m.blocks[i].detail += strings.Join(lastLines(out, 12), "\n")
					} else {
						m.blocks[i].detail += strings.Join(firstLines(out, 12), "\n")
					}
				}
				return
			}
		}
		m.add("tool", sub+"  "+e.Tool+res)
	case event.Usage:
		m.tokensIn += e.PromptTokens
		m.tokensOut += e.CompletionTokens
		if e.Agent == "" {
			m.lastPrompt = e.PromptTokens + e.CompletionTokens
			m.speed.add(e.Speed)
		}
	case event.Notice:
		m.add("info", sub+"note: "+e.Text)
	case event.Progress:
		m.add("info", sub+e.Text)
	case event.Egress:
		verdict := "denied"
		if e.Allowed {
			verdict = "allowed"
		}
		m.add("info", sub+"network "+verdict+": "+e.Text)
	case event.SubAgent:
		m.add("info", "sub-agent "+e.Agent+": "+e.State+" "+oneLine(e.Text, 100))
	case event.Error:
		m.add("error", sub+"error: "+e.Text)
	}
}

func (m *chatModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.input.Width = max(10, msg.Width-4)
		return m, nil
	case chatEventMsg:
		m.event(msg.e)
		return m, nil
	case chatPrintMsg:
		m.add("info", msg.text)
		return m, nil
	case chatAskMsg:
		m.add("ask", msg.prompt)
		m.asking = msg.reply
		m.input.Placeholder = "your answer (ctrl+c: let the agent decide)"
		return m, nil
	case chatTickMsg:
		if m.busy {
			return m, chatTick()
		}
		return m, nil
	case chatTurnMsg:
		m.busy, m.running = false, ""
		if m.asking != nil {
			m.answer(chatAnswer{})
		}
		if m.cancel != nil {
			m.cancel()
			m.cancel = nil
		}
		switch {
		case errors.Is(msg.err, errStopped):
			m.add("info", termtext.Text(msg.err.Error()))
		case msg.err != nil:
			m.add("error", "error: "+termtext.Text(msg.err.Error()))
		}
		return m, nil
	case chatCmdMsg:
		m.busy = false
		if msg.quit {
			m.quitting = true
			return m, tea.Quit
		}
		if msg.send != "" {
			return m, m.send(msg.send)
		}
		return m, nil
	case tea.KeyMsg:
		switch msg.String() {
		case "ctrl+c":
			if m.asking != nil {
				m.answer(chatAnswer{})
				m.add("info", "not answered: the agent decides itself")
				return m, nil
			}
			if m.busy && m.cancel != nil {
				m.cancel()
				m.add("info", "stopping the generation…")
				return m, nil
			}
			if m.input.Value() != "" {
				m.input.SetValue("")
				return m, nil
			}
			m.add("info", "ctrl+d or /exit leaves the session (the branch is kept)")
			return m, nil
		case "ctrl+d":
			if !m.busy {
				m.quitting = true
				return m, tea.Quit
			}
			return m, nil
		case "ctrl+t":
			m.showThinking = !m.showThinking
			return m, nil
		case "ctrl+o":
			m.showDetail = !m.showDetail
			return m, nil
		case "enter":
			line := strings.TrimSpace(m.input.Value())
			if line == "" {
				return m, nil
			}
			if m.asking != nil {
				m.input.SetValue("")
				m.add("user", line)
				m.answer(chatAnswer{text: line, ok: true})
				return m, nil
			}
			if m.busy {
				m.add("info", "a turn is running: wait for it, or ctrl+c to stop it")
				return m, nil
			}
			m.input.SetValue("")
			if strings.HasPrefix(line, "/") {
				m.add("user", line)
				m.busy = true
				s, ctx := m.s, m.ctx
				return m, func() tea.Msg {
					send, quit := s.command(ctx, line)
					return chatCmdMsg{send: send, quit: quit}
				}
			}
			return m, m.send(line)
		}
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return m, cmd
}

// answer sends the answer to the open question.
func (m *chatModel) answer(a chatAnswer) {
	m.asking <- a // buffered: the asker may have gone (its turn stopped)
	m.asking = nil
	m.input.Placeholder = "message, or /help"
}

// send starts a turn with msg.
func (m *chatModel) send(msg string) tea.Cmd {
	m.add("user", msg)
	ctx, cancel := context.WithCancel(m.ctx)
	m.busy, m.cancel, m.turnStart = true, cancel, time.Now()
	s := m.s
	return tea.Batch(func() tea.Msg { return chatTurnMsg{err: s.turn(ctx, msg)} }, chatTick())
}

func chatTick() tea.Cmd {
	return tea.Tick(200*time.Millisecond, func(time.Time) tea.Msg { return chatTickMsg{} })
}

// status is the status line: what runs, tokens, tokens/s, context fill,
// elapsed time.
func (m *chatModel) status() string {
	what := "ready"
	if m.busy {
		what = "thinking"
		if m.running != "" {
			what = "running " + m.running
		}
		el := time.Since(m.turnStart)
		what = fmt.Sprintf("%s %s %s", spinner[int(el/(100*time.Millisecond))%len(spinner)], el.Round(time.Second), what)
	}
	parts := []string{what, fmt.Sprintf("tokens %d in / %d out", m.tokensIn, m.tokensOut)}
	if s := m.speed; s.genMS > 0 {
		parts = append(parts, fmt.Sprintf("%.1f tok/s", float64(s.genTokens)/s.genMS*1000))
	}
	m.s.mu.Lock()
	run := m.s.run
	m.s.mu.Unlock()
	if run != nil {
		if n := run.ContextTokens(); n > 0 && m.lastPrompt > 0 {
			parts = append(parts, fmt.Sprintf("context %d%%", m.lastPrompt*100/n))
		}
		parts = append(parts, "task "+run.Task.ID)
	}
	thinking := "ctrl+t thinking"
	if m.showThinking {
		thinking = "ctrl+t hide thinking"
	}
	parts = append(parts, thinking, "ctrl+o tool details")
	return strings.Join(parts, " · ")
}

func (m *chatModel) View() string {
	if m.quitting {
		return ""
	}
	w := max(20, m.width)
	var lines []string
	wrap := lipgloss.NewStyle().Width(w)
	for _, b := range m.blocks {
		var text string
		switch b.kind {
		case "user":
			text = styleUser.Render(wrap.Render("you: " + b.text))
		case "thinking":
			if !m.showThinking {
				text = styleDim.Render(fmt.Sprintf("▸ thinking (%d characters; ctrl+t shows it)", len(b.text)))
			} else {
				text = styleDim.Render(wrap.Render("thinking: " + strings.TrimSpace(b.text)))
			}
		case "tool":
			text = styleTool.Render(wrap.Render(b.text))
			if m.showDetail && b.detail != "" {
				text += "\n" + styleDim.Render(wrap.Render(indent(strings.TrimRight(b.detail, "\n"), "    ")))
			}
		case "error":
			text = styleError.Render(wrap.Render(b.text))
		case "ask":
			text = styleUser.Render(wrap.Render(b.text))
		case "info":
			text = styleDim.Render(wrap.Render(b.text))
		default:
			text = wrap.Render(strings.TrimRight(b.text, "\n"))
		}
		lines = append(lines, strings.Split(text, "\n")...)
	}
	room := max(1, m.height-2)
	if len(lines) > room {
		lines = lines[len(lines)-room:]
	}
	for len(lines) < room {
		lines = append(lines, "")
	}
	status := oneLine(m.status(), w)
	return strings.Join(lines, "\n") + "\n" + styleStatus.Render(status+strings.Repeat(" ", max(0, w-lipgloss.Width(status)))) + "\n" + m.input.View()
}

// chatTUI runs the chat in the terminal.
func chatTUI(ctx context.Context, opts *ChatOptions) error {
	var (
		mu sync.Mutex
		p  *tea.Program
	)
	send := func(msg tea.Msg) {
		mu.Lock()
		prog := p
		mu.Unlock()
		if prog != nil {
			prog.Send(msg)
		}
	}
	sink := event.SinkFunc(func(e event.Event) { send(chatEventMsg{e}) })
	s, err := newChatSession(opts, sink, func(text string) { send(chatPrintMsg{text}) })
	if err != nil {
		return err
	}
	m := newChatModel(ctx, s, opts.Run.ShowThinking)
	s.o.SetUser(&chatUser{ask: func(ctx context.Context, prompt string) (string, bool) {
		reply := make(chan chatAnswer, 1)
		send(chatAskMsg{prompt: prompt, reply: reply})
		select {
		case a := <-reply:
			return a.text, a.ok
		case <-ctx.Done():
			return "", false
		}
	}})
	prog := tea.NewProgram(m, tea.WithInput(opts.IO.In), tea.WithOutput(opts.IO.ErrOut), tea.WithAltScreen(), tea.WithContext(ctx))
	mu.Lock()
	p = prog
	mu.Unlock()
	_, runErr := prog.Run()
	mu.Lock()
	p = nil
	mu.Unlock()
	// What the session prints from now on goes to the terminal, after the
	// view is gone; so does the outcome of the decision that ended it.
	s.print = func(text string) { fmt.Fprintln(opts.IO.ErrOut, text) }
	if s.outcome != "" {
		fmt.Fprintln(opts.IO.ErrOut, s.outcome)
	}
	if m.cancel != nil {
		m.cancel()
	}
	s.close(ctx)
	if runErr != nil && !errors.Is(runErr, tea.ErrProgramKilled) {
		return runErr
	}
	return nil
}

// toolDetail is what ctrl+o shows under a tool call: an edit as a diff,
// the start of a written file. Arguments are escaped already.
func toolDetail(tool, args string) string {
	var a struct {
		OldString string `json:"old_string"`
		NewString string `json:"new_string"`
		Content   string `json:"content"`
		Edits     []struct {
			OldString string `json:"old_string"`
			NewString string `json:"new_string"`
		} `json:"edits"`
	}
	if json.Unmarshal([]byte(args), &a) != nil {
		return ""
	}
	var b strings.Builder
	diff := func(old, new string) {
		for _, l := range firstLines(old, 12) {
			b.WriteString("- " + l + "\n")
		}
		for _, l := range firstLines(new, 12) {
			b.WriteString("+ " + l + "\n")
		}
	}
	switch tool {
	case "edit_file":
		diff(a.OldString, a.NewString)
	case "multi_edit":
		for _, e := range a.Edits {
			diff(e.OldString, e.NewString)
		}
	case "write_file":
		for _, l := range firstLines(a.Content, 12) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// firstLines splits s into lines, at most n (the last saying how many
// more there are).
func firstLines(s string, n int) []string {
	if s == "" {
		return nil
	}
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		more := len(ls) - n + 1
		ls = append(ls[:n-1], fmt.Sprintf("… %d more line(s)", more))
	}
	return ls
}

// lastLines is the last n lines of s (the first saying how many came
// before).
func lastLines(s string, n int) []string {
	if s == "" {
		return nil
	}
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		before := len(ls) - n + 1
		ls = append([]string{fmt.Sprintf("… %d line(s) before", before)}, ls[len(ls)-n+1:]...)
	}
	return ls
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(s, "\n", "\n"+pre)
}
