package orchestrator

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// gatedBackend is the in-process backend whose Create, once started,
// waits for proceed: a test can hold a create in flight.
type gatedBackend struct {
	*sandboxtest.Local
	started, proceed chan struct{}
}

func (g *gatedBackend) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	close(g.started)
	<-g.proceed
	return g.Local.Create(ctx, spec)
}

// window is how long a test gives the other side to go ahead when it
// should not.
const window = 300 * time.Millisecond

func lockFixture(t *testing.T, control bool) (*Orchestrator, *sandboxtest.Local, string) {
	t.Helper()
	local := sandboxtest.NewLocal()
	o := &Orchestrator{opts: Options{StateDir: t.TempDir(), Engine: func(context.Context) (sandbox.Backend, error) { return local, nil }}}
	o.opts.Unsafe.NoFreezeLock = control
	return o, local, t.TempDir()
}

// TestCreateWaitsForFrozenStep: a sandbox created over a worktree while a
// host step has the worktree's sandboxes frozen (an `agent shell` opened
// during a commit) is created only after the thaw, so no process of it
// runs during the step. Control: without the worktree lock it is created,
// and runs, during the step.
func TestCreateWaitsForFrozenStep(t *testing.T) {
	for _, control := range []bool{false, true} {
		o, local, ws := lockFixture(t, control)
		ctx := t.Context()
		task, err := local.Create(ctx, sandbox.Spec{Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *sandbox.Sandbox, 1)
		ranDuring := false
		err = o.whileFrozen(ctx, ws, []*sandbox.Sandbox{task}, func() error {
			go func() {
				sb, err := o.createSandbox(ctx, local, sandbox.Spec{Workspace: ws})
				if err != nil {
					t.Error(err)
				}
				done <- sb
			}()
			select {
			case sb := <-done:
				// Created during the step, and not frozen.
				cur, err := local.Get(ctx, sb.ID)
				ranDuring = err == nil && cur.State == "running"
				done <- sb
			case <-time.After(window):
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		shell := <-done
		if control {
			if !ranDuring {
				t.Fatal("control failed: without the lock the sandbox was not created during the step, so this test proves nothing")
			}
			continue
		}
		if ranDuring {
			t.Fatal("a sandbox created during a frozen host step ran during it")
		}
		ops := local.Ops()
		thaw, create := slices.Index(ops, "thaw "+task.ID), slices.Index(ops, "create "+shell.ID)
		if thaw < 0 || create < thaw {
			t.Errorf("the create did not wait for the thaw: %q", ops)
		}
	}
}

// TestFreezeWaitsForCreateInFlight: a freeze that starts while a sandbox
// over the worktree is being created waits until it runs, then lists and
// freezes it with the others: it cannot escape through the window between
// the list and the step. Control: without the lock the step runs at once,
// and the sandbox finished meanwhile runs through it.
func TestFreezeWaitsForCreateInFlight(t *testing.T) {
	for _, control := range []bool{false, true} {
		o, local, ws := lockFixture(t, control)
		ctx := t.Context()
		gated := &gatedBackend{Local: local, started: make(chan struct{}), proceed: make(chan struct{})}
		created := make(chan *sandbox.Sandbox, 1)
		go func() {
			sb, err := o.createSandbox(ctx, gated, sandbox.Spec{Workspace: ws})
			if err != nil {
				t.Error(err)
			}
			created <- sb
		}()
		<-gated.started

		stepStarted := make(chan struct{})
		stateDuring := make(chan string, 1)
		frozeErr := make(chan error, 1)
		go func() {
			frozeErr <- o.whileFrozen(ctx, ws, nil, func() error {
				close(stepStarted)
				sb := <-created
				state := "gone"
				if cur, err := local.Get(ctx, sb.ID); err == nil {
					state = cur.State
				}
				stateDuring <- state
				return nil
			})
		}()
		early := false
		select {
		case <-stepStarted:
			early = true
		case <-time.After(window):
		}
		close(gated.proceed)
		if err := <-frozeErr; err != nil {
			t.Fatal(err)
		}
		state := <-stateDuring
		if control {
			if !early || state != "running" {
				t.Fatalf("control failed: without the lock the step started early %v, the new sandbox was %s during it; this test proves nothing", early, state)
			}
			continue
		}
		if early {
			t.Error("the host step started while a sandbox over the worktree was being created")
		}
		if state != "paused" {
			t.Errorf("the sandbox created as the freeze began was %s during the host step, want paused", state)
		}
	}
}

// TestWorktreeLockAcrossProcesses: the lock is an flock, so a freeze held
// by another process (a task committing while `agent shell` starts)
// makes a create here wait too. The other process is flock(1) holding the
// worktree's lock file exclusive. Control: without the lock the create
// goes ahead while the other process holds it.
func TestWorktreeLockAcrossProcesses(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) is not installed")
	}
	o, local, ws := lockFixture(t, false)
	path := o.worktreeLockPath(ws)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("flock", "-x", path, "sh", "-c", "echo held; read x")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := o.createSandbox(t.Context(), local, sandbox.Spec{Workspace: ws})
		done <- err
	}()
	select {
	case <-done:
		t.Fatal("a sandbox was created while another process held the worktree frozen")
	case <-time.After(window):
	}
	// Control: without the lock a create goes ahead at once.
	ctl, ctlLocal, _ := lockFixture(t, true)
	ctlDone := make(chan error, 1)
	go func() {
		_, err := ctl.createSandbox(t.Context(), ctlLocal, sandbox.Spec{Workspace: ws})
		ctlDone <- err
	}()
	select {
	case err := <-ctlDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(window):
		t.Error("control failed: without the lock the create waited as well, so this test proves nothing")
	}
	_ = stdin.Close() // the other process's step ends
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
