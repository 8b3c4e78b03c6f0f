package sandbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

func TestConnectUnreachableEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no.sock"))
	_, err := sandbox.Connect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot reach the Docker engine") || !strings.Contains(err.Error(), "DOCKER_HOST") {
		t.Errorf("want advice about starting the engine or DOCKER_HOST, got %v", err)
	}
}

func TestConnectReportsEngine(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	if e.APIVersion == "" || e.ServerVersion == "" || len(e.Runtimes) == 0 {
		t.Errorf("engine facts missing: %+v", e)
	}
}

// Failed creates leave nothing behind.
func TestCreateFailuresLeaveNothing(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	c := sandboxtest.Client(t)
	label := sandboxtest.TestLabel(t)
	tb := sandboxtest.Toolbox(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
		want string
	}{
		{"missing image", sandbox.Spec{Workspace: t.TempDir(), Image: "agent/no-such-image:latest"}, "agent images build sandbox"},
		{"missing workspace", sandbox.Spec{Workspace: filepath.Join(t.TempDir(), "gone")}, "does not exist"},
		{"missing toolbox", sandbox.Spec{Workspace: t.TempDir(), Toolbox: "/nonexistent/agent-toolbox"}, "make build"},
		{"unknown runtime", sandbox.Spec{Workspace: t.TempDir(), Runtime: "no-such-runtime"}, "not registered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			if spec.Image == "" {
				spec.Image = sandboxtest.BusyboxImage
			}
			if spec.Toolbox == "" {
				spec.Toolbox = tb
			}
			spec.Labels = map[string]string{sandbox.LabelTest: label}
			sb, err := e.Create(ctx, spec)
			if err == nil {
				_ = sb.Remove(ctx)
				t.Fatal("create succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			var missing *sandbox.ImageMissingError
			if tc.name == "missing image" && !errors.As(err, &missing) {
				t.Errorf("missing image error is %T", err)
			}
		})
	}
	if left := sandboxtest.Containers(t, c, label); len(left) != 0 {
		t.Errorf("failed creates left %d containers", len(left))
	}
}

func TestGetListRemove(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ctx := context.Background()
	a := sandboxtest.New(t, e, sandbox.Spec{})
	b := sandboxtest.New(t, e, sandbox.Spec{})
	for _, ref := range []string{a.ID, a.ID[:12], a.Name} {
		got, err := e.Get(ctx, ref)
		if err != nil || got.ID != a.ID || got.Workspace != a.Workspace || got.User != a.User || got.State != "running" {
			t.Errorf("Get(%q) = %+v, %v", ref, got, err)
		}
	}
	if _, err := e.Get(ctx, "zzzz"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get of an unknown id: %v", err)
	}
	list, err := e.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelTest + "=" + b.Labels[sandbox.LabelTest]}})
	if err != nil || len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("List by label: %v %v", list, err)
	}
	// A container without the project's labels is never matched, even by
	// its exact id.
	c := sandboxtest.Client(t)
	labels := sandboxtest.Labels(t)
	delete(labels, sandbox.LabelManaged)
	other, err := c.ContainerCreate(ctx, &container.Config{Image: sandboxtest.BusyboxImage, Cmd: []string{"true"}, Labels: labels}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.RemoveOnCleanup(t, c, other.ID)
	if _, err := e.Get(ctx, other.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get matched an unmanaged container: %v", err)
	}
	if err := e.Remove(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after Remove: %v", err)
	}
	if err := e.Remove(ctx, a.ID); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// Cancelling a create at any point leaves no container behind.
func TestCreateCancelledLeavesNothing(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	c := sandboxtest.Client(t)
	label := sandboxtest.TestLabel(t)
	spec := sandbox.Spec{Workspace: t.TempDir(), Image: sandboxtest.BusyboxImage, Toolbox: sandboxtest.Toolbox(t),
		Labels: map[string]string{sandbox.LabelTest: label}}
	for d := time.Duration(0); d <= 240*time.Millisecond; d += 30 * time.Millisecond {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		sb, err := e.Create(ctx, spec)
		cancel()
		if err == nil {
			if err := sb.Remove(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if left := sandboxtest.Containers(t, c, label); len(left) != 0 {
		for _, ct := range left {
			t.Logf("left: %s %s %s", ct.ID[:12], ct.Names, ct.State)
			sandboxtest.RemoveOnCleanup(t, c, ct.ID)
		}
		t.Errorf("cancelled creates left %d containers", len(left))
	}
}
