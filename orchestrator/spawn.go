package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
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
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, err
	}
	pwt, err := o.taskWorktree(repo, t)
	if err != nil {
		return nil, err
	}
	snap, err := repo.SnapshotFiles(ctx, pwt, "Sub-agents start here\n\nAgent-Task: "+t.ID+"\n")
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
	sem := make(chan struct{}, max(s.r.ep.slots, 1))
	var wg sync.WaitGroup
	// Slots are taken in the order the model gave the tasks.
	for i, st := range tasks {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i] = agent.SubResult{Name: st.Name, Summary: "cancelled", IsError: true}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = s.runOne(ctx, repo, pwt, snap, round, st)
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
func (s *spawner) runOne(ctx context.Context, repo *worktree.Repo, pwt *worktree.Worktree, snap, round string, st agent.SubTask) agent.SubResult {
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
	unlock, err := repo.Lock(ctx, o.lockDir())
	if err != nil {
		return fail("%v", err)
	}
	cwt, err := repo.Add(ctx, worktree.AddOptions{Path: child.Worktree, Branch: branch, Start: snap, Reason: "agent sub-task " + id})
	unlock()
	if err != nil {
		return fail("creating the sub-agent's worktree: %v", err)
	}
	keepBranch := true
	defer func() {
		cctx := context.WithoutCancel(ctx)
		_ = repo.Remove(cctx, cwt)
		if !keepBranch {
			if tip, _ := repo.BranchTip(cctx, branch); tip != "" {
				_ = repo.DeleteBranch(cctx, branch, tip)
			}
		}
	}()

	e, err := o.engine(ctx)
	if err != nil {
		return fail("%v", err)
	}
	spec := o.sandboxSpec(child, "agent-sub-"+id)
	// A sub-agent works on the same task under the same allowlist: it
	// shares the task's egress proxy, so its connections are decided by the
	// same policy and logged and counted with the task's.
	spec.EgressDir = s.r.egressDir
	spec.WorkspaceReadOnly = typ.ReadOnly
	var dropHistory func()
	spec.History, dropHistory = o.exportHistory(ctx, repo, t, id, t.StartCommit, snap, s.sink)
	defer dropHistory()
	u, err := sandboxUser(cwt.Path)
	if err != nil {
		return fail("%v", err)
	}
	if u.Chown {
		if err := chownTree(cwt.Path, u); err != nil {
			return fail("%v", err)
		}
	}
	spec.User = u.String()
	sb, err := e.Create(ctx, spec)
	if err != nil {
		return fail("creating the sub-agent's sandbox: %v", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sb.Remove(cctx)
	}()

	opts := s.r.agentOptions(sb, s.sink)
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
		return fail("%v", err)
	}
	ag.ConnectMCP(ctx, o.mcpServersFor(sb, typ))
	res, runErr := ag.Run(ctx, st.Prompt)
	_ = ag.Close()
	stopBackground(ctx, sb, s.sink, t.ID)
	if runErr != nil {
		return fail("the sub-agent stopped: %v (its work is kept on branch %s)", runErr, branch)
	}
	if budget := stopNote(res); budget != "" {
		res.Text = strings.TrimSpace(res.Text + "\n" + budget)
	}
	if typ.ReadOnly || typ.NoMerge {
		// Nothing of a read-only or verifying sub-agent is merged back:
		// it reports, it does not change the parent's files.
		keepBranch = false
		s.event(st.Name, "done", "("+typeName+") changes, if any, discarded")
		return agent.SubResult{Name: st.Name, Summary: strings.TrimSpace(res.Text)}
	}
	tip, err := repo.CommitAll(ctx, cwt, CommitMessage(&store.Task{ID: t.ID, Prompt: st.Prompt, Model: t.Model}, res.Text))
	if err != nil {
		return fail("committing the sub-agent's work: %v", err)
	}
	summary := strings.TrimSpace(res.Text)
	if tip == "" {
		keepBranch = false
		s.event(st.Name, "done", "no changes")
		return agent.SubResult{Name: st.Name, Summary: summary + "\n(no file changes)"}
	}
	s.mu.Lock()
	paths, err := repo.ApplyDiff(ctx, pwt, snap, tip)
	if err == nil {
		err = s.giveToParent(pwt.Path, paths)
	}
	s.mu.Unlock()
	if err != nil {
		return fail("%s\nIts changes could not be applied to your workspace (%v); they are kept on branch %s", summary, err, branch)
	}
	keepBranch = false
	s.event(st.Name, "done", fmt.Sprintf("%d file(s) changed", len(paths)))
	return agent.SubResult{Name: st.Name, Summary: fmt.Sprintf("%s\n(changed: %s)", summary, strings.Join(paths, ", "))}
}

// giveToParent hands files that host git just wrote into the parent's
// worktree to the parent sandbox's user (when running as root they would
// otherwise belong to root, out of the sandbox's reach).
func (s *spawner) giveToParent(root string, paths []string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, ok := parseUser(s.parent.User)
	if !ok || uid == 0 {
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

func parseUser(s string) (uid, gid int, ok bool) {
	u, g, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	return uid, gid, err1 == nil && err2 == nil
}
