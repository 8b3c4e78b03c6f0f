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
