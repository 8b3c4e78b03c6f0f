package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/session"
	"github.com/localagent/agent/orchestrator/failpoint"
	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/verdict"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/egress"
	"github.com/localagent/agent/sandbox/toolbox"
)

// ErrInterrupted is returned by Execute when ctx was cancelled: the task is
// recorded as interrupted and can be resumed.
var ErrInterrupted = errors.New("task interrupted")

// preflightSandbox checks what creating the sandbox needs (engine, image,
// toolbox, isolation) so that a missing piece fails before any task state
// exists.
func (o *Orchestrator) preflightSandbox(ctx context.Context, image string, isolation sandbox.Isolation) error {
	if o.opts.ToolboxError != nil {
		return o.opts.ToolboxError
	}
	if o.opts.Sandbox.Toolbox == "" {
		return errors.New("no toolbox binary configured: run `make build` (agent-toolbox next to agent) or set sandbox.toolbox")
	}
	if err := sandbox.CheckToolbox(o.opts.Sandbox.Toolbox); err != nil {
		return err
	}
	e, err := o.engine(ctx)
	if err != nil {
		return err
	}
	if image == "" {
		image = sandbox.DefaultImage
	}
	if isolation == "" {
		isolation = o.opts.Sandbox.Isolation
	}
	// Only an engine knows its runtimes (the in-process test backend has
	// no isolation to offer or refuse).
	if c, ok := e.(interface {
		CheckIsolation(sandbox.Isolation, string) error
	}); ok {
		if isolation, err = sandbox.ParseIsolation(string(isolation)); err != nil {
			return err
		}
		if err := c.CheckIsolation(isolation, o.opts.Sandbox.Runtime); err != nil {
			return err
		}
	}
	return e.ImagePresent(ctx, image)
}

// Execute runs the task: sandbox, agent loop, commit, review state. The
// record is saved at every step. On cancellation the task is left
// interrupted (its worktree keeps every change) and ErrInterrupted is
// returned; on an infrastructure failure it is left failed, with its
// worktree, and can be resumed.
//
// A follow-up of a reviewed task that fails having changed nothing leaves
// the task as it was (see unwindFollowUp).
func (r *Run) Execute(ctx context.Context) error {
	err := r.execute(ctx)
	if err != nil {
		// Here the sandbox is removed: nothing writes the worktree.
		err = r.unwindFollowUp(ctx, err)
	}
	return err
}

func (r *Run) execute(ctx context.Context) error {
	o, t := r.o, r.Task
	_ = r.update(func(t *store.Task) {
		t.State = store.Running
		if t.Started.IsZero() || !r.resume {
			t.Started = time.Now().UTC()
		}
	})

	rec, closeLog := r.recorder()
	defer closeLog()
	sink := event.Tee(o.opts.Sink, rec)

	if r.resume {
		// What a killed run left: its sandboxes (also one created just
		// before the kill, not yet recorded) and its sub-agents' work.
		if err := o.removeStaleSandboxes(ctx, t); err != nil {
			return r.stop(ctx, err)
		}
		r.tally(func(t *store.Task) { t.SandboxID = "" })
		if err := r.recoverSubAgents(ctx, sink); err != nil {
			return r.stop(ctx, err)
		}
		r.markCutShort()
	}

	closeEgress, err := r.startEgress(ctx, sink)
	if err != nil {
		return r.stop(ctx, err)
	}
	// Deferred first, so it runs after the sandbox is removed.
	defer closeEgress()

	sb, err := r.startSandbox(ctx, sink)
	if err != nil {
		return r.stop(ctx, err)
	}
	defer r.runDirtyNote()()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := sb.Remove(cctx); err == nil {
			_ = r.update(func(t *store.Task) { t.SandboxID = "" })
			r.o.dropHistory(t.ID)
		}
	}()
	// However the run ends, its worktree is not left being written.
	defer func() { _ = r.waitFilled() }()

	ag, prompt, err := r.newAgent(sb, sink)
	if err != nil {
		return r.stop(ctx, err)
	}
	ag.ConnectMCP(ctx, o.mcpServers(sb))
	astart := time.Now()
	actx, cancelRun := context.WithCancelCause(ctx)
	stopGuard := o.guardDisk(actx, t.Worktree, sb, cancelRun)
	res, runErr := ag.Run(actx, prompt)
	stopGuard()
	cancelRun(nil)
	_ = ag.Close()
	stopBackground(ctx, sb, sink, t.ID)
	r.tally(func(t *store.Task) {
		t.Timings.Agent += time.Since(astart).Milliseconds()
		t.Result = res.Text
	})
	var bound *DiskError
	if errors.As(context.Cause(actx), &bound) && ctx.Err() == nil {
		runErr = nil
	}
	if runErr != nil {
		return r.stop(ctx, runErr)
	}

	if err := r.waitFilled(); err != nil {
		return r.stop(ctx, err)
	}
	if bound == nil {
		r.runTests(ctx, sb, sink)
	}
	failpoint.Hit("task-before-commit")
	cstart := time.Now()
	derr, err := r.commit(ctx, sb, res)
	if err != nil {
		return r.stop(ctx, err)
	}
	failpoint.Hit("task-committed")
	r.tally(func(t *store.Task) { t.Timings.Commit = time.Since(cstart).Milliseconds() })
	if bound != nil || derr != nil {
		return r.stop(ctx, r.diskStop(bound, derr))
	}
	_ = r.update(func(t *store.Task) {
		t.State, t.FollowUpFrom = store.Review, nil
		t.Finished = time.Now().UTC()
	})
	return nil
}

// stop records why a run ended early.
func (r *Run) stop(ctx context.Context, err error) error {
	// The record is written once the worktree's files are (they are the
	// record's too).
	_ = r.waitFilled()
	r.markCutShort()
	var state store.State
	var why string
	id, wt := r.Task.ID, r.Task.Worktree
	if ctx.Err() != nil {
		state, why = store.Interrupted, "interrupted"
		err = fmt.Errorf("%w: resume it with `agent resume %s`", ErrInterrupted, id)
	} else if llm.IsRetriable(err) {
		// The model server stalled or went away: nothing is wrong with
		// the task, and the same request may work later.
		state, why = store.Interrupted, err.Error()
		err = fmt.Errorf("%w: %v; resume it with `agent resume %s` when the model server answers again", ErrInterrupted, err, id)
	} else {
		state, why = store.Failed, err.Error()
		err = fmt.Errorf("task %s failed: %w (its worktree %s is kept; `agent resume %s` retries, `agent discard %s` removes it)", id, err, wt, id, id)
	}
	serr := r.update(func(t *store.Task) {
		t.Finished = time.Now().UTC()
		t.State, t.Error = state, why
	})
	if serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

// startSandbox creates the task's sandbox (removing a stale one left by a
// killed run) and waits until the first tool call can be served.
func (r *Run) startSandbox(ctx context.Context, sink event.Sink) (*sandbox.Sandbox, error) {
	o, t := r.o, r.Task
	e, err := o.engine(ctx)
	if err != nil {
		return nil, err
	}
	if t.SandboxID != "" {
		_ = e.Remove(ctx, t.SandboxID)
		r.tally(func(t *store.Task) { t.SandboxID = "" })
	}
	if t.Populated && t.WorktreeGit != "" {
		// A kill during the checkout or a commit leaves git's index lock.
		if err := worktree.ClearStaleLock(t.WorktreeGit); err != nil {
			return nil, err
		}
	}
	spec := o.sandboxSpec(t, "agent-task-"+t.ID)
	spec.EgressDir = r.egressDir
	spec.History, _ = o.exportHistory(ctx, nil, t, t.ID, t.StartCommit, "", sink)
	sstart := time.Now()
	// A new worktree is empty: its files are written while the container
	// is created and started (or a warm one takes the worktree) and the
	// toolbox answers, and then, while the model thinks about its first
	// turn, until they are all there. The sandbox is held meanwhile
	// (sandbox.Hold): nothing runs in it, so no process ever sees a partial
	// tree; the first tool call waits only if the files are not all
	// written yet. The sandbox user is chosen here (and the files handed
	// to it after the checkout) so that Create does not walk a
	// half-written tree.
	var fill chan struct{}
	spec.Labels = withLabel(spec.Labels, sandbox.LabelUse, useTask)
	var warm *sandbox.Sandbox
	if !t.Populated {
		u, err := sandboxUser(t.Worktree)
		if err != nil {
			return nil, err
		}
		spec.User = u.String()
		if u.Chown {
			sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Task: t.ID,
				Text: fmt.Sprintf("running as root: the sandbox runs as unprivileged %s and the worktree %s is handed to it", u, t.Worktree)})
		}
		// A warm sandbox takes the worktree while it is still empty.
		warm = o.claimWarm(ctx, spec)
		fill = make(chan struct{})
		r.filled = fill
		go func() {
			defer close(fill)
			if fillHook != nil {
				fillHook()
			}
			err := o.populate(ctx, t, u)
			// Saved before the sandbox may run anything: a resume must
			// never write the files again over the agent's work.
			serr := r.update(func(t *store.Task) {
				r.fillErr = err
				if err == nil {
					t.Populated = true
					t.Timings.Worktree += time.Since(sstart).Milliseconds()
					t.Timings.Ready = max(t.Timings.Ready, time.Since(r.begin).Milliseconds())
				}
			})
			if err == nil && serr != nil {
				// Not recorded: the hold stays shut (fail closed).
				r.tally(func(*store.Task) { r.fillErr = fmt.Errorf("recording the filled worktree: %w", serr) })
			}
		}()
	}
	sb := warm
	if sb == nil {
		sb, err = o.createSandbox(ctx, e, spec)
	}
	if err != nil {
		// A failed start leaves no checkout running behind it.
		if ferr := r.waitFilled(); ferr != nil {
			return nil, ferr
		}
		return nil, fmt.Errorf("creating the sandbox: %w", err)
	}
	failpoint.Hit("task-sandbox-created")
	if fill != nil && !o.opts.Unsafe.NoHold {
		sb.Hold(fill, r.fillError)
	}
	err = r.update(func(t *store.Task) {
		t.SandboxID = sb.ID
		t.SandboxNote = sb.Notice
	})
	if err != nil {
		_ = sb.Remove(context.WithoutCancel(ctx))
		_ = r.waitFilled()
		return nil, err
	}
	if sb.Notice != "" {
		sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Task: t.ID, Text: sb.Notice})
	}
	// The first tool call is ready when the toolbox answers a ping and
	// the files are all there.
	if _, err := sb.Tool(ctx, toolbox.OpPing, nil); err != nil {
		_ = sb.Remove(context.WithoutCancel(ctx))
		_ = r.waitFilled()
		return nil, fmt.Errorf("sandbox toolbox: %w", err)
	}
	r.tally(func(t *store.Task) {
		t.Timings.Sandbox = time.Since(sstart).Milliseconds()
		t.Timings.Ready = max(t.Timings.Ready, time.Since(r.begin).Milliseconds())
	})
	note := ""
	if !r.isFilled() {
		note = "; the worktree's files are still being written, the first tool call waits for them"
	}
	from := ""
	if warm != nil {
		from = ", warm pool"
	}
	image := spec.Image
	if t.Environment != nil && t.Environment.Base != "" {
		image = fmt.Sprintf("%s image, built on %s from %s", spec.Image, t.Environment.Base, t.Environment.Source)
	} else {
		image += " image"
	}
	sink.Emit(event.Event{Time: time.Now(), Kind: event.Progress, Task: t.ID, State: "ready",
		Text: fmt.Sprintf("sandbox %s ready (%s%s) in %d ms%s", short(sb.ID), image, from, time.Since(r.begin).Milliseconds(), note)})
	o.refillWarm()
	return sb, nil
}

// fillHook, when set (by tests), runs before a new worktree's files are
// written.
var fillHook func()

// waitFilled waits until the run's new worktree has all its files (at
// once when it had them already) and returns the error of writing them.
// Host steps on the worktree (a commit, a sub-agent's snapshot) and the end
// of the run wait for it: a partial tree would read as deleted files.
func (r *Run) waitFilled() error {
	if r.filled == nil {
		return nil
	}
	<-r.filled
	return r.fillError()
}

func (r *Run) fillError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fillErr
}

// isFilled reports whether the worktree's files are all written.
func (r *Run) isFilled() bool {
	if r.filled == nil {
		return true
	}
	select {
	case <-r.filled:
		return true
	default:
		return false
	}
}

// startEgress starts the run's egress proxy when the policy allows any
// host. The sandbox's network mode stays none either way: the proxy, reached
// over a unix socket mounted into the container, is its only way out, and
// every connection it allows or denies is logged (and counted in the
// task record by the recorder).
func (r *Run) startEgress(ctx context.Context, sink event.Sink) (func(), error) {
	o, t := r.o, r.Task
	pol := o.opts.Egress
	if pol.Empty() {
		r.tally(func(t *store.Task) { t.Network = store.Network{} })
		return func() {}, nil
	}
	var allow []string
	for _, rule := range pol.Rules() {
		allow = append(allow, rule.Raw)
	}
	logPath := o.egressLogPath(t.ID)
	r.tally(func(t *store.Task) { t.Network = store.Network{Allow: allow, EgressLog: logPath} })
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	px, err := egress.Start(ctx, egress.Config{
		Dir: o.egressDir(t.ID), LogPath: logPath, Task: t.ID, Policy: pol,
		OnRecord: func(rec egress.Record) {
			sink.Emit(event.Event{Time: rec.Time, Kind: event.Egress, Task: t.ID, Text: rec.Target(), Allowed: rec.Allowed})
		},
	})
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	r.egressDir = px.Dir()
	sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Task: t.ID,
		Text: "network: only through the egress proxy, to " + pol.String()})
	return func() { _ = px.Close() }, nil
}

// sandboxSpec is the spec of a sandbox over t's worktree, named
// name plus a suffix that keeps a re-created one from clashing with a
// container that is still being removed.
func (o *Orchestrator) sandboxSpec(t *store.Task, name string) sandbox.Spec {
	spec := o.opts.Sandbox
	spec.Workspace = t.Worktree
	spec.Task = t.ID
	spec.StateID = o.stateID
	if t.Image != "" {
		spec.Image = t.Image
	}
	if t.Isolation != "" && sandbox.Isolation(t.Isolation) != spec.Isolation {
		// The task keeps the isolation it started with; a configured
		// runtime name belongs to the configured isolation, not this one.
		spec.Isolation = sandbox.Isolation(t.Isolation)
		spec.Runtime = ""
	}
	applyEnvironment(&spec, t.Environment)
	if t.GPUs != "" {
		if g, err := llamaserver.ParseGPUs(t.GPUs); err == nil {
			spec.DeviceRequests = llamaserver.DeviceRequests(g, false)
		}
	}
	spec.Name = name + "-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
	return spec
}

// agentOptions are what every agent of the run shares, the task's own and
// its sub-agents: the model endpoint, the settings of the orchestrator,
// and a workspace that is the given sandbox.
func (r *Run) agentOptions(sb *sandbox.Sandbox, sink event.Sink) agent.Options {
	o := r.o
	return agent.Options{
		// The task's own loop keeps its slot; sub-agents get their own
		// (spawner).
		Slot:          r.ep.slot(r.mainSlot()),
		Client:        r.ep.client,
		Workspace:     sandboxWorkspace{sb: sb},
		Model:         modelParam(r.ep),
		MaxIterations: o.opts.MaxIterations,
		ContextTokens: r.ep.ctxTokens,
		Hooks:         o.opts.Hooks,
		ToolMode:      o.opts.ToolMode,
		Sink:          sink,
		Task:          r.Task.ID,
		Memory:        o.memoryFor(r.Task),
		User:          o.opts.User,
		PlanMode:      r.Plan,
	}
}

// newAgent builds the agent loop for the run; on resume it continues the
// transcript (with an empty prompt when the transcript already holds it).
func (r *Run) newAgent(sb *sandbox.Sandbox, sink event.Sink) (*agent.Agent, string, error) {
	o, t := r.o, r.Task
	for _, d := range []string{filepath.Dir(t.Session), o.artifactDir(t.ID)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, "", err
		}
	}
	resume := false
	prompt := t.Prompt
	if fi, err := os.Lstat(t.Session); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		// A kill right after the transcript was created: it holds nothing,
		// and a new one is written in its place.
		if err := os.Remove(t.Session); err != nil {
			return nil, "", err
		}
	}
	if r.followUp != "" {
		// The whole earlier conversation, then the new message.
		prompt = r.followUp
		if _, _, err := session.Load(t.Session); err == nil {
			resume = true
		}
	} else if r.resume {
		if _, msgs, err := session.Load(t.Session); err == nil {
			resume = true
			for _, m := range msgs {
				if m.Role == llm.RoleUser {
					prompt = ""
					break
				}
			}
		}
	}
	opts := r.agentOptions(sb, sink)
	if o.opts.SubAgents {
		opts.Spawner = &spawner{r: r, parent: sb, sink: sink}
	}
	opts.SessionPath, opts.Resume = t.Session, resume
	opts.CompactFirst, r.compactNext = r.compactNext && resume, false
	opts.ArtifactDir = o.artifactDir(t.ID)
	opts.Env = agent.Environment{Offline: r.egressDir == "", Branch: t.Branch, BaseCommit: t.StartCommit}
	ag, err := agent.New(opts)
	if err != nil {
		return nil, "", err
	}
	if resume {
		sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Task: t.ID, Text: "resuming the task in its worktree " + t.Worktree})
	}
	return ag, prompt, nil
}

// modelParam is the model name sent with requests: what the user asked
// for, else nothing (the server's own).
func modelParam(ep *endpoint) string {
	if ep.scripted {
		return ""
	}
	return ep.model
}

// commit commits everything the agent left in the worktree, with the
// sandbox frozen (see whileFrozen) and never more than the disk bound (see
// commitBounded): a *DiskError says what was left out.
func (r *Run) commit(ctx context.Context, sb *sandbox.Sandbox, res agent.Result) (*DiskError, error) {
	o, t := r.o, r.Task
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, err
	}
	wt, err := o.taskWorktree(repo, t)
	if err != nil {
		return nil, err
	}
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := worktree.ClearStaleLock(wt.GitDir); err != nil {
		return nil, err
	}
	msg := CommitMessage(t, res.Text)
	if r.followUp != "" {
		msg = FollowUpCommitMessage(t, r.followUp, res.Text)
	}
	var (
		id   string
		derr *DiskError
	)
	// One freeze covers the commit and the scan for ignored files: both
	// are host git on the worktree (commitBounded's own freeze nests).
	err = o.whileFrozen(ctx, wt.Path, []*sandbox.Sandbox{sb}, func() (err error) {
		if id, derr, err = o.commitBounded(ctx, repo, wt, []*sandbox.Sandbox{sb}, msg); err != nil {
			return err
		}
		// Changes inside submodules are committed in the submodules'
		// own repositories (the task's commit holds only their gitlinks)
		// and named in the review; else they would go with the worktree.
		// Host git reads the worktree there, so the sandbox is frozen as
		// for the task's own commit.
		var subs []worktree.SubmoduleCommit
		if err := o.whileFrozen(ctx, wt.Path, []*sandbox.Sandbox{sb}, func() (err error) {
			subs, err = repo.CommitSubmodules(ctx, wt, t.StartCommit, t.Branch, msg)
			return err
		}); err != nil {
			return err
		}
		if len(subs) > 0 {
			r.tally(func(t *store.Task) {
				t.Submodules = t.Submodules[:0]
				for _, s := range subs {
					t.Submodules = append(t.Submodules, store.SubmoduleCommit(s))
				}
			})
		}
		// Files .gitignore keeps out of the commit are named in the review:
		// they go with the worktree.
		if ign, err := repo.IgnoredFiles(ctx, wt); err == nil {
			r.tally(func(t *store.Task) {
				t.IgnoredCount = len(ign)
				t.Ignored = ign[:min(len(ign), store.MaxIgnored)]
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if id != "" {
		r.tally(func(t *store.Task) { t.Commits = append(t.Commits, id) })
	}
	return derr, nil
}

// CommitMessage is the message of a task's commit: the task's first line
// as the subject, the whole task and the agent's summary as the body, and
// trailers naming the task and the model.
func CommitMessage(t *store.Task, summary string) string {
	var b strings.Builder
	b.WriteString(subjectLine(t.Prompt, 72, 40) + "\n\n")
	if strings.Contains(t.Prompt, "\n") || len(t.Prompt) > 72 {
		b.WriteString("Task:\n" + t.Prompt + "\n\n")
	}
	if s := strings.TrimSpace(summary); s != "" {
		b.WriteString("Agent summary:\n" + cutRunes(s, 2000) + "\n\n")
	}
	b.WriteString("Agent-Task: " + t.ID + "\n")
	b.WriteString("Agent-Model: " + t.Model + "\n")
	return b.String()
}

// subjectLine is the first line of a prompt as a commit subject of at
// most max runes: a longer one is cut at a word boundary after minCut
// bytes where there is one, and marked with "...".
func subjectLine(prompt string, max, minCut int) string {
	subject, _, _ := strings.Cut(prompt, "\n")
	subject = strings.TrimSpace(subject)
	if len([]rune(subject)) <= max {
		return subject
	}
	cut := cutRunes(subject, max-3)
	if i := strings.LastIndex(cut, " "); i > minCut {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,;:") + "..."
}

func cutRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}

// recorder keeps the task record in step with the agent's events (commands
// run, tokens, egress) and appends every event to the task's event log.
// Events come from any goroutine of the run (the agent loop, sub-agents,
// the egress proxy): the log has a lock of its own, and the record changes
// only through the run's (Run.update, Run.tally).
func (r *Run) recorder() (event.Sink, func()) {
	id, events := r.Task.ID, r.Task.Events
	var mu sync.Mutex // guards logf, batch and pending
	var logf *os.File
	if err := os.MkdirAll(filepath.Dir(events), 0o700); err == nil {
		logf, _ = os.OpenFile(events, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	}
	pending := map[string]string{} // agent NUL call id -> command
	var batch deltaBatch
	sink := event.SinkFunc(func(e event.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		if e.Task == "" {
			e.Task = id
		}
		if logf != nil {
			// Deltas are joined into larger events (agent log -f shows them).
			for _, le := range batch.add(e) {
				if b, err := json.Marshal(le); err == nil {
					_, _ = logf.Write(append(b, '\n'))
				}
			}
		}
		switch e.Kind {
		case event.ToolStarted:
			if e.Tool == toolbox.ToolBash || e.Tool == toolbox.ToolProcessStart {
				var a toolbox.BashArgs
				_ = json.Unmarshal([]byte(e.Args), &a)
				if a.Command == "" {
					a.Command = e.Args
				}
				if e.Tool == toolbox.ToolProcessStart {
					a.Command = "[background] " + a.Command
				}
				if e.Agent != "" {
					// A sub-agent's command, marked as such.
					a.Command = "[" + e.Agent + "] " + a.Command
				}
				pending[e.Agent+"\x00"+e.CallID] = a.Command
				// Recorded as running before it runs: a kill now leaves
				// it in the record, marked cut short on resume.
				r.change(func(t *store.Task) bool {
					if len(t.Commands) >= store.MaxCommands {
						return false
					}
					t.Commands = append(t.Commands, store.Command{Command: a.Command, Running: true})
					return true
				})
			}
			if e.Tool == agent.ToolAskUser {
				pending[e.Agent+"\x00"+e.CallID] = askPrefix + askQuestion(e.Args)
			}
		case event.ToolFinished:
			key := e.Agent + "\x00" + e.CallID
			if cmd, ok := pending[key]; ok {
				delete(pending, key)
				if cmd, ok = askRecord(cmd, e.Text); !ok {
					break
				}
				done := store.Command{
					Command: cmd, ExitCode: e.ExitCode, TimedOut: e.TimedOut, OOMKilled: e.OOMKill,
					DurationMS: e.Duration.Milliseconds(), Missing: missingProgram(e),
				}
				if verdict.IsTestCommand(cmd) {
					done.OutputTail = tailBytes(e.OutputTail, store.MaxOutputTail)
				}
				_ = r.update(func(t *store.Task) {
					for i := len(t.Commands) - 1; i >= 0; i-- {
						if t.Commands[i].Running && t.Commands[i].Command == cmd {
							t.Commands[i] = done
							return
						}
					}
					if len(t.Commands) < store.MaxCommands {
						t.Commands = append(t.Commands, done)
					}
				})
			}
		case event.Egress:
			r.tally(func(t *store.Task) {
				if e.Allowed {
					t.Network.Allowed++
				} else {
					t.Network.Denied++
				}
			})
		case event.Usage:
			r.tally(func(t *store.Task) {
				t.Tokens.Prompt += e.PromptTokens
				t.Tokens.Completion += e.CompletionTokens
				addSpeed(&t.Tokens, e.Speed)
				if e.Speed != nil && e.Speed.Server && len(t.Tokens.Turns) < store.MaxTurns {
					t.Tokens.Turns = append(t.Tokens.Turns, store.TurnTokens{
						Agent: e.Agent, Slot: e.Slot, Prompt: e.PromptTokens, Processed: e.Speed.PromptProcessed, Cached: e.Speed.PromptCached,
					})
				}
			})
		}
	})
	return sink, func() {
		mu.Lock()
		defer mu.Unlock()
		if logf != nil {
			for _, le := range batch.flush() {
				if b, err := json.Marshal(le); err == nil {
					_, _ = logf.Write(append(b, '\n'))
				}
			}
			_ = logf.Close()
			logf = nil
		}
	}
}

// sandboxUser picks the sandbox's uid:gid for a worktree.
func sandboxUser(dir string) (sandbox.UserChoice, error) {
	u, err := sandbox.WorkspaceUser(dir)
	if err != nil {
		return u, fmt.Errorf("task worktree: %w", err)
	}
	return u, nil
}

// populate checks out a new task worktree and, when the sandbox runs as
// another uid, hands the files to it (Lchown: never through a symlink).
func (o *Orchestrator) populate(ctx context.Context, t *store.Task, u sandbox.UserChoice) error {
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return err
	}
	wt, err := o.taskWorktree(repo, t)
	if err != nil {
		return err
	}
	return o.populateFast(ctx, repo, wt, t, u)
}
