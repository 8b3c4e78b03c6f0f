package orchestrator

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// These tests drive the task lifecycle (task -> sandbox -> agent -> commit
// -> review -> decision) on the in-process backend: the real toolbox over
// the worktree, a scripted model, real git; no engine. Each takes
// milliseconds to tens of milliseconds (git dominates).

// testGit runs git in dir with a fixed identity.
func testGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// localFixture is a repository, a script writing greet.txt, and an
// orchestrator whose sandboxes are in-process.
type localFixture struct {
	repo, script string
	local        *sandboxtest.Local
	o            *Orchestrator
}

const writeGreetScript = `model: scripted
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: greet.txt, content: "hello\n"}}
  - text: Wrote greet.txt.
`

func newLocalFixture(t *testing.T, script string) *localFixture {
	t.Helper()
	t.Setenv("GIT_AUTHOR_NAME", "t")
	t.Setenv("GIT_AUTHOR_EMAIL", "t@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "t")
	t.Setenv("GIT_COMMITTER_EMAIL", "t@example.com")
	f := &localFixture{repo: t.TempDir(), local: sandboxtest.NewLocal()}
	testGit(t, f.repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(f.repo, "README.md"), []byte("# x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testGit(t, f.repo, "add", "README.md")
	testGit(t, f.repo, "commit", "-q", "-m", "init")
	f.script = filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(f.script, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := New(Options{
		StateDir:    t.TempDir(),
		Engine:      func(context.Context) (sandbox.Backend, error) { return f.local, nil },
		Sandbox:     sandbox.Spec{Toolbox: sandboxtest.Toolbox(t)},
		Environment: EnvironmentOptions{Off: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.o = o
	return f
}

// run makes and executes a task and returns its record.
func (f *localFixture) run(t *testing.T) *store.Task {
	t.Helper()
	ctx := context.Background()
	r, err := f.o.NewTask(ctx, TaskOptions{Prompt: "write greet.txt", RepoDir: f.repo, LLM: "script:" + f.script})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Execute(ctx); err != nil {
		t.Fatalf("execute: %v", err)
	}
	return r.Task
}

func TestLocalTaskMergeKeepDiscard(t *testing.T) {
	for _, d := range []Decision{Merge, Keep, Discard} {
		t.Run(string(d), func(t *testing.T) {
			start := time.Now()
			f := newLocalFixture(t, writeGreetScript)
			ctx := context.Background()
			task := f.run(t)
			if task.State != store.Review || task.SandboxID != "" {
				t.Fatalf("after the run: state %s, sandbox %q", task.State, task.SandboxID)
			}
			// The sandbox was created and removed, nothing else.
			ops := f.local.Ops()
			if len(ops) < 2 || !strings.HasPrefix(ops[0], "create ") || ops[len(ops)-1] != "remove "+strings.TrimPrefix(ops[0], "create ") {
				t.Errorf("backend operations: %q", ops)
			}
			rev, err := f.o.Review(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			var files []string
			for _, fs := range rev.Stat.Files {
				files = append(files, fs.Path)
			}
			if len(rev.Commits) != 1 || !slices.Equal(files, []string{"greet.txt"}) {
				t.Fatalf("review: %d commits, files %v", len(rev.Commits), files)
			}
			out, err := f.o.Decide(ctx, task, d, false)
			if err != nil {
				t.Fatalf("%s: %v", d, err)
			}
			_, statErr := os.Stat(filepath.Join(f.repo, "greet.txt"))
			branches := testGit(t, f.repo, "branch", "--list", task.Branch)
			_, wtErr := os.Stat(task.Worktree)
			switch d {
			case Merge:
				if out.State != string(store.Merged) || statErr != nil {
					t.Errorf("merge: state %s, greet.txt in checkout: %v", out.State, statErr)
				}
				if got := testGit(t, f.repo, "log", "-1", "--format=%H", "main"); got != out.Commit {
					t.Errorf("main at %s, merge commit %s", got, out.Commit)
				}
			case Keep:
				if out.State != string(store.Kept) || statErr == nil || branches == "" || wtErr != nil {
					t.Errorf("keep: state %s, checkout changed %v, branch %q, worktree %v", out.State, statErr == nil, branches, wtErr)
				}
			case Discard:
				if out.State != string(store.Discarded) || statErr == nil || branches != "" || wtErr == nil {
					t.Errorf("discard: state %s, checkout changed %v, branch %q left, worktree left %v", out.State, statErr == nil, branches, wtErr == nil)
				}
			}
			t.Logf("%s: %v", d, time.Since(start))
		})
	}
}

// TestLocalGCDecisions: gc removes this state directory's sandboxes whose
// task is not running (clearing the record's SandboxID), keeps a running
// task's, and never touches another state directory's. A finished task's
// worktree with uncommitted changes is kept.
func TestLocalGCDecisions(t *testing.T) {
	f := newLocalFixture(t, writeGreetScript)
	ctx := context.Background()
	task := f.run(t)
	mine, err := f.local.Create(ctx, sandbox.Spec{Workspace: task.Worktree, Task: task.ID, StateID: f.o.stateID})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := f.local.Create(ctx, sandbox.Spec{Workspace: task.Worktree, Task: task.ID, StateID: "another-state"})
	task.SandboxID = mine.ID
	if err := f.o.store.Save(task); err != nil {
		t.Fatal(err)
	}

	// While the task's process holds its claim, its sandbox stays.
	release, err := f.o.store.Claim(task.ID)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := f.o.GC(ctx)
	release()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RemovedContainers) != 0 || len(rep.Kept) == 0 || !strings.Contains(rep.Kept[0], "is running") {
		t.Fatalf("gc with the task alive: %+v", rep)
	}
	if _, err := f.local.Get(ctx, mine.ID); err != nil {
		t.Fatalf("a running task's sandbox was removed: %v", err)
	}

	rep, err = f.o.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.RemovedContainers, []string{short(mine.ID)}) {
		t.Errorf("removed %v, want only %s", rep.RemovedContainers, short(mine.ID))
	}
	if _, err := f.local.Get(ctx, other.ID); err != nil {
		t.Errorf("another state directory's sandbox was removed: %v", err)
	}
	if cur, _ := f.o.store.Load(task.ID); cur.SandboxID != "" {
		t.Errorf("record still names removed sandbox %s", cur.SandboxID)
	}

	// A discarded task's worktree with uncommitted work is kept by gc.
	if err := os.WriteFile(filepath.Join(task.Worktree, "wip.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur, _ := f.o.store.Load(task.ID)
	cur.State = store.Discarded
	if err := f.o.store.Save(cur); err != nil {
		t.Fatal(err)
	}
	rep, err = f.o.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RemovedWorktrees) != 0 || !strings.Contains(strings.Join(rep.Kept, "\n"), "uncommitted") {
		t.Errorf("gc of a worktree with uncommitted changes: %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(task.Worktree, "wip.txt")); err != nil {
		t.Errorf("uncommitted work lost: %v", err)
	}
}

// TestLocalSubAgentApply: a sub-agent works in its own worktree and
// sandbox; its file comes back into the parent's commit, and its sandbox,
// worktree and branch are gone afterwards.
func TestLocalSubAgentApply(t *testing.T) {
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
	f.o.opts.SubAgents = true
	ctx := context.Background()
	task := f.run(t)
	rev, err := f.o.Review(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, fs := range rev.Stat.Files {
		files = append(files, fs.Path)
	}
	if !slices.Equal(files, []string{"sub.txt"}) {
		t.Fatalf("parent's changes: %v, want the sub-agent's sub.txt", files)
	}
	creates, removes := 0, 0
	for _, op := range f.local.Ops() {
		creates += boolInt(strings.HasPrefix(op, "create "))
		removes += boolInt(strings.HasPrefix(op, "remove "))
	}
	if creates != 2 || removes != 2 {
		t.Errorf("backend: %d creates, %d removes, want 2 and 2: %q", creates, removes, f.local.Ops())
	}
	if left := testGit(t, f.repo, "branch", "--list", task.Branch+"-sub-*"); left != "" {
		t.Errorf("sub-agent branch left after apply: %s", left)
	}
	if ents, _ := os.ReadDir(filepath.Dir(task.Worktree)); len(ents) != 1 {
		t.Errorf("worktrees left: %d, want only the task's", len(ents))
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLocalTaskSquash: squash takes the task's work into the base branch
// as one new commit (not the task's own), and the task's branch and
// worktree are gone.
func TestLocalTaskSquash(t *testing.T) {
	start := time.Now()
	f := newLocalFixture(t, writeGreetScript)
	ctx := context.Background()
	task := f.run(t)
	out, err := f.o.Decide(ctx, task, Squash, false)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != string(store.Merged) {
		t.Fatalf("squash: state %s", out.State)
	}
	if got := testGit(t, f.repo, "show", "main:greet.txt"); got != "hello" {
		t.Errorf("main:greet.txt = %q", got)
	}
	if parents := strings.Fields(testGit(t, f.repo, "log", "-1", "--format=%P", "main")); len(parents) != 1 || slices.Contains(task.Commits, testGit(t, f.repo, "rev-parse", "main")) {
		t.Errorf("main's tip is not one new commit: parents %v, task commits %v", parents, task.Commits)
	}
	if b := testGit(t, f.repo, "branch", "--list", task.Branch); b != "" {
		t.Errorf("branch %s left after squash", b)
	}
	if _, err := os.Stat(task.Worktree); err == nil {
		t.Error("worktree left after squash")
	}
	t.Logf("squash: %v", time.Since(start))
}

// TestLocalSubAgentConflictKept: two sub-agents write the same new file
// differently; the first one's work is applied to the parent, the second
// cannot be, and its branch is kept (recorded as kept) with its work on it.
func TestLocalSubAgentConflictKept(t *testing.T) {
	f := newLocalFixture(t, `model: subconflict
slots: 1
turns:
  - tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: alpha, prompt: "Write x.txt saying a."}
            - {name: beta, prompt: "Write x.txt saying b."}
  - expect: {last_contains: "saying a"}
    tool_calls:
      - {name: write_file, arguments: {path: x.txt, content: "a\n"}}
  - expect: {last_role: tool}
    text: "Wrote a."
  - expect: {last_contains: "saying b"}
    tool_calls:
      - {name: write_file, arguments: {path: x.txt, content: "b\n"}}
  - expect: {last_role: tool}
    text: "Wrote b."
  - expect: {last_role: tool}
    text: "One sub-agent's work conflicted."
`)
	f.o.opts.SubAgents = true
	task := f.run(t)
	if got := testGit(t, f.repo, "show", task.Branch+":x.txt"); got != "a" {
		t.Fatalf("task branch x.txt = %q, want alpha's", got)
	}
	states := map[string]store.SubAgent{}
	for _, sa := range task.SubAgents {
		states[sa.Name] = sa
	}
	if states["alpha"].State != store.SubDone || states["beta"].State != store.SubKept {
		t.Fatalf("sub-agents: %+v", task.SubAgents)
	}
	if got := testGit(t, f.repo, "show", states["beta"].Branch+":x.txt"); got != "b" {
		t.Errorf("beta's kept branch holds %q, want its work", got)
	}
	subs, err := f.o.SubBranchesWithWork(context.Background(), task)
	if err != nil || len(subs) != 1 {
		t.Errorf("the review's sub-agent branches: %+v, %v", subs, err)
	}
}

// TestLocalGCCleanup: what gc removes and what it keeps, beyond sandboxes
// (TestLocalGCDecisions): a task whose process died is marked interrupted;
// a discarded task's clean worktree whose removal was cut short goes; a
// merged task's branch left by a cut-short cleanup goes when it still
// points where the merge took it from; a kept task's worktree and branch
// stay; a worktree with no record and an open shell's sandbox are left
// alone with a reason; an old empty id reservation goes.
func TestLocalGCCleanup(t *testing.T) {
	f := newLocalFixture(t, writeGreetScript)
	ctx := context.Background()
	kept, discarded, merged := f.run(t), f.run(t), f.run(t)
	if _, err := f.o.Decide(ctx, kept, Keep, false); err != nil {
		t.Fatal(err)
	}
	// A discard stopped after it was recorded, before the worktree went.
	discarded.State, discarded.Decision = store.Discarded, string(Discard)
	if err := f.o.store.Save(discarded); err != nil {
		t.Fatal(err)
	}
	// A merge whose cleanup stopped before the branch was deleted.
	if _, err := f.o.Decide(ctx, merged, Merge, false); err != nil {
		t.Fatal(err)
	}
	merged, _ = f.o.store.Load(merged.ID)
	testGit(t, f.repo, "branch", merged.Branch, merged.MergedTip)
	// A task whose process died while it ran.
	deadID, err := f.o.store.NewID()
	if err != nil {
		t.Fatal(err)
	}
	dead := &store.Task{ID: deadID, State: store.Running, PID: 1, Worktree: filepath.Join(f.o.opts.StateDir, "worktrees", deadID)}
	if err := f.o.store.Save(dead); err != nil {
		t.Fatal(err)
	}
	// An id reserved by a process that died before writing the record.
	resID, err := f.o.store.NewID()
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(f.o.store.Dir(), resID+".json"), old, old); err != nil {
		t.Fatal(err)
	}
	// A worktree directory with no record.
	orphan := filepath.Join(f.o.opts.StateDir, "worktrees", "orphan")
	if err := os.MkdirAll(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	// An `agent shell` open on the kept task.
	shell, err := f.local.Create(ctx, sandbox.Spec{Workspace: kept.Worktree, Task: kept.ID, StateID: f.o.stateID})
	if err != nil {
		t.Fatal(err)
	}
	release, err := f.o.store.Use(kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	start := time.Now()
	rep, err := f.o.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc: %v", time.Since(start))
	kept2 := strings.Join(rep.Kept, "\n")
	if !slices.Equal(rep.Interrupted, []string{deadID}) {
		t.Errorf("interrupted: %v, want %s", rep.Interrupted, deadID)
	}
	if cur, _ := f.o.store.Load(deadID); cur == nil || cur.State != store.Interrupted {
		t.Errorf("the dead task's record: %+v", cur)
	}
	if !slices.Equal(rep.RemovedWorktrees, []string{discarded.Worktree}) {
		t.Errorf("removed worktrees %v, want only the discarded task's %s", rep.RemovedWorktrees, discarded.Worktree)
	}
	if _, err := os.Stat(discarded.Worktree); err == nil {
		t.Error("the discarded task's worktree is still there")
	}
	if !slices.Equal(rep.RemovedBranches, []string{merged.Branch}) || testGit(t, f.repo, "branch", "--list", merged.Branch) != "" {
		t.Errorf("removed branches %v, want the merged task's %s", rep.RemovedBranches, merged.Branch)
	}
	if _, err := os.Stat(kept.Worktree); err != nil || testGit(t, f.repo, "branch", "--list", kept.Branch) == "" {
		t.Errorf("the kept task lost its worktree (%v) or branch", err)
	}
	if testGit(t, f.repo, "branch", "--list", discarded.Branch) == "" {
		t.Error("gc deleted a discarded task's branch (gc never deletes unmerged work)")
	}
	if !slices.Equal(rep.RemovedRecords, []string{resID}) {
		t.Errorf("removed records %v, want the reservation %s", rep.RemovedRecords, resID)
	}
	if _, err := os.Stat(orphan); err != nil || !strings.Contains(kept2, orphan+" has no task record") {
		t.Errorf("the worktree with no record: %v; kept: %s", err, kept2)
	}
	if _, err := f.local.Get(ctx, shell.ID); err != nil || len(rep.RemovedContainers) != 0 || !strings.Contains(kept2, "`agent shell "+kept.ID+"` is open") {
		t.Errorf("the open shell's sandbox: %v, removed %v; kept: %s", err, rep.RemovedContainers, kept2)
	}
}
