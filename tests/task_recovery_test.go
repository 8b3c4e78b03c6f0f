package tests

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/localagent/agent/orchestrator/failpoint"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// TestResumeAfterStaleLockAndEmptyTranscript: a kill during the commit
// leaves git's index.lock in the task's git dir, and a kill right after the
// transcript was created leaves it empty; either made every resume fail
// ("index.lock: File exists", "file exists"). Resume now clears the lock
// (no process holds it) and starts a new transcript.
func TestResumeAfterStaleLockAndEmptyTranscript(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	llm := "script:" + writeScript(t, faultScript)
	if code, out := runWith(t, env, repo, []string{failpoint.Env + "=task-before-commit"}, "task", "--llm", llm, "--approve", "keep", env.LabelFlag(), "Write a note"); code != -1 {
		t.Fatalf("not killed: %d\n%s", code, out)
	}
	rec := onlyTask(t, env.StateDir)
	if err := os.WriteFile(filepath.Join(rec.WorktreeGit, "index.lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec.Session, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, env, repo, "resume", "--llm", llm, "--approve", "merge", env.LabelFlag(), rec.ID)
	if got := Git(t, repo, "show", "main:note.txt"); got != "the agent's work" {
		t.Fatalf("main:note.txt = %q\n%s", got, out)
	}
	mustRun(t, env, repo, "gc")
	assertNothingLeft(t, c, env, repo)
}

// unseenScript writes a file the repository's .gitignore (which it also
// writes) keeps out, then starts a command that the test cuts short.
const unseenScript = `model: unseen
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: .gitignore, content: "secret.env\n"}}
      - {name: write_file, arguments: {path: secret.env, content: "TOKEN=1\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {command: "touch started; sleep 120"}}
  - text: "never reached"
`

// TestReviewShowsUnseenWork: files the agent created that .gitignore
// excludes were neither committed nor shown, and a command the kill cut
// short was missing from the review. The review now names both.
func TestReviewShowsUnseenWork(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := env.Command(ctx, repo, "task", "--llm", "script:"+writeScript(t, unseenScript), "--approve", "keep", env.LabelFlag(), "Write a secret")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the task never reached its long command")
		}
		ents, _ := os.ReadDir(filepath.Join(env.StateDir, "worktrees"))
		if len(ents) == 1 {
			if _, err := os.Stat(filepath.Join(env.StateDir, "worktrees", ents[0].Name(), "started")); err == nil {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	rec := onlyTask(t, env.StateDir)
	out := mustRun(t, env, repo, "resume", "--llm", "script:"+writeScript(t, subResumeScript), "--approve", "keep", env.LabelFlag(), rec.ID)
	if !strings.Contains(out, "1 file(s) that .gitignore keeps out") || !strings.Contains(out, "secret.env") {
		t.Errorf("the review does not show the ignored file:\n%s", out)
	}
	if !strings.Contains(out, "cut short") || !strings.Contains(out, "touch started; sleep 120") {
		t.Errorf("the review does not show the command cut short:\n%s", out)
	}
	rec = loadRecord(t, env, rec.ID)
	if rec.IgnoredCount != 1 || len(rec.Commands) != 1 || !rec.Commands[0].CutShort {
		t.Errorf("record: ignored %d %v, commands %+v", rec.IgnoredCount, rec.Ignored, rec.Commands)
	}
	mustRun(t, env, repo, "discard", "--yes", rec.ID)
	assertNothingLeft(t, c, env, repo)
}

// TestGCKeepsOpenShell: `agent gc` removed the sandbox of an open `agent
// shell` (it held no claim). An open shell now holds a use claim that gc
// respects, and gc says why it keeps the container; once the shell exits
// nothing is left.
func TestGCKeepsOpenShell(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, quickScript), "--approve", "keep", env.LabelFlag(), "Other work")
	rec := onlyTask(t, env.StateDir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := env.Command(ctx, repo, "shell", env.LabelFlag(), rec.ID)
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var shOut strings.Builder
	sh.Stdout, sh.Stderr = &shOut, &shOut
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Process.Kill() }()
	_, _ = io.WriteString(stdin, "touch /workspace/shell-was-here\n")
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelTest+"="+env.Label), filters.Arg("label", sandbox.LabelUse+"=shell"))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(rec.Worktree, "shell-was-here")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell never ran:\n%s", shOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := mustRun(t, env, repo, "gc")
	if !strings.Contains(out, "agent shell "+rec.ID) {
		t.Errorf("gc does not say it keeps the shell's sandbox:\n%s", out)
	}
	cs, err := c.ContainerList(ctx, container.ListOptions{Filters: f})
	if err != nil || len(cs) != 1 {
		t.Fatalf("the shell's sandbox is gone after gc: %d %v", len(cs), err)
	}
	_, _ = io.WriteString(stdin, "echo still-alive\nexit\n")
	_ = stdin.Close()
	if err := sh.Wait(); err != nil {
		t.Fatalf("the shell ended with %v:\n%s", err, shOut.String())
	}
	if !strings.Contains(shOut.String(), "still-alive") {
		t.Errorf("the shell did not survive gc:\n%s", shOut.String())
	}
	if got := loadRecord(t, env, rec.ID); got.State != store.Kept {
		t.Errorf("task %s", got.State)
	}
	mustRun(t, env, repo, "discard", "--yes", rec.ID)
	assertNothingLeft(t, c, env, repo)
}

// TestClosedPipeStillDecides: `agent task ... | head` (here `| true`) killed the process
// with SIGPIPE after the review was printed and before the decision, so
// the task stayed in review with no process to decide it. The decision is
// now taken and recorded.
func TestClosedPipeStillDecides(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The reader is gone before the task prints its review.
	cmd := env.Command(ctx, repo)
	cmd.Path = "/bin/sh"
	cmd.Args = []string{"/bin/sh", "-c", `"$AGENT" task --llm "script:$SCRIPT" --approve keep "$LABEL" "Other work" | true`}
	cmd.Env = append(cmd.Env, "AGENT="+env.Bin, "SCRIPT="+writeScript(t, quickScript), "LABEL="+env.LabelFlag())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rec := onlyTask(t, env.StateDir)
	if rec.State != store.Kept {
		t.Fatalf("task is %s after its output pipe closed, want kept", rec.State)
	}
	mustRun(t, env, repo, "discard", "--yes", rec.ID)
	assertNothingLeft(t, c, env, repo)
}

// TestStallingServerInterruptsTask: a server that starts a reply and then
// streams keep-alive comments forever held the task forever. With a stall
// timeout the turn ends with a retriable error, the task is interrupted
// (not failed) and resumes against a working server.
func TestStallingServerInterruptsTask(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if r.URL.Path == "/v1/models" {
				_, _ = io.WriteString(w, `{"data":[{"id":"stall"}]}`)
				return
			}
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"thinking"}}]}`+"\n\n")
		for {
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	start := time.Now()
	code, out := runWith(t, env, repo, []string{"AGENT_LLM_STALL_TIMEOUT=1s"}, "task", "--llm", srv.URL, "--approve", "keep", env.LabelFlag(), "Write a note")
	if el := time.Since(start); el > 90*time.Second {
		t.Fatalf("took %s", el)
	}
	if code == 0 || !strings.Contains(out, "no progress") || !strings.Contains(out, "agent resume") {
		t.Fatalf("exit %d; want a stall error that says how to resume:\n%s", code, out)
	}
	rec := onlyTask(t, env.StateDir)
	if rec.State != store.Interrupted {
		t.Fatalf("task is %s, want interrupted", rec.State)
	}
	mustRun(t, env, repo, "resume", "--llm", "script:"+writeScript(t, faultScript), "--approve", "merge", env.LabelFlag(), rec.ID)
	if got := Git(t, repo, "show", "main:note.txt"); got != "the agent's work" {
		t.Errorf("main:note.txt = %q", got)
	}
	mustRun(t, env, repo, "gc")
	assertNothingLeft(t, c, env, repo)
}

// unignoreScript empties .gitignore and creates .env in the task.
const unignoreScript = `model: unignore
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: .gitignore, content: "# nothing ignored\n"}}
      - {name: write_file, arguments: {path: .env, content: "SECRET=agent\n"}}
  - text: "Done."
`

// TestMergeKeepsIgnoredFile: `agent merge` of a task that un-ignores .env
// and creates it replaced the user's ignored .env and exited 0. It now
// refuses, names the file, and changes nothing: the task stays kept.
func TestMergeKeepsIgnoredFile(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte(".env\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, repo, "add", ".gitignore")
	Git(t, repo, "commit", "-q", "-m", "ignore .env")
	if err := os.WriteFile(filepath.Join(repo, ".env"), []byte("SECRET=user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := Git(t, repo, "rev-parse", "main")
	mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, unignoreScript), "--approve", "keep", env.LabelFlag(), "Un-ignore .env")
	rec := onlyTask(t, env.StateDir)
	code, out, errOut := env.Run(repo, "merge", rec.ID)
	if code == 0 || !strings.Contains(errOut, ".env") || !strings.Contains(errOut, "ignored") {
		t.Fatalf("merge: exit %d\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, ".env")); string(b) != "SECRET=user\n" {
		t.Fatalf("the user's ignored .env was overwritten: %q", b)
	}
	if Git(t, repo, "rev-parse", "main") != before || Git(t, repo, "status", "--porcelain") != "" {
		t.Fatal("the refused merge changed the checkout or the branch")
	}
	if got := loadRecord(t, env, rec.ID); got.State != store.Kept || got.Pending != nil {
		t.Fatalf("task %s, pending %v", got.State, got.Pending)
	}
	mustRun(t, env, repo, "discard", "--yes", rec.ID)
	assertNothingLeft(t, c, env, repo)
}

// TestGCAdviceWorks: a task worktree whose record is gone is locked and
// has no .git, so gc's old advice (git worktree remove) failed. The
// command gc prints now removes it.
func TestGCAdviceWorks(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, quickScript), "--approve", "keep", env.LabelFlag(), "Other work")
	rec := onlyTask(t, env.StateDir)
	// Another task of the same repository keeps the repository known.
	mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, quickScript), "--approve", "keep", env.LabelFlag(), "More work")
	if err := os.Remove(filepath.Join(env.StateDir, "tasks", rec.ID+".json")); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, env, repo, "gc")
	_, advice, ok := strings.Cut(out, "remove it: ")
	if !ok {
		t.Fatalf("gc gives no advice for %s:\n%s", rec.Worktree, out)
	}
	advice, _, _ = strings.Cut(advice, ")\n")
	if o, err := exec.Command("/bin/sh", "-c", advice).CombinedOutput(); err != nil {
		t.Fatalf("gc's advice %q failed: %v\n%s", advice, err, o)
	}
	if _, err := os.Stat(rec.Worktree); err == nil || strings.Contains(Git(t, repo, "worktree", "list"), rec.Worktree) {
		t.Fatalf("gc's advice left the worktree:\n%s", Git(t, repo, "worktree", "list"))
	}
	Git(t, repo, "branch", "-D", rec.Branch)
	for _, tk := range mustList(t, env) {
		mustRun(t, env, repo, "discard", "--yes", tk)
	}
	assertNothingLeft(t, c, env, repo)
}

func mustList(t *testing.T, env *AgentEnv) []string {
	t.Helper()
	all, err := taskStore(t, env.StateDir).List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range all {
		ids = append(ids, tk.ID)
	}
	return ids
}

// TestDiscardWithoutRepository: a task whose repository was deleted could
// not be discarded (opening the repository failed), so it stayed listed
// with its worktree forever. Discard now removes what is left.
func TestDiscardWithoutRepository(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, quickScript), "--approve", "keep", env.LabelFlag(), "Other work")
	rec := onlyTask(t, env.StateDir)
	if err := os.RemoveAll(repo); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, env, env.StateDir, "discard", "--yes", rec.ID)
	if !strings.Contains(out, "is gone") {
		t.Errorf("discard: %s", out)
	}
	if got := loadRecord(t, env, rec.ID); got.State != store.Discarded {
		t.Errorf("task %s", got.State)
	}
	if _, err := os.Stat(rec.Worktree); err == nil {
		t.Error("the worktree is left")
	}
}

// TestDeletedStateDirLeavesNoLockedWorktrees: deleting the state
// directory left the repository with locked worktree records that `git
// worktree prune` skips. The next task in the repository removes them
// (the branch stays: it may hold work).
func TestDeletedStateDirLeavesNoLockedWorktrees(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, quickScript), "--approve", "keep", env.LabelFlag(), "Other work")
	lost := onlyTask(t, env.StateDir)
	if err := os.RemoveAll(env.StateDir); err != nil {
		t.Fatal(err)
	}
	Git(t, repo, "worktree", "prune")
	if !strings.Contains(Git(t, repo, "worktree", "list"), lost.Worktree) {
		t.Fatal("git prune removed the locked worktree record: the test shows nothing")
	}
	mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, quickScript), "--approve", "discard", env.LabelFlag(), "More work")
	if wl := Git(t, repo, "worktree", "list"); strings.Contains(wl, lost.Worktree) {
		t.Errorf("the lost worktree is still recorded:\n%s", wl)
	}
	if tip, _ := GitErr(repo, "rev-parse", "--verify", "-q", lost.Branch); tip == "" {
		t.Error("the lost task's branch was deleted")
	}
	Git(t, repo, "branch", "-D", lost.Branch)
	assertNothingLeft(t, c, env, repo)
}
