package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

// A pool member claimed by another process for a worktree is among "the
// sandboxes over this worktree" that a host step freezes: its container
// labels still name its old slot, and only the claim journal says where
// it works now. Control: a lookup without the journal misses it, and the
// host step would run while it can write the worktree.
func TestWhileFrozenSeesClaimedPoolMember(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ctx := t.Context()
	state := t.TempDir()
	ws := t.TempDir()
	spec := sandbox.Spec{Workspace: ws, Image: sandboxtest.BusyboxImage, Toolbox: sandboxtest.Toolbox(t),
		Labels: map[string]string{sandbox.LabelTest: sandboxtest.TestLabel(t)}}
	// The other process's pool, over this state directory's pool.
	p, err := sandbox.NewPool(e, PoolDir(state), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		members, _ := p.Members(context.Background())
		for _, sb := range members {
			_ = e.Remove(context.Background(), sb.ID)
		}
	})
	if err := p.Fill(ctx, spec); err != nil {
		t.Fatal(err)
	}
	sb, err := p.Claim(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Ready, as a task's sandbox is before any host step.
	if _, err := sb.Tool(ctx, toolbox.OpPing, nil); err != nil {
		t.Fatal(err)
	}
	paused := func() bool {
		ins, err := sandboxtest.Client(t).ContainerInspect(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ins.State.Paused
	}
	engine := func(context.Context) (sandbox.Backend, error) { return e, nil }
	o := &Orchestrator{opts: Options{StateDir: state, Engine: engine}}
	ran := false
	if err := o.whileFrozen(ctx, ws, nil, func() error {
		ran = true
		if !paused() {
			t.Error("a claimed pool member over the worktree runs during the host step")
		}
		return nil
	}); err != nil || !ran {
		t.Fatalf("whileFrozen: ran %v, err %v", ran, err)
	}
	if paused() {
		t.Fatal("the member stayed frozen")
	}
	// Control: the same lookup without the claim journal (a state
	// directory with no pool).
	blind := &Orchestrator{opts: Options{StateDir: t.TempDir(), Engine: engine}}
	_ = blind.whileFrozen(ctx, ws, nil, func() error {
		if paused() {
			t.Error("control: frozen although the lookup cannot know the member")
		}
		return nil
	})
}

// A task takes a warm sandbox when one made for its settings waits: the
// first task of a state directory creates its sandbox and fills the pool,
// the second claims the member (its sandbox sees the checked-out files:
// the scripted model checks), and gc with the pool switched off removes
// the idle member that is left.
func TestTaskClaimsWarmSandbox(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repo")
	if err := generateRepo(ctx, repo, 20); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(tmp, "model.yaml")
	model := "model: test\nturns:\n" +
		"  - tool_calls:\n      - {name: read_file, arguments: {path: d0000/f000003.txt}}\n" +
		"  - expect: {last_role: tool, tool_result_contains: \"file 3\"}\n    text: \"Nothing to do.\"\n"
	if err := os.WriteFile(script, []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	label := sandboxtest.TestLabel(t)
	t.Cleanup(func() {
		c := sandboxtest.Client(t)
		for _, ctr := range sandboxtest.Containers(t, c, label) {
			_ = e.Remove(context.Background(), ctr.ID)
		}
	})
	var mu sync.Mutex
	var ready []string
	sink := event.SinkFunc(func(ev event.Event) {
		if ev.State == "ready" {
			mu.Lock()
			ready = append(ready, ev.Text)
			mu.Unlock()
		}
	})
	opts := Options{
		StateDir: filepath.Join(tmp, "state"),
		Engine:   func(context.Context) (sandbox.Backend, error) { return e, nil },
		Sandbox: sandbox.Spec{Image: sandboxtest.BusyboxImage, Toolbox: sandboxtest.Toolbox(t),
			Labels: map[string]string{sandbox.LabelTest: label}},
		Sink: sink, Pool: 1,
	}
	o, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	run := func() string {
		t.Helper()
		r, err := o.NewTask(ctx, TaskOptions{Prompt: "look", RepoDir: repo, LLM: ScriptPrefix + script})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := r.Execute(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Decide(ctx, r.Task, Discard, true); err != nil {
			t.Fatal(err)
		}
		return r.Task.ID
	}
	run()
	o.WaitPool()
	run()
	o.WaitPool()
	mu.Lock()
	got := append([]string(nil), ready...)
	mu.Unlock()
	if len(got) != 2 || strings.Contains(got[0], "warm pool") || !strings.Contains(got[1], "warm pool") {
		t.Fatalf("ready events %q: want a fresh sandbox, then a warm one", got)
	}
	members, err := o.PoolMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idle := 0
	for _, m := range members {
		if m.Pool == sandbox.PoolIdle {
			idle++
		}
	}
	if idle != 1 {
		t.Fatalf("%d idle members after two tasks, want 1 (refilled)", idle)
	}

	// gc with the pool kept: the idle member stays; switched off: it goes.
	rep, err := o.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RemovedPool) != 0 || len(rep.RemovedContainers) != 0 {
		t.Fatalf("gc with the pool on removed %v / %v", rep.RemovedPool, rep.RemovedContainers)
	}
	opts.Pool = 0
	off, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err = off.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rep.RemovedPool) != 1 {
		t.Fatalf("gc with the pool off removed %v, want the idle member", rep.RemovedPool)
	}
	if left := sandboxtest.Containers(t, sandboxtest.Client(t), label); len(left) != 0 {
		t.Errorf("%d containers left after gc", len(left))
	}
}

// A sub-agent's sandbox comes from the pool too: its worktree, already
// checked out, is moved into the member, and what the sub-agent writes
// there is applied to the task. The first task fills the pool (two
// members of the settings a task and its sub-agents share); the second
// claims one for itself and one for its sub-agent, as the claim journal
// shows.
func TestSubAgentClaimsWarmSandbox(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	f := newLocalFixture(t, `model: scripted
slots: 1
turns:
  - tool_calls:
      - {name: spawn_agents, arguments: {tasks: [{name: helper, prompt: "write sub.txt"}]}}
  - tool_calls:
      - {name: write_file, arguments: {path: sub.txt, content: "from the sub-agent\n"}}
  - text: Wrote sub.txt.
  - expect: {tool_result_contains: "helper"}
    text: The helper wrote sub.txt.
`)
	label := sandboxtest.TestLabel(t)
	t.Cleanup(func() {
		for _, ctr := range sandboxtest.Containers(t, sandboxtest.Client(t), label) {
			_ = e.Remove(context.Background(), ctr.ID)
		}
	})
	o, err := New(Options{
		StateDir: t.TempDir(),
		Engine:   func(context.Context) (sandbox.Backend, error) { return e, nil },
		Sandbox: sandbox.Spec{Image: sandboxtest.BusyboxImage, Toolbox: sandboxtest.Toolbox(t),
			Labels: map[string]string{sandbox.LabelTest: label}},
		Environment: EnvironmentOptions{Off: true},
		SubAgents:   true, Pool: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.o = o
	first := f.run(t)
	o.WaitPool()
	// Topped up once more: the first task's sub-agent may have claimed a
	// member after the refill that followed it had counted.
	o.refillWarm()
	o.WaitPool()
	task := f.run(t)
	o.WaitPool()
	for _, tk := range []string{first.ID, task.ID} {
		rev, err := o.Review(ctx, mustLoad(t, o, tk))
		if err != nil {
			t.Fatal(err)
		}
		if len(rev.Stat.Files) != 1 || rev.Stat.Files[0].Path != "sub.txt" {
			t.Fatalf("task %s: changes %+v, want the sub-agent's sub.txt", tk, rev.Stat.Files)
		}
	}
	claims, err := os.ReadDir(filepath.Join(PoolDir(o.opts.StateDir), "claims"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range claims {
		if rec := sandbox.ReadPoolClaim(PoolDir(o.opts.StateDir), c.Name()); rec != nil && !rec.Removing {
			got[rec.Labels[sandbox.LabelUse]+" "+rec.Labels[sandbox.LabelTask]] = true
		}
	}
	if !got[useTask+" "+task.ID] || !got[useSub+" "+task.ID] {
		t.Fatalf("claims journalled: %v, want the second task's own sandbox and its sub-agent's", got)
	}
}

func mustLoad(t *testing.T, o *Orchestrator, id string) *store.Task {
	t.Helper()
	tk, err := o.store.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}
