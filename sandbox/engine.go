package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/localagent/agent/sandbox/toolbox"
)

// MinAPIVersion is the oldest Engine API this package speaks: CgroupnsMode
// and the exec options it relies on exist from 1.40 (Docker 19.03) on.
const MinAPIVersion = "1.40"

// engine is exactly the set of moby client calls this package makes. Keeping
// it this small documents the package's reach into the daemon and lets unit
// tests substitute a fake.
type engine interface {
	Ping(ctx context.Context) (types.Ping, error)
	Info(ctx context.Context) (system.Info, error)
	ServerVersion(ctx context.Context) (types.Version, error)
	ClientVersion() string
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ContainerCreate(ctx context.Context, cfg *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig, p *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	ContainerExecResize(ctx context.Context, execID string, opts container.ResizeOptions) error
}

var _ engine = (*client.Client)(nil)

// Engine is a connection to the local Docker engine that has been checked to
// be able to run hardened sandboxes.
type Engine struct {
	api engine
	// execs keeps a pause away from an exec being started (execgate.go).
	execs execGate
	// Host is the daemon address the client talks to (for messages).
	Host string
	// APIVersion is the negotiated Engine API version.
	APIVersion string
	// ServerVersion is the engine's version string, e.g. "20.10.24".
	ServerVersion string
	// Runtimes are the OCI runtimes the engine has registered (runc, runsc...).
	Runtimes []string
	// DefaultRuntime is the runtime used when a Spec names none.
	DefaultRuntime string
	// Podman is set when the engine is Podman's Docker-compatible service,
	// whose create request differs in places (see podmanHostConfig).
	Podman bool
	// Rootless is set when the engine runs in a user namespace
	// (security option "name=rootless", or Podman's own info).
	Rootless bool
	// CgroupVersion is "1" or "2" as the engine reports it.
	CgroupVersion string
	// NoCgroupLimits is set when the engine cannot give a container a
	// cgroup of its own (rootless Podman on cgroup v1, or without
	// delegated controllers): it accepts memory, pids and CPU limits and
	// silently ignores them. Create then sets the rlimits that can stand
	// in (see rlimitFallback) and says what is not enforced in
	// Sandbox.Notice.
	NoCgroupLimits bool
	// SignalFreeze is set when sandboxes are frozen by stopping their
	// processes with signals from inside (see signalfreeze.go) instead of
	// the cgroup freezer, which such an engine does not have.
	SignalFreeze bool

	closer func() error // set when Connect opened the client

	// Switches for the security tests only (set through export_test.go),
	// so that each can show its attack working without the defence:
	// frameLimit overrides toolbox.MaxResponseBytes (negative: no limit);
	// lenientFrames numbers requests 1, 2, 3... and ignores responses
	// nobody asked for, as sessions once did.
	frameLimit    int
	lenientFrames bool

	// gate bounds the containers being created at once (throttle.go).
	gate engineGate

	// signalFallback is set once the engine's pause failed for want of
	// a freezer, when SignalFreeze could not be told up front.
	signalFallback atomic.Bool
	// signalRun replaces running the toolbox's freeze and thaw modes in
	// unit tests of the holders' bookkeeping.
	signalRun func(ctx context.Context, id, mode string) error
}

// maxFrame is the largest response frame a session accepts.
func (e *Engine) maxFrame() int {
	if e.frameLimit != 0 {
		return e.frameLimit
	}
	return toolbox.MaxResponseBytes
}

// Close releases the client when Connect opened it; an Engine made by New
// leaves its client to the caller.
func (e *Engine) Close() error {
	if e.closer == nil {
		return nil
	}
	return e.closer()
}

// Connect opens a client for the engine named by the environment
// (DOCKER_HOST, DOCKER_API_VERSION, ...), negotiates the API version and
// checks what a sandbox needs: an API of at least MinAPIVersion and seccomp
// enabled on the engine. Errors say how to fix the problem.
func Connect(ctx context.Context) (*Engine, error) {
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w (check DOCKER_HOST)", err)
	}
	e, err := New(ctx, c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	e.closer = c.Close
	return e, nil
}

// New checks an existing client (which should have API version negotiation
// enabled) the same way Connect does. The caller keeps ownership of c.
func New(ctx context.Context, c *client.Client) (*Engine, error) {
	return newEngine(ctx, c, c.DaemonHost())
}

func newEngine(ctx context.Context, api engine, host string) (*Engine, error) {
	ping, err := api.Ping(ctx)
	if err != nil {
		return nil, connectError(host, err)
	}
	if c, ok := api.(*client.Client); ok {
		c.NegotiateAPIVersionPing(ping)
	}
	e := &Engine{api: api, Host: host, APIVersion: api.ClientVersion()}
	if ping.APIVersion != "" && versions.LessThan(ping.APIVersion, MinAPIVersion) {
		return nil, fmt.Errorf("the Docker engine at %s speaks API %s, older than the %s this program needs: upgrade Docker to 19.03 or newer", host, ping.APIVersion, MinAPIVersion)
	}
	info, err := api.Info(ctx)
	if err != nil {
		return nil, connectError(host, err)
	}
	e.ServerVersion = info.ServerVersion
	for _, opt := range info.SecurityOptions {
		if opt == "name=rootless" || strings.HasPrefix(opt, "name=rootless,") {
			e.Rootless = true
		}
	}
	if v, err := api.ServerVersion(ctx); err == nil {
		for _, c := range v.Components {
			if strings.HasPrefix(c.Name, "Podman") {
				e.Podman = true
			}
		}
	}
	e.CgroupVersion = info.CgroupVersion
	if e.Podman {
		// Podman's Docker-compatible info reports neither rootless mode nor
		// missing controllers (it claims memory and pids limits that a
		// rootless cgroup v1 container never gets); its own info does.
		if h, err := podmanHostInfo(ctx, api); err == nil {
			e.applyPodmanHost(h)
		} else {
			// Unknown: assume the weakest case rather than trust limits
			// and a freezer the engine may not give.
			e.Rootless, e.NoCgroupLimits, e.SignalFreeze = true, true, true
		}
	}
	switch os.Getenv(FreezeEnv) {
	case "signal":
		e.SignalFreeze = true
	case "cgroup":
		e.SignalFreeze = false
	}
	e.DefaultRuntime = info.DefaultRuntime
	for name := range info.Runtimes {
		e.Runtimes = append(e.Runtimes, name)
	}
	if !SeccompEnabled(info.SecurityOptions) {
		return nil, fmt.Errorf("seccomp is not enabled on the Docker engine at %s (security options: %s): sandboxes rely on it; install a Docker built with seccomp support and do not set \"seccomp-profile\": \"unconfined\" in daemon.json", host, strings.Join(info.SecurityOptions, ", "))
	}
	return e, nil
}

// SeccompEnabled reports whether the engine's security options (from
// Info.SecurityOptions, e.g. "name=seccomp,profile=default") show seccomp
// with a profile other than unconfined.
func SeccompEnabled(securityOptions []string) bool {
	for _, opt := range securityOptions {
		var name, profile string
		for _, kv := range strings.Split(opt, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "name":
				name = v
			case "profile":
				profile = v
			}
		}
		if name == "seccomp" && profile != "unconfined" {
			return true
		}
	}
	return false
}

// connectError turns a failure to talk to the daemon into advice.
func connectError(host string, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("permission denied talking to the Docker engine at %s: add your user to the docker group (`sudo usermod -aG docker $USER`, then log in again) or point DOCKER_HOST at an engine you may use: %w", host, err)
	case client.IsErrConnectionFailed(err), errors.Is(err, fs.ErrNotExist):
		hint := "start it (`sudo systemctl start docker`)"
		if os.Getenv("DOCKER_HOST") != "" {
			hint += " or fix DOCKER_HOST"
		} else {
			hint += " or set DOCKER_HOST to the engine's address"
		}
		return fmt.Errorf("cannot reach the Docker engine at %s: %s: %w", host, hint, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return fmt.Errorf("docker engine at %s: %w", host, err)
	}
}

// ImageMissingError says that a sandbox image is not present. Images are
// never pulled: they are built or loaded from a bundle.
type ImageMissingError struct{ Image string }

func (e *ImageMissingError) Error() string {
	return fmt.Sprintf("image %s is not present: build it with `agent images build sandbox` or load a bundle with `agent images load -i FILE` (images are never pulled)", e.Image)
}

// ImagePresent checks that ref exists locally and returns *ImageMissingError
// when it does not.
func (e *Engine) ImagePresent(ctx context.Context, ref string) error {
	if _, err := e.api.ImageInspect(ctx, ref); err != nil {
		if cerrdefs.IsNotFound(err) {
			return &ImageMissingError{Image: ref}
		}
		return e.wrap(fmt.Sprintf("inspecting image %s", ref), err)
	}
	return nil
}

// wrap adds context to an engine error, turning connection failures into
// advice.
func (e *Engine) wrap(what string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s: %w", what, connectError(e.Host, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// managedFilter selects this project's sandboxes (optionally narrowed by more
// labels, "key=value" or "key").
func managedFilter(extra ...string) filters.Args {
	f := filters.NewArgs(
		filters.Arg("label", LabelManaged+"="+ManagedValue),
		filters.Arg("label", LabelKind+"="+KindSandbox),
	)
	for _, l := range extra {
		f.Add("label", l)
	}
	return f
}
