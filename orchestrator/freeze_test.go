package orchestrator

import (
	"context"
	"errors"
	"testing"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// TestWhileFrozen: during the step the sandbox given and every other
// running sandbox over the same workspace (an `agent shell` one) are
// frozen; a step nested in another on the same sandbox does not thaw it
// under the outer one; afterwards all run again. Control: with the freeze
// switched off the sandboxes run during the step.
func TestWhileFrozen(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ws := t.TempDir()
	sb := sandboxtest.New(t, e, sandbox.Spec{Workspace: ws})
	shell := sandboxtest.New(t, e, sandbox.Spec{Workspace: ws, User: sb.User})
	other := sandboxtest.New(t, e, sandbox.Spec{})
	ctx := t.Context()
	paused := func(id string) bool {
		ins, err := sandboxtest.Client(t).ContainerInspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return ins.State.Paused
	}
	o := &Orchestrator{opts: Options{StateDir: t.TempDir(), Engine: func(context.Context) (sandbox.Backend, error) { return e, nil }}}
	ran := false
	err := o.whileFrozen(ctx, ws, []*sandbox.Sandbox{sb}, func() error {
		ran = true
		if !paused(sb.ID) || !paused(shell.ID) {
			t.Error("a sandbox over the workspace runs during the host step")
		}
		if paused(other.ID) {
			t.Error("a sandbox over another workspace was frozen")
		}
		if err := o.whileFrozen(ctx, ws, []*sandbox.Sandbox{sb}, func() error { return nil }); err != nil {
			return err
		}
		if !paused(sb.ID) || !paused(shell.ID) {
			t.Error("a nested step thawed the sandbox under the outer one")
		}
		return errors.New("step failed")
	})
	if !ran || err == nil || err.Error() != "step failed" {
		t.Fatalf("whileFrozen: ran %v, err %v", ran, err)
	}
	if paused(sb.ID) || paused(shell.ID) {
		t.Fatal("a sandbox stayed frozen after the step")
	}

	// Control: the test switch runs the step on live sandboxes.
	o.opts.Unsafe.NoFreeze = true
	_ = o.whileFrozen(ctx, ws, []*sandbox.Sandbox{sb}, func() error {
		if paused(sb.ID) {
			t.Error("control: frozen although the freeze is off")
		}
		return nil
	})
}
