package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/localagent/agent/orchestrator/failpoint"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/hostfs"
)

// spawner runs the sub-agents of one task run (the spawn_agents tool).
// Each sub-agent gets its own branch and worktree, started from a snapshot
// of the parent's files, and its own hardened sandbox; at most as many run
// at once as the model server has slots. When one finishes, its work is
// committed on its branch and applied to the parent's files; its worktree,
// sandbox and (once applied) branch are removed. Sub-agents cannot spawn
// sub-agents of their own.
type spawner struct {
	r      *Run
	parent *sandbox.Sandbox
	sink   event.Sink
	seq    int
	mu     sync.Mutex // serialises applying children's work to the parent
}

var _ agent.Spawner = (*spawner)(nil)

// Spawn runs tasks and returns one result per task, in order.
func (s *spawner) Spawn(ctx context.Context, tasks []agent.SubTask) ([]agent.SubResult, error) {
	o, t := s.r.o, s.r.Task
	// The snapshot below is of the parent's whole tree.
	if err := s.r.waitFilled(); err != nil {
		return nil, err
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, err
	}
	pwt, err := o.taskWorktree(repo, t)
	if err != nil {
		return nil, err
	}
	var snap string
	s.mu.Lock()
	err = o.whileFrozen(ctx, pwt.Path, []*sandbox.Sandbox{s.parent}, func() (err error) {
		snap, err = repo.SnapshotFiles(ctx, pwt, "Sub-agents start here\n\nAgent-Task: "+t.ID+"\n")
		return err
	})
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// A round tag unique across runs: a resumed task starts counting again
	// while branches of failed sub-agents from before are kept.
	var rb [2]byte
	_, _ = rand.Read(rb[:])
	s.seq++
	round := strconv.Itoa(s.seq) + hex.EncodeToString(rb[:])
	results := make([]agent.SubResult, len(tasks))
	// Each running sub-agent holds one of the server's slots and is pinned
	// to it, so its turns re-use its own cached prompt. The parent's slot
	// is handed out last: the parent waits in this call, and its cache is
	// worth keeping for when the sub-agents are done.
	main := s.r.mainSlot()
	pool := newSlotPool(s.r.ep.slots, main)
	// The parent's slot goes to a sub-agent only when all others are
	// taken; its prompt cache is saved first (when the server keeps slot
	// files) and restored when the sub-agents are done, so the parent's
	// next turn does not process its whole conversation again.
	savedParent := false
	defer func() {
		if savedParent {
			s.parentSlot(context.WithoutCancel(ctx), llm.SlotRestore)
		}
	}()
	var wg sync.WaitGroup
	// Slots are taken in the order the model gave the tasks.
	for i, st := range tasks {
		slot, err := pool.take(ctx, func(busy int) {
			s.event(st.Name, "queued", fmt.Sprintf("waiting for a free model slot (all %d busy)", busy))
		})
		if err != nil {
			results[i] = agent.SubResult{Name: st.Name, Summary: "cancelled", IsError: true}
			continue
		}
		if slot == main && !savedParent {
			savedParent = s.parentSlot(ctx, llm.SlotSave)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pool.give(slot)
			results[i] = s.runOne(ctx, repo, pwt, snap, round, st, slot)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return results, ctx.Err()
	}
	return results, nil
}

func (s *spawner) event(name, state, text string) {
	s.sink.Emit(event.Event{Time: time.Now(), Kind: event.SubAgent, Task: s.r.Task.ID, Agent: name, State: state, Text: text})
}

// runOne runs one sub-agent to the end and brings its work back.
func (s *spawner) runOne(ctx context.Context, repo *worktree.Repo, pwt *worktree.Worktree, snap, round string, st agent.SubTask, slot int) agent.SubResult {
	o, t := s.r.o, s.r.Task
	fail := func(format string, a ...any) agent.SubResult {
		msg := fmt.Sprintf(format, a...)
		s.event(st.Name, "failed", msg)
		return agent.SubResult{Name: st.Name, Summary: msg, IsError: true}
	}
	typeName, typ, err := o.agentType(st.Type)
	if err != nil {
		return fail("%v", err)
	}
	s.event(st.Name, "started", "("+typeName+") "+st.Prompt)
	id := t.ID + "-" + round + "-" + st.Name
	branch := t.Branch + "-sub-" + round + "-" + st.Name
	// The sub-agent's sandbox belongs to the task (its label) but works on
	// the sub-agent's own worktree.
	child := &store.Task{ID: t.ID, Worktree: o.worktreePath(id), Image: t.Image, Environment: t.Environment}
	// Journal first: after a kill, resume finds the sub-agent's worktree
	// and branch through the parent's record.
	s.r.journalSub(store.SubAgent{Name: st.Name, ID: id, Prompt: st.Prompt, Branch: branch, Worktree: child.Worktree, Start: snap, State: store.SubRunning, Unfilled: true})
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		s.r.finishSub(id, store.SubEmpty, "")
		return fail("%v", err)
	}
	// Created without its files, which come as a task's do: from a spare
	// checkout (of the parent's start, brought to the snapshot), or from a
	// parallel checkout.
	cwt, err := repo.Add(ctx, worktree.AddOptions{Path: child.Worktree, Branch: branch, Start: snap, Reason: "agent sub-task " + id, NoCheckout: true})
	unlock()
	if err != nil {
		s.r.finishSub(id, store.SubEmpty, "")
		return fail("creating the sub-agent's worktree: %v", err)
	}
	failpoint.Hit("sub-worktree-added")
	s.r.updateSub(id, func(sa *store.SubAgent) { sa.WorktreeGit = cwt.GitDir })
	u, err := sandboxUser(cwt.Path)
	if err == nil {
		err = s.fill(ctx, repo, cwt, u)
	}
	if err != nil {
		// A worktree without all its files holds no work: removed with its
		// branch, never committed (its missing files are no deletion).
		s.r.dropUnfilled(ctx, repo, cwt, id, branch, snap)
		return fail("populating the sub-agent's worktree: %v", err)
	}
	failpoint.Hit("sub-worktree-filled")
	s.r.updateSub(id, func(sa *store.SubAgent) { sa.Unfilled = false })

	// Whatever happens from here on, the sub-agent's files are committed
	// on its branch once its sandbox is gone, before its worktree is
	// removed (bring).
	var sb *sandbox.Sandbox
	removeSandbox := func() {
		if sb == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := sb.Remove(cctx); err == nil {
			sb = nil
		}
	}
	stopped := func(format string, a ...any) agent.SubResult {
		removeSandbox()
		msg := fmt.Sprintf(format, a...)
		if sb != nil {
			// Its processes may still run: leave its files alone.
			return fail("%s (its sandbox could not be removed; its worktree %s is kept and `agent resume %s` commits it)", msg, cwt.Path, t.ID)
		}
		_, note := s.keep(ctx, repo, cwt, id, branch, snap, CommitMessage(&store.Task{ID: t.ID, Prompt: st.Prompt, Model: t.Model}, msg), true)
		return fail("%s (%s)", msg, note)
	}

	e, err := o.engine(ctx)
	if err != nil {
		return stopped("%v", err)
	}
	spec := o.sandboxSpec(child, "agent-sub-"+id)
	spec.Labels = withLabel(spec.Labels, sandbox.LabelUse, useSub)
	// A sub-agent works on the same task under the same allowlist: it
	// shares the task's egress proxy, so its connections are decided by the
	// same policy and logged and counted with the task's.
	spec.EgressDir = s.r.egressDir
	spec.WorkspaceReadOnly = typ.ReadOnly
	var dropHistory func()
	spec.History, dropHistory = o.exportHistory(ctx, repo, t, id, t.StartCommit, snap, s.sink)
	defer dropHistory()
	spec.User = u.String()
	if sb = o.claimWarm(ctx, spec); sb == nil {
		sb, err = o.createSandbox(ctx, e, spec)
	}
	o.refillWarm()
	if err != nil {
		sb = nil
		return stopped("creating the sub-agent's sandbox: %v", err)
	}
	defer removeSandbox()

	opts := s.r.agentOptions(sb, s.sink)
	opts.Slot = s.r.ep.slot(slot)
	opts.Name = st.Name
	opts.AllowedTools = typ.Tools
	// Sub-agents run side by side: they neither ask the user nor plan.
	opts.User, opts.PlanMode = nil, false
	if typ.MaxTurns > 0 {
		opts.MaxIterations = typ.MaxTurns
	}
	opts.SessionPath = filepath.Join(filepath.Dir(t.Session), id+".jsonl")
	opts.ArtifactDir = o.artifactDir(id)
	opts.Env = agent.Environment{Offline: s.r.egressDir == "", Branch: branch, BaseCommit: snap}
	ag, err := agent.New(opts)
	if err != nil {
		return stopped("%v", err)
	}
	ag.ConnectMCP(ctx, o.mcpServersFor(sb, typ))
	actx, cancelRun := context.WithCancelCause(ctx)
	stopGuard := o.guardDisk(actx, cwt.Path, sb, cancelRun)
	res, runErr := ag.Run(actx, st.Prompt)
	stopGuard()
	cancelRun(nil)
	_ = ag.Close()
	// Background processes end before any host step on the worktree.
	stopBackground(ctx, sb, s.sink, t.ID)
	var bound *DiskError
	if errors.As(context.Cause(actx), &bound) && ctx.Err() == nil {
		// Keep what it did before crossing the bound on its branch (keep
		// commits no more than the bound).
		return stopped("the sub-agent was stopped: %v", bound)
	}
	if runErr != nil {
		return stopped("the sub-agent stopped: %v", runErr)
	}
	if budget := stopNote(res); budget != "" {
		res.Text = strings.TrimSpace(res.Text + "\n" + budget)
	}
	removeSandbox()
	if sb != nil {
		return fail("the sub-agent's sandbox could not be removed; its worktree %s is kept and `agent resume %s` commits it", cwt.Path, t.ID)
	}
	if typ.ReadOnly || typ.NoMerge {
		// Nothing of a read-only or verifying sub-agent is merged back:
		// it reports, it does not change the parent's files.
		cctx := context.WithoutCancel(ctx)
		_ = repo.Remove(cctx, cwt)
		if tip, _ := repo.BranchTip(cctx, branch); tip != "" {
			_ = repo.DeleteBranch(cctx, branch, tip)
		}
		s.r.finishSub(id, store.SubEmpty, "")
		s.event(st.Name, "done", "("+typeName+") changes, if any, discarded")
		return agent.SubResult{Name: st.Name, Summary: strings.TrimSpace(res.Text)}
	}
	summary := strings.TrimSpace(res.Text)
	s.mu.Lock()
	paths, note, err := s.bring(ctx, repo, pwt, cwt, id, branch, snap, CommitMessage(&store.Task{ID: t.ID, Prompt: st.Prompt, Model: t.Model}, res.Text))
	s.mu.Unlock()
	if err != nil {
		return fail("%s\n%s", summary, note)
	}
	if len(paths) == 0 {
		s.event(st.Name, "done", "no changes")
		return agent.SubResult{Name: st.Name, Summary: summary + "\n(no file changes)"}
	}
	s.event(st.Name, "done", fmt.Sprintf("%d file(s) changed", len(paths)))
	return agent.SubResult{Name: st.Name, Summary: fmt.Sprintf("%s\n(changed: %s)", summary, strings.Join(paths, ", "))}
}

// fill writes a sub-agent's new worktree, owned by u: as a task's
// (fillWorktree), without the extras a task's gets (the snapshot it starts
// from holds what the sub-agent is to see).
func (s *spawner) fill(ctx context.Context, repo *worktree.Repo, cwt *worktree.Worktree, u sandbox.UserChoice) error {
	fromSpare, err := s.r.o.fillWorktree(ctx, repo, cwt, u)
	if err != nil || fromSpare || !u.Chown {
		return err
	}
	return sandbox.HandOver(cwt.Path, u)
}

// keep commits a stopped sub-agent's files on its branch (its sandbox is
// gone) and removes its worktree once nothing in it is uncommitted; the
// branch stays when it holds work. It returns the branch tip and a note for
// the model and the user. final records the sub-agent as kept; otherwise
// the caller goes on to apply the work and records the outcome (until
// then, a kill leaves it running, for resume to finish).
func (s *spawner) keep(ctx context.Context, repo *worktree.Repo, cwt *worktree.Worktree, id, branch, snap, msg string, final bool) (string, string) {
	cctx := context.WithoutCancel(ctx)
	if err := worktree.ClearStaleLock(cwt.GitDir); err != nil {
		s.r.updateSub(id, func(sa *store.SubAgent) { sa.Note = err.Error() })
		return "", fmt.Sprintf("its worktree %s is kept: %v", cwt.Path, err)
	}
	// Its own sandbox is gone; commitBounded still freezes any other
	// sandbox over the worktree and commits no more than the disk bound.
	_, derr, err := s.r.o.commitBounded(cctx, repo, cwt, nil, msg)
	if err != nil {
		s.r.updateSub(id, func(sa *store.SubAgent) { sa.Note = err.Error() })
		return "", fmt.Sprintf("committing its work failed (%v); its worktree %s is kept and `agent resume %s` tries again", err, cwt.Path, s.r.Task.ID)
	}
	tip, _ := repo.BranchTip(cctx, branch)
	if ch, err := repo.Changes(cctx, cwt); err == nil && len(ch) == 0 {
		_ = repo.Remove(cctx, cwt)
	}
	if tip == "" || tip == snap {
		if tip != "" {
			_ = repo.DeleteBranch(cctx, branch, tip)
		}
		s.r.finishSub(id, store.SubEmpty, "")
		return "", "it changed no files"
	}
	note := "its work is committed on branch " + branch
	if derr != nil {
		note += fmt.Sprintf(" (%v)", derr)
	}
	if final {
		s.r.finishSub(id, store.SubKept, note)
	}
	return tip, note
}

// bring commits a finished sub-agent's work on its branch and applies it
// to the parent's files; the branch is deleted once its work is in the
// parent's worktree, kept (and named in the review) when it cannot be
// applied.
func (s *spawner) bring(ctx context.Context, repo *worktree.Repo, pwt, cwt *worktree.Worktree, id, branch, snap, msg string) ([]string, string, error) {
	tip, note := s.keep(ctx, repo, cwt, id, branch, snap, msg, false)
	if tip == "" {
		return nil, note, nil
	}
	cctx := context.WithoutCancel(ctx)
	// The parent's files are written and handed over while no process of
	// the parent's sandbox (or any other over its worktree) can run.
	var parents []*sandbox.Sandbox
	if s.parent != nil {
		parents = append(parents, s.parent)
	}
	var paths []string
	err := s.r.o.whileFrozen(cctx, pwt.Path, parents, func() (err error) {
		if paths, err = repo.ApplyDiff(cctx, pwt, snap, tip); err != nil {
			return err
		}
		return s.giveToParent(pwt.Path, paths)
	})
	if err != nil {
		note := fmt.Sprintf("Its changes could not be applied to your workspace (%v); they are kept on branch %s", err, branch)
		s.r.finishSub(id, store.SubKept, note)
		return nil, note, err
	}
	failpoint.Hit("sub-applied")
	_ = repo.DeleteBranch(cctx, branch, tip)
	s.r.finishSub(id, store.SubDone, "")
	return paths, "", nil
}

// giveToParent hands files that host git just wrote into the parent's
// worktree to the parent sandbox's user (when running as root they would
// otherwise belong to root, out of the sandbox's reach): each file and the
// directories above it, never following a symlink in any component.
func (s *spawner) giveToParent(root string, paths []string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	user := ""
	if s.parent != nil {
		user = s.parent.User
	} else if u, err := sandboxUser(root); err == nil && u.Chown {
		// Recovering after a kill: the parent's sandbox does not exist yet.
		user = u.String()
	}
	u, err := sandbox.ParseUser(user)
	if err != nil || u.UID == 0 {
		return nil
	}
	uid, gid := u.UID, u.GID
	if !s.r.o.opts.Unsafe.FollowSymlinks {
		for _, p := range paths {
			if err := hostfs.LchownChain(root, p, uid, gid); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range paths {
		for d := filepath.Join(root, p); strings.HasPrefix(d, root+string(filepath.Separator)); d = filepath.Dir(d) {
			if err := os.Lchown(d, uid, gid); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}

// slotPool hands out the model server's slots to sub-agents, the parent's
// own slot (main) last.
type slotPool struct {
	n    int
	free chan int
}

func newSlotPool(slots, main int) *slotPool {
	n := max(slots, 1)
	p := &slotPool{n: n, free: make(chan int, n)}
	for id := 0; id < n; id++ {
		if id != main {
			p.free <- id
		}
	}
	p.free <- main % n
	return p
}

// take returns a free slot, calling queued (once) first when it has to
// wait for one.
func (p *slotPool) take(ctx context.Context, queued func(busy int)) (int, error) {
	select {
	case id := <-p.free:
		return id, nil
	default:
	}
	queued(p.n)
	select {
	case id := <-p.free:
		return id, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (p *slotPool) give(id int) { p.free <- id }

// parentSlot saves or restores the parent agent's slot cache; it reports
// whether that worked. A server that keeps no slot files answers with an
// error, and the parent's prompt is then processed again: slower, not
// wrong.
func (s *spawner) parentSlot(ctx context.Context, action llm.SlotAction) bool {
	ep := s.r.ep
	if !ep.pin || ep.client == nil {
		return false
	}
	n, err := ep.client.SlotFile(ctx, s.r.mainSlot(), action, "agent-task-"+s.r.Task.ID+".slot")
	if err != nil {
		return false
	}
	verb := map[llm.SlotAction]string{llm.SlotSave: "saved", llm.SlotRestore: "restored"}[action]
	s.sink.Emit(event.Event{Time: time.Now(), Kind: event.Progress, Task: s.r.Task.ID,
		Text: fmt.Sprintf("%s the task's prompt cache (%d tokens) around the sub-agents", verb, n)})
	return true
}
