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
// the shell ends.
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
	sb, err = e.Create(ctx, o.sandboxSpec(t, "agent-task-"+t.ID))
	if err != nil {
		return nil, false, fmt.Errorf("creating a sandbox for task %s: %w", t.ID, err)
	}
	return sb, true, nil
}
