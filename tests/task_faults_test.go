package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/localagent/agent/orchestrator/failpoint"
	"github.com/localagent/agent/orchestrator/store"
)

// faultScript writes a file, runs a command that writes another, and
// finishes. It has no expectations, so a resumed run can replay it from
// the top: every step is idempotent.
const faultScript = `model: fault
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: note.txt, content: "the agent's work\n"}}
  - tool_calls:
      - {name: bash, arguments: {command: "echo ran > ran.txt"}}
  - text: "Done."
final:
  text: "Done."
`

// subFaultScript: the parent hands the writing of note.txt to a
// sub-agent. No expectations either: a resumed run replays it.
const subFaultScript = `model: subfault
slots: 1
turns:
  - tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: epsilon, prompt: "Write note.txt."}
  - tool_calls:
      - {name: write_file, arguments: {path: note.txt, content: "the agent's work\n"}}
  - text: "Wrote note.txt."
  - text: "Done."
final:
  text: "Done."
`

// runWith runs agent with extra environment and returns its exit code
// (-1 when a signal killed it) and combined output.
func runWith(t *testing.T, env *AgentEnv, dir string, extra []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := env.Command(ctx, dir, args...)
	cmd.Env = append(append([]string{}, env.Env...), extra...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return 0, string(out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("running agent %v: %v", args, err)
	}
	return ee.ExitCode(), string(out)
}

// workDone are the task failpoints passed after the agent wrote its work.
var workDone = map[string]bool{"task-before-commit": true, "task-committed": true, "sub-applied": true}

// taskPoint reports whether a failpoint is passed by `agent task` (the
// others by merge or discard).
func taskPoint(p string) bool { return strings.HasPrefix(p, "task-") || strings.HasPrefix(p, "sub-") }

// TestCrashPoints: for every failpoint in turn, a task (or its merge or
// discard) is killed there with SIGKILL; then gc, resume, merge or discard
// run again and must converge: the agent's work ends up merged (or the
// task discarded), the user's checkout and branch are consistent and clean,
// and nothing is left that no command can reach.
func TestCrashPoints(t *testing.T) {
	c := RequireEngine(t)
	for _, point := range failpoint.Points {
		t.Run(point, func(t *testing.T) { crashAt(t, c, point, "KILL") })
	}
}

// TestSignalAtCrashPoints: SIGTERM at every failpoint (and SIGINT at some)
// ends the process with exit 130 and a recorded state, or lets a short step
// that is never cut halfway (a merge, a discard, a commit) finish with exit
// 0; either way the same commands converge to the same end, and a merge
// never leaves a false "uncommitted changes" note.
func TestSignalAtCrashPoints(t *testing.T) {
	c := RequireEngine(t)
	for _, point := range failpoint.Points {
		t.Run(point+"-TERM", func(t *testing.T) { crashAt(t, c, point, "TERM") })
	}
	for _, point := range []string{"task-sandbox-created", "sub-worktree-added", "merge-checkout-updated"} {
		t.Run(point+"-INT", func(t *testing.T) { crashAt(t, c, point, "INT") })
	}
}

// crashAt runs a task (and its merge or discard) that stops at point with
// signal sig, then brings it to its end with gc, resume, merge or discard,
// and checks the invariants.
func crashAt(t *testing.T, c *client.Client, point, sig string) {
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	before := Git(t, repo, "rev-parse", "main")
	stop := []string{failpoint.Env + "=" + point, failpoint.SignalEnv + "=" + sig}
	llm := "script:" + writeScript(t, faultScript)
	if strings.HasPrefix(point, "sub-") {
		llm = "script:" + writeScript(t, subFaultScript)
	}
	discard := strings.HasPrefix(point, "discard-")
	var code int
	var out string
	if taskPoint(point) {
		code, out = runWith(t, env, repo, stop, "task", "--llm", llm, "--approve", "merge", env.LabelFlag(), "Write a note")
	} else {
		mustRun(t, env, repo, "task", "--llm", llm, "--approve", "keep", env.LabelFlag(), "Write a note")
		verb := []string{"merge", onlyTask(t, env.StateDir).ID}
		if discard {
			verb = []string{"discard", "--yes", verb[1]}
		}
		code, out = runWith(t, env, repo, stop, verb...)
	}
	rec := onlyTask(t, env.StateDir)
	id := rec.ID
	switch {
	case sig == "KILL" && code != -1:
		t.Fatalf("not killed at %s: exit %d\n%s", point, code, out)
	case sig != "KILL" && code != 0 && code != 130:
		t.Fatalf("exit %d after SIG%s at %s, want 0 or 130\n%s", code, sig, point, out)
	case sig != "KILL" && code == 130 && (rec.State == store.Running || rec.State == store.Created):
		t.Fatalf("exit 130 but the record still says %s", rec.State)
	}
	if strings.Contains(out, "uncommitted changes") {
		t.Errorf("a false note about uncommitted changes:\n%s", out)
	}
	if workDone[point] {
		// The agent's work before the stop is in the worktree or on the
		// branch (or already merged).
		b, _ := os.ReadFile(filepath.Join(rec.Worktree, "note.txt"))
		onBranch, _ := GitErr(repo, "show", rec.Branch+":note.txt")
		merged, _ := GitErr(repo, "show", "main:note.txt")
		if string(b) != "the agent's work\n" && onBranch != "the agent's work" && merged != "the agent's work" {
			t.Fatal("the agent's work is neither in its worktree, on its branch nor merged")
		}
	}
	mustRun(t, env, repo, "gc")
	// One gc is enough for a merged task: its branch is gone with its
	// worktree.
	if cur := loadRecord(t, env, id); cur.State == store.Merged {
		if bs := Git(t, repo, "for-each-ref", "--format=%(refname)", "refs/heads/"+cur.Branch); bs != "" {
			t.Errorf("the merged task's branch %s survived one gc", bs)
		}
	}
	// After gc the user's branch and checkout are before or after the
	// merge, never between.
	if st := Git(t, repo, "status", "--porcelain"); st != "" {
		t.Fatalf("after gc the checkout is between states:\n%s", st)
	}
	if main := Git(t, repo, "rev-parse", "main"); main != before {
		if _, err := GitErr(repo, "cat-file", "-e", "main:note.txt"); err != nil {
			t.Fatalf("main moved to %s without the task's work", main)
		}
	}
	switch rec = loadRecord(t, env, id); {
	case rec.State == store.Running || rec.State == store.Created:
		t.Fatalf("after gc the task is %s, want interrupted", rec.State)
	case rec.State == store.Interrupted || rec.State == store.Failed:
		if code, out := runWith(t, env, repo, nil, "resume", "--llm", llm, "--approve", "merge", env.LabelFlag(), id); code != 0 {
			t.Fatalf("resume after a stop at %s: exit %d\n%s", point, code, out)
		}
	case discard && !rec.State.Final():
		mustRun(t, env, repo, "discard", "--yes", id)
	case rec.State == store.Review || rec.State == store.Kept:
		mustRun(t, env, repo, "merge", id)
	}
	mustRun(t, env, repo, "gc")
	rec = loadRecord(t, env, id)
	if discard {
		if rec.State != store.Discarded {
			t.Fatalf("task is %s, want discarded", rec.State)
		}
		if Git(t, repo, "rev-parse", "main") != before {
			t.Error("main moved by a discard")
		}
	} else {
		if rec.State != store.Merged {
			t.Fatalf("task is %s, want merged", rec.State)
		}
		if got := Git(t, repo, "show", "main:note.txt"); got != "the agent's work" {
			t.Errorf("main:note.txt = %q", got)
		}
		if b, _ := os.ReadFile(filepath.Join(repo, "note.txt")); string(b) != "the agent's work\n" {
			t.Errorf("checkout's note.txt = %q", b)
		}
	}
	assertNothingLeft(t, c, env, repo)
}

// assertNothingLeft checks that no container of this test, no task
// worktree, branch, git lock or unfinished record is left, and that the
// user's checkout is clean.
func assertNothingLeft(t *testing.T, c *client.Client, env *AgentEnv, repo string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cs, err := LabelledContainers(ctx, c, env.Label); err != nil || len(cs) != 0 {
		t.Errorf("%d container(s) left (%v)", len(cs), err)
	}
	if wl := Git(t, repo, "worktree", "list", "--porcelain"); strings.Count(wl, "worktree ") != 1 {
		t.Errorf("worktrees left:\n%s", wl)
	}
	if bs := Git(t, repo, "for-each-ref", "--format=%(refname)", "refs/heads/agent/"); bs != "" {
		t.Errorf("branches left: %s", bs)
		for _, tk := range mustList(t, env) {
			t.Logf("task %s sub-agents: %+v", tk, loadRecord(t, env, tk).SubAgents)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(repo, ".git", "worktrees")); len(ents) != 0 {
		t.Errorf("%d worktree admin dir(s) left", len(ents))
	}
	if _, err := os.Lstat(filepath.Join(repo, ".git", "index.lock")); err == nil {
		t.Error("index.lock left in the user's repository")
	}
	if st := Git(t, repo, "status", "--porcelain"); st != "" {
		t.Errorf("the user's checkout is not clean:\n%s", st)
	}
	if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees")); len(ents) != 0 {
		t.Errorf("%d worktree dir(s) left in the state directory", len(ents))
	}
	all, err := taskStore(t, env.StateDir).List()
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range all {
		if !tk.State.Final() || tk.Pending != nil || tk.SandboxID != "" {
			t.Errorf("task %s left %s (pending %v, sandbox %q)", tk.ID, tk.State, tk.Pending, tk.SandboxID)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "tasks")); true {
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") {
				t.Errorf("stray file %s in the task store", e.Name())
			}
		}
	}
}
