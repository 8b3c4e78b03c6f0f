package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/store"
)

// slowScript writes a file, then runs a command that outlives the test's
// patience: the agent is killed while it runs.
const slowScript = `model: slow
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: note.txt, content: "written before the crash\n"}}
  - tool_calls:
      - {name: bash, arguments: {command: "echo started > started.txt; sleep 120"}}
  - text: "never reached"
`

// resumeScript continues the interrupted conversation.
const resumeScript = `model: resume
turns:
  - expect: {contains: "Write a note"}
    tool_calls:
      - {name: write_file, arguments: {path: done.txt, content: "finished after resume\n"}}
  - expect: {last_role: tool}
    text: "Resumed and finished."
`

// quickScript makes one change and finishes.
const quickScript = `model: quick
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: other.txt, content: "other task\n"}}
  - text: "Done."
`

func writeScript(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "model.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func loadRecord(t *testing.T, env *AgentEnv, id string) *store.Task {
	t.Helper()
	tk, err := taskStore(t, env.StateDir).Load(id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func mustRun(t *testing.T, env *AgentEnv, dir string, args ...string) string {
	t.Helper()
	code, out, errOut := env.Run(dir, args...)
	if code != 0 {
		t.Fatalf("agent %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
	}
	return out
}

// TestKilledTaskResumes: kill -9 of agent mid-task leaves the task
// interrupted (agent tasks says so), gc keeps its worktree, branch and
// uncommitted work (also when another task is discarded), and agent resume
// continues it in the same worktree to a reviewable branch.
func TestKilledTaskResumes(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := env.Command(ctx, repo, "task", "--llm", "script:"+writeScript(t, slowScript), "--approve", "keep", env.LabelFlag(), "Write a note")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the agent is inside the long command.
	var id, wt string
	deadline := time.Now().Add(90 * time.Second)
	for {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the task never reached its long command")
		}
		if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees")); len(ents) == 1 {
			id = ents[0].Name()
			wt = filepath.Join(env.StateDir, "worktrees", id)
			if _, err := os.Stat(filepath.Join(wt, "started.txt")); err == nil {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup at all
		t.Fatal(err)
	}
	_ = cmd.Wait()

	rec := loadRecord(t, env, id)
	if rec.State != store.Running || rec.SandboxID == "" {
		t.Fatalf("record after kill: state %s, sandbox %q", rec.State, rec.SandboxID)
	}
	out := mustRun(t, env, repo, "tasks")
	if !strings.Contains(out, id) || !strings.Contains(out, "interrupted") {
		t.Fatalf("agent tasks does not show %s interrupted:\n%s", id, out)
	}

	// Another task on the same repository, kept and then discarded.
	out = mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, quickScript), "--approve", "keep", env.LabelFlag(), "Other work")
	if !strings.Contains(out, "kept branch") {
		t.Fatalf("second task:\n%s", out)
	}
	var other string
	for _, l := range strings.Split(mustRun(t, env, repo, "tasks"), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] != id && f[0] != "ID" {
			other = f[0]
		}
	}
	mustRun(t, env, repo, "discard", "--yes", other)

	// gc removes the dead run's container but keeps the work.
	out = mustRun(t, env, repo, "gc")
	if !strings.Contains(out, "removed sandbox container") {
		t.Errorf("gc did not remove the orphaned sandbox:\n%s", out)
	}
	cs, err := LabelledContainers(ctx, c, env.Label)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Errorf("%d containers left after gc", len(cs))
	}
	if b, err := os.ReadFile(filepath.Join(wt, "note.txt")); err != nil || string(b) != "written before the crash\n" {
		t.Fatalf("uncommitted work lost after discard of another task and gc: %q %v", b, err)
	}
	rec = loadRecord(t, env, id)
	if rec.State != store.Interrupted {
		t.Fatalf("state after gc: %s", rec.State)
	}
	if Git(t, repo, "branch", "--list", rec.Branch) == "" {
		t.Fatal("gc deleted the interrupted task's branch")
	}

	// Resume with a script that continues the conversation.
	out = mustRun(t, env, repo, "resume", id[:4], "--llm", "script:"+writeScript(t, resumeScript), "--approve", "keep", env.LabelFlag())
	if !strings.Contains(out, "kept branch "+rec.Branch) {
		t.Fatalf("resume:\n%s", out)
	}
	rec = loadRecord(t, env, id)
	if rec.State != store.Kept || len(rec.Commits) != 1 {
		t.Fatalf("after resume: state %s, commits %v", rec.State, rec.Commits)
	}
	files := Git(t, repo, "ls-tree", "-r", "--name-only", rec.Branch)
	for _, f := range []string{"note.txt", "done.txt", "started.txt"} {
		if !strings.Contains(files, f) {
			t.Errorf("branch lacks %s:\n%s", f, files)
		}
	}
	// gc leaves a kept task alone.
	mustRun(t, env, repo, "gc")
	if _, err := os.Stat(wt); err != nil {
		t.Errorf("gc removed the kept task's worktree: %v", err)
	}
	if Git(t, repo, "branch", "--list", rec.Branch) == "" {
		t.Error("gc removed the kept task's branch")
	}
}

// TestConcurrentTasks: two tasks started at once on one repository both
// succeed (the repository lock serialises branch and worktree creation).
func TestConcurrentTasks(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	script := filepath.Join(ModuleRoot(), "demo", "script.yaml")
	var wg sync.WaitGroup
	type result struct {
		code     int
		out, err string
	}
	res := make([]result, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, errOut := env.Run(repo, "task", "--llm", "script:"+script, "--approve", "keep", "--json", env.LabelFlag(), "Make greet.sh greet the name given")
			res[i] = result{code, out, errOut}
		}()
	}
	wg.Wait()
	branches := map[string]bool{}
	for i, r := range res {
		if r.code != 0 {
			t.Fatalf("task %d: exit %d\n%s", i, r.code, r.err)
		}
		lines := strings.Split(strings.TrimSpace(r.out), "\n")
		var last struct {
			Kind string     `json:"kind"`
			Task store.Task `json:"task"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Kind != "result" {
			t.Fatalf("task %d: last line is not the result: %v\n%s", i, err, lines[len(lines)-1])
		}
		if last.Task.State != store.Kept || len(last.Task.Commits) != 1 {
			t.Errorf("task %d: %s with %d commits", i, last.Task.State, len(last.Task.Commits))
		}
		branches[last.Task.Branch] = true
	}
	if len(branches) != 2 {
		t.Fatalf("branches: %v", branches)
	}
	for b := range branches {
		if got := Git(t, repo, "show", b+":greet.sh"); !strings.Contains(got, "${1:-world}") {
			t.Errorf("%s: greet.sh = %q", b, got)
		}
	}
	if Git(t, repo, "status", "--porcelain") != "" {
		t.Error("the user's checkout changed")
	}
}

// TestInterruptedTask: SIGINT (Ctrl-C) mid-task exits 130, records the
// task as interrupted with its work in the worktree, removes its sandbox,
// and the task resumes.
func TestInterruptedTask(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := env.Command(ctx, repo, "task", "--llm", "script:"+writeScript(t, slowScript), "--approve", "keep", env.LabelFlag(), "Write a note")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var id string
	deadline := time.Now().Add(90 * time.Second)
	for id == "" {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the task never reached its long command")
		}
		if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees")); len(ents) == 1 {
			if _, err := os.Stat(filepath.Join(env.StateDir, "worktrees", ents[0].Name(), "started.txt")); err == nil {
				id = ents[0].Name()
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit code %d (%v), want 130\n%s", code, err, errOut.String())
	}
	t.Logf("stopped %v after SIGINT", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(errOut.String(), "agent resume "+id) {
		t.Errorf("no resume hint:\n%s", errOut.String())
	}
	rec := loadRecord(t, env, id)
	if rec.State != store.Interrupted {
		t.Errorf("state %s, want interrupted", rec.State)
	}
	cs, err := LabelledContainers(ctx, c, env.Label)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Errorf("%d sandbox containers left after Ctrl-C", len(cs))
	}
	out := mustRun(t, env, repo, "resume", id, "--llm", "script:"+writeScript(t, resumeScript), "--approve", "keep", env.LabelFlag())
	if !strings.Contains(out, "kept branch") {
		t.Fatalf("resume:\n%s", out)
	}
}
