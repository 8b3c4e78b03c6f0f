package orchestrator

import (
	"context"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// A task journals the isolation it started with, and every later sandbox
// of it (continue, chat, shell, resume, sub-agents: all go through
// sandboxSpec) keeps it, whatever the configuration says by then. The
// control is a task record from before the isolation was kept: it follows
// the configuration.
func TestTaskKeepsIsolation(t *testing.T) {
	f := newLocalFixture(t, writeGreetScript)
	ctx := context.Background()
	r, err := f.o.NewTask(ctx, TaskOptions{Prompt: "write greet.txt", RepoDir: f.repo, LLM: "script:" + f.script, Isolation: sandbox.IsolationRunsc})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	r.Close()
	saved, err := f.o.store.Load(r.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Isolation != "runsc" {
		t.Fatalf("task record isolation %q, want runsc", saved.Isolation)
	}
	// The configuration changes to runc with a runtime of its own.
	f.o.opts.Sandbox.Isolation, f.o.opts.Sandbox.Runtime = sandbox.IsolationRunc, "crun"
	spec := f.o.sandboxSpec(saved, "agent-task")
	if spec.Isolation != sandbox.IsolationRunsc || spec.Runtime != "" {
		t.Errorf("later sandbox of a runsc task: isolation %q runtime %q, want runsc and the default runsc runtime", spec.Isolation, spec.Runtime)
	}
	c, err := f.o.Continue(ctx, saved.ID, ContinueOptions{Prompt: "again"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Task.Isolation != "runsc" {
		t.Errorf("continued task isolation %q", c.Task.Isolation)
	}
	c.Close()

	// Control: a record without an isolation takes the configured one.
	old := &store.Task{ID: "t0", Worktree: "/w"}
	if spec := f.o.sandboxSpec(old, "agent-task"); spec.Isolation != sandbox.IsolationRunc || spec.Runtime != "crun" {
		t.Errorf("record without isolation: %q %q, want the configured runc and crun", spec.Isolation, spec.Runtime)
	}
	// A task started without --isolation records the configured one.
	r2, err := f.o.NewTask(ctx, TaskOptions{Prompt: "write greet.txt", RepoDir: f.repo, LLM: "script:" + f.script})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if r2.Task.Isolation != "runc" {
		t.Errorf("default task isolation %q, want runc", r2.Task.Isolation)
	}
	if _, err := f.o.NewTask(ctx, TaskOptions{Prompt: "x", RepoDir: f.repo, LLM: "script:" + f.script, Isolation: "vm"}); err == nil {
		t.Error("isolation vm accepted")
	}
}
