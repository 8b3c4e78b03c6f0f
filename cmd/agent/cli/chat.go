package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
)

// ChatOptions are the inputs of `agent chat`.
type ChatOptions struct {
	IO      *IOStreams
	Factory *Factory
	// Task is the task to talk about ("": a new task on the first message).
	Task   string
	Repo   string
	Base   string
	Labels []string
	Run    RunFlags
	// Line forces line mode (one message per line, plain output), which
	// is also what a chat without a terminal gets.
	Line bool
}

// NewCmdChat builds `agent chat`.
func NewCmdChat(f *Factory, runF func(context.Context, *ChatOptions) error) *cobra.Command {
	opts := &ChatOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "chat [TASK]",
		Short: "Talk to the agent: an interactive session over a task's branch",
		Long: `An interactive session over one task: every message you send is a turn of
the same conversation, run in a fresh sandbox over the task's worktree and
committed on its branch (the first message starts a new task when no TASK is
given). The view streams the model's text, shows each tool call, keeps the
model's thinking collapsed (ctrl+t shows it) and a status line with tokens,
tokens/s, context fill and elapsed time. Ctrl-C stops the current generation,
not the session.

Commands: /diff /review /merge /squash /keep /discard /undo /compact /stats
/model /help /exit, and the project's own commands from .agent/commands/NAME.md
(used as /NAME ARGS; $ARGUMENTS in the file is replaced by ARGS).

Without a terminal (or with --line) it reads one message per line from stdin
and prints plain lines.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Task = args[0]
				f.SetProjectDir(taskProjectDir(cmd.Context(), f, opts.Task))
			} else {
				f.SetProjectDir(projectDir(cmd.Context(), opts.Repo))
			}
			opts.Run.changed(cmd)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return chatRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Repo, "repo", "", "directory inside the git checkout to work on (new task)")
	fl.StringVar(&opts.Base, "base", "", "ref the new task branches from (default: HEAD)")
	fl.BoolVar(&opts.Line, "line", false, "line mode: one message per line from stdin, plain output")
	opts.Run.add(cmd)
	fl.StringArrayVar(&opts.Labels, "label", nil, "extra sandbox container label KEY=VALUE (repeatable)")
	_ = fl.MarkHidden("label")
	return cmd
}

// chatSession is what a chat does, whatever draws it: it turns messages
// into turns of one task (no loop of its own: each turn is the task's
// ordinary run) and runs the slash commands. Output goes to print, events
// to the orchestrator's sink.
type chatSession struct {
	opts  *ChatOptions
	o     *orchestrator.Orchestrator
	cfg   *Config
	print func(string)

	mu  sync.Mutex
	run *orchestrator.Run
	// note is told to the model with the next message (after /undo).
	note string
	// planNext runs the next message in plan mode (/plan).
	planNext bool
	finished bool // merged, kept or discarded: the session is over
	// outcome says what the decision that ended the session did.
	outcome string
}

func newChatSession(opts *ChatOptions, sink event.Sink, print func(string)) (*chatSession, error) {
	labels, err := parseLabelFlags(opts.Labels)
	if err != nil {
		return nil, err
	}
	o, cfg, err := newOrchestrator(opts.Factory, sink, labels, &opts.Run)
	if err != nil {
		return nil, err
	}
	if _, err := o.Reconcile(); err != nil {
		return nil, err
	}
	if opts.Task != "" {
		if _, err := o.Task(opts.Task); err != nil {
			return nil, err
		}
	}
	return &chatSession{opts: opts, o: o, cfg: cfg, print: print}, nil
}

// close keeps the branch of a task nobody decided about, and lets go of
// the task.
func (s *chatSession) close(ctx context.Context) {
	// The pool refill and the spare checkout the session started end
	// before the process does, not halfway (deferred: after the unlock).
	defer s.o.WaitSpares()
	defer s.o.WaitPool()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return
	}
	if !s.finished && s.run.Task.State == store.Review {
		if out, err := s.o.Decide(context.WithoutCancel(ctx), s.run.Task, orchestrator.Keep, true); err == nil {
			s.print(termtext.Text(out.Message))
		}
	}
	s.run.Close()
	s.run = nil
}

// turn sends one message: a new task, or the next turn of the task.
func (s *chatSession) turn(ctx context.Context, msg string) error {
	s.mu.Lock()
	run := s.run
	note := s.note
	s.note = ""
	plan := s.planNext
	s.planNext = false
	s.mu.Unlock()
	if note != "" {
		msg = note + "\n\n" + msg
	}
	var err error
	switch {
	case run != nil:
		err = run.Continue(msg)
	case s.opts.Task != "":
		co := orchestrator.ContinueOptions{Prompt: msg}
		co.LLM, co.Model = endpointOverride(&s.opts.Run, s.cfg)
		run, err = s.o.Continue(ctx, s.opts.Task, co)
	default:
		run, err = s.o.NewTask(ctx, orchestrator.TaskOptions{Prompt: msg, RepoDir: s.opts.Repo, Base: s.opts.Base,
			LLM: s.cfg.LLM.URL, Model: s.cfg.LLM.ServedModel, Image: s.cfg.Sandbox.Image})
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.run = run
	s.mu.Unlock()
	// Plan mode holds for this message only, as with agent task --plan;
	// the plan is the turn's answer and the next message carries it out.
	run.Plan = plan
	err = run.Execute(ctx)
	run.Plan = false
	if errors.Is(err, orchestrator.ErrInterrupted) {
		// The session goes on: what was done so far is committed and the
		// task is under review again.
		if serr := run.Settle(ctx); serr != nil {
			return fmt.Errorf("%w (%v)", errStopped, serr)
		}
		return errStopped
	}
	return err
}

// errStopped: the user stopped the generation (Ctrl-C); the session goes on.
var errStopped = errors.New("generation stopped; the work so far is committed on the branch, your next message goes on from here")

// chatHelp lists the commands.
const chatHelp = `/diff      the task's changes against its base
/review    the review summary (commits, tests, commands, warnings)
/merge     merge the branch into its base and end the session (/squash: one commit)
/keep      keep the branch for later and end the session
/discard   discard the branch and its worktree (/discard yes when work would be lost)
/undo      revert the agent's last commit on the branch (a new commit; nothing is lost)
/compact   compact the conversation before the next message
/plan      plan mode for the next message: the agent only reads, then answers with its plan
/stats     tokens, speed, turns and commits
/model     the model and its endpoint
/help      this list
/exit      end the session (the branch is kept)`

// command runs a slash command. It returns a message to send instead
// (a project command), and whether the session is over.
func (s *chatSession) command(ctx context.Context, line string) (send string, quit bool) {
	name, args, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "/"), " ")
	args = strings.TrimSpace(args)
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	var t *store.Task
	if run != nil {
		t = run.Task
	} else if s.opts.Task != "" {
		t, _ = s.o.Task(s.opts.Task)
	}
	needTask := func() bool {
		if t == nil {
			s.print("no task yet: send a message first")
			return false
		}
		return true
	}
	switch name {
	case "help", "?":
		s.print(chatHelp + s.projectCommandsHelp())
	case "exit", "quit", "q":
		return "", true
	case "diff":
		if needTask() {
			var b bytes.Buffer
			if err := s.o.Diff(ctx, t, &b); err != nil {
				s.print("diff: " + termtext.Text(err.Error()))
			} else if b.Len() == 0 {
				s.print("no changes yet")
			} else {
				s.print(termtext.Text(strings.TrimRight(b.String(), "\n")))
			}
		}
	case "review":
		if needTask() {
			if rv, err := s.o.Review(ctx, t); err != nil {
				s.print("review: " + termtext.Text(err.Error()))
			} else {
				var b bytes.Buffer
				printReview(&b, rv, 0, colors{})
				printSpeed(&b, t.Tokens, 0)
				s.print(termtext.Text(strings.TrimRight(b.String(), "\n")))
			}
		}
	case "merge", "squash", "keep", "discard":
		if !needTask() {
			break
		}
		if run == nil {
			s.print("send a message first: this session has not claimed the task (use agent " + name + " " + t.ID + " outside the chat)")
			break
		}
		d := orchestrator.Decision(name)
		if d == orchestrator.Discard && args != "yes" {
			if n, unc, err := s.o.UnmergedWork(ctx, t); err == nil && (n > 0 || len(unc) > 0) {
				s.print(fmt.Sprintf("discarding loses %d unmerged commit(s) and %d uncommitted file(s): /discard yes to confirm", n, len(unc)))
				break
			}
		}
		out, err := s.o.Decide(ctx, t, d, true)
		if err != nil {
			s.print(name + ": " + termtext.Text(err.Error()))
			break
		}
		s.print(termtext.Text(out.Message))
		s.mu.Lock()
		s.finished, s.outcome = true, termtext.Text(out.Message)
		s.mu.Unlock()
		return "", true
	case "undo":
		if !needTask() {
			break
		}
		if run == nil {
			s.print("send a message first: undo reverts a commit this session's agent made")
			break
		}
		subject, err := run.Undo(ctx)
		if err != nil {
			s.print("undo: " + termtext.Text(err.Error()))
			break
		}
		s.print("reverted the agent's last commit: " + termtext.Text(subject))
		s.mu.Lock()
		s.note = fmt.Sprintf("(Note: the user reverted your last commit, %q; the workspace no longer has those changes.)", subject)
		s.mu.Unlock()
	case "compact":
		if t == nil || run == nil {
			s.print("nothing to compact yet")
			break
		}
		run.CompactNext()
		s.print(fmt.Sprintf("your next message starts by compacting the conversation (older tool outputs first; it also happens by itself near the %d-token window); the transcript keeps every message", run.ContextTokens()))
	case "plan":
		s.mu.Lock()
		s.planNext = true
		s.mu.Unlock()
		s.print("your next message runs in plan mode: the agent may only read and answers with its plan; the message after it carries the plan out")
	case "stats":
		if needTask() {
			var b strings.Builder
			fmt.Fprintf(&b, "task %s (%s) on %s\n", t.ID, t.State, termtext.Text(t.Branch))
			fmt.Fprintf(&b, "turns: %d · commits: %d · tokens %d in / %d out", 1+len(t.FollowUps), len(t.Commits), t.Tokens.Prompt, t.Tokens.Completion)
			if t.Tokens.Requests > 0 {
				b.WriteString("\n" + speedLine(t.Tokens.Requests, t.Tokens.PromptProcessed, t.Tokens.PromptCached, t.Tokens.AvgFirstTokenMS, t.Tokens.GenTokens, t.Tokens.GenMS, t.Tokens.ServerTimings))
			}
			s.print(b.String())
		}
	case "model":
		model, endpoint := s.cfg.LLM.ServedModel, s.cfg.LLM.URL
		if t != nil {
			model, endpoint = t.Model, t.LLM
		}
		if endpoint == "" {
			endpoint = "the managed llama-server"
		}
		if model == "" {
			model = "the server's"
		}
		s.print(fmt.Sprintf("model %s at %s (another model: leave and run agent continue TASK --model NAME)", termtext.Text(model), termtext.Text(endpoint)))
	default:
		text, err := s.projectCommand(name)
		if err != nil {
			s.print(termtext.Text(err.Error()))
			break
		}
		return strings.ReplaceAll(text, "$ARGUMENTS", args), false
	}
	return "", false
}

// commandsDir is the project's .agent/commands directory: in the task's
// repository, or the one the chat was started for.
func (s *chatSession) commandsDir() string {
	dir := s.opts.Repo
	if s.opts.Task != "" {
		if t, err := s.o.Task(s.opts.Task); err == nil {
			dir = t.Repo
		}
	}
	return filepath.Join(projectDir(context.Background(), dir), ".agent", "commands")
}

// maxCommandBytes bounds a project command template.
const maxCommandBytes = 64 << 10

// projectCommand reads .agent/commands/NAME.md (a regular file, never
// through a symlink, bounded).
func (s *chatSession) projectCommand(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return "", fmt.Errorf("unknown command /%s: /help lists them", name)
	}
	dir := s.commandsDir()
	// Neither .agent nor .agent/commands may be a link: a repository's
	// link would lead the read to a file elsewhere on the host.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("unknown command /%s: /help lists them", name)
		}
	}
	p := filepath.Join(dir, name+".md")
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		return "", fmt.Errorf("unknown command /%s: /help lists them", name)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("unknown command /%s: /help lists them", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCommandBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxCommandBytes {
		return "", fmt.Errorf("command /%s: %s is longer than %d bytes", name, p, maxCommandBytes)
	}
	return string(b), nil
}

func (s *chatSession) projectCommandsHelp() string {
	ents, err := os.ReadDir(s.commandsDir())
	if err != nil {
		return ""
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".md"); ok && e.Type().IsRegular() && !strings.ContainsAny(n, `/\.`) {
			names = append(names, "/"+termtext.Line(n))
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return "\nproject commands (.agent/commands): " + strings.Join(names, " ")
}

func chatRun(ctx context.Context, opts *ChatOptions) error {
	if !opts.Line && opts.IO.CanPrompt() {
		return chatTUI(ctx, opts)
	}
	return chatLines(ctx, opts)
}

// chatLines is the chat without a terminal: a message per line, plain
// event lines, the same commands.
func chatLines(ctx context.Context, opts *ChatOptions) error {
	r := newEventRenderer(opts.IO, false)
	r.showThinking = opts.Run.ShowThinking
	defer r.Close()
	var outMu sync.Mutex
	print := func(s string) {
		outMu.Lock()
		defer outMu.Unlock()
		r.mu.Lock()
		r.line("%s", s)
		r.mu.Unlock()
	}
	s, err := newChatSession(opts, r, print)
	if err != nil {
		return err
	}
	defer s.close(ctx)
	sc := bufio.NewScanner(opts.IO.In)
	sc.Buffer(make([]byte, 64<<10), maxPromptBytes)
	// ask_user reads the next line while a turn runs: the loop below is
	// waiting in s.turn then, so the scanner has one reader at a time.
	s.o.SetUser(&chatUser{ask: func(ctx context.Context, prompt string) (string, bool) {
		print(prompt)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				return line, true
			}
		}
		print("(no answer: end of input)")
		return "", false
	}})
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		msg := line
		if strings.HasPrefix(line, "/") {
			send, quit := s.command(ctx, line)
			if quit {
				return nil
			}
			if send == "" {
				continue
			}
			msg = send
		}
		if err := s.turn(ctx, msg); err != nil {
			if ctx.Err() != nil {
				return ErrCancelled
			}
			print("error: " + termtext.Text(err.Error()))
		}
	}
	return sc.Err()
}
