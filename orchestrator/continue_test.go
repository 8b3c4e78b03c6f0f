package orchestrator

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
)

// A follow-up whose model fails, having changed nothing, leaves the task as
// it was: under review (or kept) and mergeable, the branch at the reviewed
// commit. One that wrote a file before the model failed is not put back
// (its work is in the worktree, for resume), and merge refuses it, as it
// refused every failed follow-up before: the control.
func TestFailedFollowUpKeepsReviewedWork(t *testing.T) {
	const failing = `model: scripted
turns:
  - error: {status: 500, message: "model server broke"}
`
	const writeThenFail = `model: scripted
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: half.txt, content: "half\n"}}
  - error: {status: 500, message: "model server broke"}
`
	for _, c := range []struct {
		name, script string
		keep         bool // Keep before the follow-up
		want         store.State
		mergeable    bool
	}{
		{"review", failing, false, store.Review, true},
		{"kept", failing, true, store.Kept, true},
		{"changed-then-failed", writeThenFail, false, store.Failed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newLocalFixture(t, writeGreetScript)
			ctx := context.Background()
			task := f.run(t)
			if c.keep {
				if _, err := f.o.Decide(ctx, task, Keep, false); err != nil {
					t.Fatal(err)
				}
			}
			reviewed := testGit(t, f.repo, "rev-parse", task.Branch)
			script := filepath.Join(t.TempDir(), "follow.yaml")
			if err := os.WriteFile(script, []byte(c.script), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := f.o.Continue(ctx, task.ID, ContinueOptions{Prompt: "also add tests", LLM: "script:" + script})
			if err != nil {
				t.Fatal(err)
			}
			err = r.Execute(ctx)
			r.Close()
			if err == nil {
				t.Fatal("the follow-up's model failed, yet Execute returned no error")
			}
			t.Logf("follow-up: %v", err)
			saved, lerr := f.o.store.Load(task.ID)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if saved.State != c.want {
				t.Fatalf("after the failed follow-up: state %s (error %q), want %s", saved.State, saved.Error, c.want)
			}
			if c.mergeable {
				if !strings.Contains(err.Error(), "changed nothing") || !strings.Contains(err.Error(), "agent merge "+task.ID) {
					t.Errorf("message does not say the task is as before and how to merge it: %v", err)
				}
				if saved.FollowUpFrom != nil || saved.Error != "" {
					t.Errorf("record keeps the follow-up's traces: from %+v, error %q", saved.FollowUpFrom, saved.Error)
				}
			}
			if got := testGit(t, f.repo, "rev-parse", task.Branch); got != reviewed {
				t.Fatalf("branch moved from %s to %s", reviewed, got)
			}
			out, err := f.o.Decide(ctx, saved, Merge, false)
			if !c.mergeable {
				if err == nil || !strings.Contains(err.Error(), "only a finished task can be merged") {
					t.Fatalf("a follow-up with unreviewed work in the worktree: merge gave %v, %v", out, err)
				}
				if b, rerr := os.ReadFile(filepath.Join(saved.Worktree, "half.txt")); rerr != nil || string(b) != "half\n" {
					t.Errorf("the follow-up's file in the worktree: %q, %v", b, rerr)
				}
				return
			}
			if err != nil {
				t.Fatalf("merge of the reviewed work after a failed follow-up: %v", err)
			}
			if out.State != string(store.Merged) {
				t.Fatalf("merge: state %s", out.State)
			}
			if b, err := os.ReadFile(filepath.Join(f.repo, "greet.txt")); err != nil || string(b) != "hello\n" {
				t.Errorf("merged greet.txt: %q, %v", b, err)
			}
		})
	}
}

// After `agent checkout` and `git switch -` back, `git switch -` found the
// branch the checkout was on (git's reflog message), and `agent resume` of
// the task (here a failed one) re-creates its worktree from the branch and
// runs to review. Controls: the task's worktree is gone after the checkout
// (what resume must re-create), and a plain symbolic-ref with another
// reflog message leaves `git switch -` nothing to go back to.
func TestResumeAfterCheckoutAndSwitchBack(t *testing.T) {
	const failing = `model: scripted
turns:
  - error: {status: 500, message: "model server broke"}
`
	f := newLocalFixture(t, failing)
	ctx := context.Background()
	r, err := f.o.NewTask(ctx, TaskOptions{Prompt: "write greet.txt", RepoDir: f.repo, LLM: "script:" + f.script})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Execute(ctx); err == nil {
		t.Fatal("the model failed, yet the task did not")
	}
	r.Close()
	task, err := f.o.store.Load(r.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != store.Failed {
		t.Fatalf("state %s, want failed", task.State)
	}
	res, err := f.o.Checkout(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Previous != "main" || testGit(t, f.repo, "symbolic-ref", "--short", "HEAD") != task.Branch {
		t.Fatalf("checkout: %+v, HEAD %s", res, testGit(t, f.repo, "symbolic-ref", "HEAD"))
	}
	if _, err := os.Stat(task.Worktree); err == nil {
		t.Fatal("control: the worktree is still there after the checkout")
	}
	testGit(t, f.repo, "switch", "-")
	if got := testGit(t, f.repo, "symbolic-ref", "--short", "HEAD"); got != "main" {
		t.Fatalf("git switch - went to %s, want main", got)
	}

	rr, err := f.o.Resume(ctx, task.ID, ResumeOptions{LLM: "script:" + writeScriptFile(t, writeGreetScript)})
	if err != nil {
		t.Fatalf("resume after checkout and switching back: %v", err)
	}
	err = rr.Execute(ctx)
	rr.Close()
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	saved, _ := f.o.store.Load(task.ID)
	if saved.State != store.Review || saved.Released {
		t.Fatalf("after resume: state %s, released %v", saved.State, saved.Released)
	}
	if b, err := os.ReadFile(filepath.Join(saved.Worktree, "greet.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("greet.txt in the re-created worktree: %q, %v", b, err)
	}
	if out, err := f.o.Decide(ctx, saved, Merge, false); err != nil || out.State != string(store.Merged) {
		t.Fatalf("merge after resume: %+v, %v", out, err)
	}

	// Control: a fresh repository whose HEAD moved with another reflog
	// message: git finds no previous branch.
	c := t.TempDir()
	testGit(t, c, "init", "-q", "-b", "main")
	testGit(t, c, "commit", "-q", "--allow-empty", "-m", "init")
	testGit(t, c, "branch", "other")
	testGit(t, c, "symbolic-ref", "-m", "agent checkout other", "HEAD", "refs/heads/other")
	cmd := exec.Command("git", "switch", "-")
	cmd.Dir = c
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("control: git switch - worked after a foreign reflog message: %s", out)
	} else {
		t.Logf("control: %v: %s", err, strings.TrimSpace(string(out)))
	}
}

func writeScriptFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
