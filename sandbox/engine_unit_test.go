package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"

	cerrdefs "github.com/containerd/errdefs"
)

type checkEngine struct {
	engine
	ping     types.Ping
	pingErr  error
	info     system.Info
	imageErr error
}

func (c *checkEngine) Ping(context.Context) (types.Ping, error)  { return c.ping, c.pingErr }
func (c *checkEngine) Info(context.Context) (system.Info, error) { return c.info, nil }
func (c *checkEngine) ServerVersion(context.Context) (types.Version, error) {
	return types.Version{}, nil
}
func (c *checkEngine) ClientVersion() string { return c.ping.APIVersion }
func (c *checkEngine) ImageInspect(context.Context, string, ...client.ImageInspectOption) (image.InspectResponse, error) {
	return image.InspectResponse{}, c.imageErr
}

func goodEngine() *checkEngine {
	return &checkEngine{
		ping: types.Ping{APIVersion: "1.41"},
		info: system.Info{ServerVersion: "20.10.24", SecurityOptions: []string{"name=seccomp,profile=default"},
			Runtimes: map[string]system.RuntimeWithStatus{"runc": {}}, DefaultRuntime: "runc"},
	}
}

func TestEngineChecks(t *testing.T) {
	ctx := context.Background()
	e, err := newEngine(ctx, goodEngine(), "unix:///run/docker.sock")
	if err != nil || e.APIVersion != "1.41" || e.ServerVersion != "20.10.24" || len(e.Runtimes) != 1 {
		t.Fatalf("good engine: %+v %v", e, err)
	}

	old := goodEngine()
	old.ping.APIVersion = "1.39"
	if _, err := newEngine(ctx, old, "h"); err == nil || !strings.Contains(err.Error(), "upgrade Docker") {
		t.Errorf("API 1.39: %v", err)
	}

	noSeccomp := goodEngine()
	noSeccomp.info.SecurityOptions = []string{"name=seccomp,profile=unconfined"}
	if _, err := newEngine(ctx, noSeccomp, "h"); err == nil || !strings.Contains(err.Error(), "seccomp is not enabled") {
		t.Errorf("seccomp unconfined: %v", err)
	}

	down := goodEngine()
	down.pingErr = context.DeadlineExceeded
	if _, err := newEngine(ctx, down, "h"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ping timeout: %v", err)
	}
}

func TestImagePresent(t *testing.T) {
	ce := goodEngine()
	e := &Engine{api: ce, Host: "h"}
	ce.imageErr = cerrdefs.ErrNotFound
	err := e.ImagePresent(context.Background(), "agent/sandbox:latest")
	var missing *ImageMissingError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "agent images build sandbox") || !strings.Contains(err.Error(), "agent images load -i FILE") {
		t.Errorf("missing image: %v", err)
	}
	ce.imageErr = errors.New("boom")
	if err := e.ImagePresent(context.Background(), "x"); err == nil || errors.As(err, &missing) {
		t.Errorf("other error: %v", err)
	}
	ce.imageErr = nil
	if err := e.ImagePresent(context.Background(), "x"); err != nil {
		t.Error(err)
	}
}
