package orchestrator

import (
	"context"
	"fmt"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// ShellSandbox returns a running sandbox over the task's worktree for an
// interactive shell: the task's own when it is still running, else a new
// one (recreated if gone). created says the caller should remove it when
// the shell ends. The caller must hold the task's use claim (UseTask) for
// the whole shell, so that gc and resume leave the sandbox alone.
func (o *Orchestrator) ShellSandbox(ctx context.Context, t *store.Task) (sb *sandbox.Sandbox, created bool, err error) {
	if t.State.Final() {
		return nil, false, fmt.Errorf("task %s is %s: its worktree is gone", t.ID, t.State)
	}
	if !t.Populated {
		return nil, false, fmt.Errorf("task %s never got as far as checking out its files: resume it with `agent resume %s`", t.ID, t.ID)
	}
	repo, err := o.openRepo(ctx, t)
	if err != nil {
		return nil, false, err
	}
	wt, err := o.taskWorktree(repo, t)
	if err != nil {
		return nil, false, err
	}
	if !wt.Exists() {
		return nil, false, fmt.Errorf("task %s: its worktree %s is gone", t.ID, t.Worktree)
	}
	e, err := o.engine(ctx)
	if err != nil {
		return nil, false, err
	}
	if t.SandboxID != "" {
		if sb, err := e.Get(ctx, t.SandboxID); err == nil && sb.State == "running" && sb.Labels[sandbox.LabelState] == o.stateID {
			return sb, false, nil
		}
	}
	spec := o.sandboxSpec(t, "agent-shell-"+t.ID)
	spec.Labels = withLabel(spec.Labels, sandbox.LabelUse, useShell)
	sb, err = o.createSandbox(ctx, e, spec)
	if err != nil {
		return nil, false, fmt.Errorf("creating a sandbox for task %s: %w", t.ID, err)
	}
	return sb, true, nil
}

// UseTask marks the calling process as a user of the task (an open shell)
// until release: gc and resume never remove a sandbox of a used task.
func (o *Orchestrator) UseTask(t *store.Task) (release func(), err error) {
	return o.store.Use(t.ID)
}

// Values of sandbox.LabelUse.
const (
	useTask  = "task"
	useSub   = "sub-agent"
	useShell = "shell"
)

// withLabel returns a copy of labels with key set to value.
func withLabel(labels map[string]string, key, value string) map[string]string {
	m := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		m[k] = v
	}
	m[key] = value
	return m
}
