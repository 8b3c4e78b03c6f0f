package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/store"
)

// subFailScript: a sub-agent writes a file and then its model fails with
// an error that is not retried; the parent goes on and finishes.
const subFailScript = `model: subfail
slots: 1
turns:
  - tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: gamma, prompt: "Write g.txt, then fail."}
  - expect: {last_contains: "Write g.txt"}
    tool_calls:
      - {name: write_file, arguments: {path: g.txt, content: "gamma's work\n"}}
  - expect: {last_role: tool}
    error: {status: 400, message: "scripted model failure"}
  - expect: {last_role: tool}
    text: "The sub-agent failed; its work is on its branch."
`

// TestSubAgentModelErrorKeepsWork: a sub-agent whose model fails had its
// worktree removed without a commit, so the branch the parent was told
// about held only the starting snapshot. Now its work is committed there,
// the review lists the branch, and discarding the task says it deletes it.
func TestSubAgentModelErrorKeepsWork(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	out := mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, subFailScript), "--approve", "keep", env.LabelFlag(), "Delegate")
	rec := onlyTask(t, env.StateDir)
	subs := Git(t, repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/"+rec.Branch+"-sub-*")
	if subs == "" || strings.Contains(subs, "\n") {
		t.Fatalf("want one kept sub-agent branch, have %q\n%s", subs, out)
	}
	if got := Git(t, repo, "show", subs+":g.txt"); got != "gamma's work" {
		t.Fatalf("the sub-agent's branch does not hold its work: g.txt = %q", got)
	}
	if !strings.Contains(out, "sub-agent branch "+subs) {
		t.Errorf("the review does not list the sub-agent's branch %s:\n%s", subs, out)
	}
	if len(rec.SubAgents) != 1 || rec.SubAgents[0].State != store.SubKept {
		t.Errorf("sub-agent record: %+v", rec.SubAgents)
	}
	if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees")); len(ents) != 1 {
		t.Errorf("worktrees left: %d", len(ents))
	}
	out = mustRun(t, env, repo, "discard", "--yes", rec.ID)
	if !strings.Contains(out, subs) {
		t.Errorf("discard does not say it deletes %s:\n%s", subs, out)
	}
	assertNothingLeft(t, c, env, repo)
}

// subSlowScript: a sub-agent writes a file and then runs a long command,
// during which the test kills the parent process.
const subSlowScript = `model: subslow
slots: 1
turns:
  - tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: delta, prompt: "Write d.txt, then wait."}
  - expect: {last_contains: "Write d.txt"}
    tool_calls:
      - {name: write_file, arguments: {path: d.txt, content: "delta's work\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {command: "touch waiting; sleep 120"}}
  - text: "never reached"
`

// subResumeScript finishes the parent after resume.
const subResumeScript = `model: subresume
turns:
  - text: "Resumed; the sub-agent's work is in the workspace."
final:
  text: "Done."
`

// TestKilledParentResumesSubAgents: after kill -9 of the parent while a
// sub-agent works, the sub-agent's worktree was an orphan that resume
// ignored and gc offered to delete. Now resume commits its work, brings it
// into the task's worktree and removes the rest.
func TestKilledParentResumesSubAgents(t *testing.T) {
	t.Run("SIGKILL", func(t *testing.T) { killedParent(t, syscall.SIGKILL) })
	// A stopped parent (Ctrl-C, SIGTERM) commits the sub-agent's work on
	// its branch before removing its worktree; the review lists it.
	t.Run("SIGTERM", func(t *testing.T) { killedParent(t, syscall.SIGTERM) })
}

func killedParent(t *testing.T, sig syscall.Signal) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := env.Command(ctx, repo, "task", "--llm", "script:"+writeScript(t, subSlowScript), "--approve", "keep", env.LabelFlag(), "Delegate and wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for found := false; !found; {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the sub-agent never reached its long command")
		}
		ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees"))
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(env.StateDir, "worktrees", e.Name(), "waiting")); err == nil {
				found = true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Signal(sig)
	err := cmd.Wait()
	rec := onlyTask(t, env.StateDir)
	if sig == syscall.SIGTERM {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Fatalf("exit %v, want 130", err)
		}
		if rec.State != store.Interrupted || len(rec.SubAgents) != 1 || rec.SubAgents[0].State != store.SubKept {
			t.Fatalf("record: %s, sub-agents %+v", rec.State, rec.SubAgents)
		}
		if got := Git(t, repo, "show", rec.SubAgents[0].Branch+":d.txt"); got != "delta's work" {
			t.Fatalf("the stopped sub-agent's branch lacks its work: %q", got)
		}
		out := mustRun(t, env, repo, "resume", "--llm", "script:"+writeScript(t, subResumeScript), "--approve", "keep", env.LabelFlag(), rec.ID)
		if !strings.Contains(out, "sub-agent branch "+rec.SubAgents[0].Branch) {
			t.Errorf("the review does not list the sub-agent's branch:\n%s", out)
		}
		mustRun(t, env, repo, "discard", "--yes", rec.ID)
		assertNothingLeft(t, c, env, repo)
		return
	}
	if len(rec.SubAgents) != 1 || rec.SubAgents[0].State != store.SubRunning {
		t.Fatalf("the running sub-agent is not in the record: %+v", rec.SubAgents)
	}
	out := mustRun(t, env, repo, "gc")
	if strings.Contains(out, "no task record") {
		t.Errorf("gc treats the sub-agent's worktree as an orphan:\n%s", out)
	}
	out = mustRun(t, env, repo, "resume", "--llm", "script:"+writeScript(t, subResumeScript), "--approve", "keep", env.LabelFlag(), rec.ID)
	if got := Git(t, repo, "show", rec.Branch+":d.txt"); got != "delta's work" {
		t.Fatalf("the sub-agent's work is not on the task branch: %q\n%s", got, out)
	}
	rec = loadRecord(t, env, rec.ID)
	if rec.SubAgents[0].State != store.SubDone {
		t.Errorf("sub-agent state %s", rec.SubAgents[0].State)
	}
	if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees")); len(ents) != 1 {
		t.Errorf("worktrees left: %d", len(ents))
	}
	mustRun(t, env, repo, "merge", rec.ID)
	mustRun(t, env, repo, "gc")
	assertNothingLeft(t, c, env, repo)
}

// subConflictScript: two sub-agents write the same new file differently;
// the second one's work cannot be applied to the parent's files.
const subConflictScript = `model: subconflict
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
`

// TestConflictingSubAgentInReview: the branch kept for a sub-agent whose
// work conflicts with another's was not in the review; it is now listed,
// and holds the work.
func TestConflictingSubAgentInReview(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	out := mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, subConflictScript), "--approve", "keep", env.LabelFlag(), "Conflict")
	rec := onlyTask(t, env.StateDir)
	if got := Git(t, repo, "show", rec.Branch+":x.txt"); got != "a" {
		t.Fatalf("task branch x.txt = %q", got)
	}
	var beta string
	for _, sa := range rec.SubAgents {
		if sa.Name == "beta" {
			beta = sa.Branch
			if sa.State != store.SubKept {
				t.Errorf("beta is %s, want kept", sa.State)
			}
		}
	}
	if beta == "" || Git(t, repo, "show", beta+":x.txt") != "b" {
		t.Fatalf("beta's branch %q does not hold its work", beta)
	}
	if !strings.Contains(out, "sub-agent branch "+beta) {
		t.Errorf("the review does not list %s:\n%s", beta, out)
	}
	mustRun(t, env, repo, "discard", "--yes", rec.ID)
	assertNothingLeft(t, c, env, repo)
}
