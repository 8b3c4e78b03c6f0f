package sandboxtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/localagent/agent/sandbox"
)

// Images present on development and CI machines.
const (
	// BusyboxImage is the tiny image most tests use.
	BusyboxImage = "agent/busybox:latest"
	// SandboxImage is the default Debian-based sandbox image (bash, ps, git).
	SandboxImage = "agent/sandbox:latest"
)

var (
	toolboxOnce sync.Once
	toolboxPath string
	toolboxErr  error

	insecureOnce sync.Once
	insecurePath string
	insecureErr  error
)

// InsecureToolbox returns an agent-toolbox built with the
// agent_insecure_dumpable tag: its processes stay dumpable, so the commands
// it runs can attach to them. Security tests use it for their control
// runs only, to show that an attack on the toolbox works without the
// defence; nothing else ever builds it.
func InsecureToolbox(t testing.TB) string {
	t.Helper()
	insecureOnce.Do(func() { insecurePath, insecureErr = buildToolbox("agent_insecure_dumpable") })
	if insecureErr != nil {
		t.Fatalf("building the insecure agent-toolbox: %v", insecureErr)
	}
	return insecurePath
}

// Toolbox returns the path of a static agent-toolbox built from this
// checkout. It is built at most once per test binary and cached across test
// binaries under the user cache directory, keyed by a hash of its sources.
func Toolbox(t testing.TB) string {
	t.Helper()
	toolboxOnce.Do(func() {
		// A test binary run as another user (the rootless Podman suite)
		// is handed a toolbox built beforehand.
		if p := os.Getenv("AGENT_TEST_TOOLBOX"); p != "" {
			toolboxPath, toolboxErr = p, sandbox.CheckToolbox(p)
			return
		}
		toolboxPath, toolboxErr = buildToolbox()
	})
	if toolboxErr != nil {
		t.Fatalf("building agent-toolbox: %v", toolboxErr)
	}
	return toolboxPath
}

// moduleRoot is the directory of go.mod, found from this file's location.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func buildToolbox(tags ...string) (string, error) {
	root := moduleRoot()
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), tags)
	for _, dir := range []string{"cmd/agent-toolbox", "sandbox/toolbox"} {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		sort.Strings(files)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			fh, err := os.Open(f)
			if err != nil {
				return "", err
			}
			fmt.Fprintln(h, f)
			_, _ = io.Copy(h, fh)
			fh.Close()
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "agent-test")
	out := filepath.Join(dir, "agent-toolbox-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(out); err == nil {
		// Touched so that pruning by other test runs sees it in use.
		now := time.Now()
		_ = os.Chtimes(out, now, now)
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-tags", strings.Join(tags, ","), "-o", tmp, "./cmd/agent-toolbox")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("%v: %s", err, b)
	}
	// Rename is atomic, so concurrent test binaries never see a partial file.
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	pruneToolboxes(dir, out)
	return out, nil
}

// pruneToolboxes removes builds of older sources. A grace period leaves
// alone the binary of a test run still in progress (its sandboxes
// bind-mount the file).
func pruneToolboxes(dir, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, "agent-toolbox-*"))
	for _, f := range old {
		if fi, err := os.Stat(f); err == nil && f != keep && time.Since(fi.ModTime()) > 30*time.Minute {
			_ = os.Remove(f)
		}
	}
}

// RequireDocker connects to the engine. Under -short it skips the test
// (integration tests run only without -short); otherwise an unreachable
// engine fails the test, so a broken machine cannot pass silently.
func RequireDocker(t testing.TB) *sandbox.Engine {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test against the Docker engine; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := sandbox.Connect(ctx)
	if err != nil {
		t.Fatalf("Docker engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Client returns a raw engine client for checks from outside a sandbox
// (inspect) and for control containers.
func Client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestLabel returns a label value unique to this test run, for
// sandbox.LabelTest.
func TestLabel(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return name + "-" + hex.EncodeToString(b)
}

// Labels returns the project's labels plus a unique LabelTest, to put on
// control containers a test creates itself.
func Labels(t testing.TB) map[string]string {
	return map[string]string{sandbox.LabelManaged: sandbox.ManagedValue, sandbox.LabelTest: TestLabel(t)}
}

// IsolationEnv names the isolation integration tests run their sandboxes
// under ("runc" when unset): scripts/podman-runsc-tests.sh sets it to runsc
// to run the same suites under gVisor.
const IsolationEnv = "AGENT_TEST_ISOLATION"

// Isolation is the isolation the tests' sandboxes run under (IsolationEnv).
// Tests that check what the isolation enforces branch on it.
func Isolation(t testing.TB) sandbox.Isolation {
	t.Helper()
	i, err := sandbox.ParseIsolation(os.Getenv(IsolationEnv))
	if err != nil {
		t.Fatalf("%s: %v", IsolationEnv, err)
	}
	return i
}

// New creates a sandbox for the test: spec's zero fields become a fresh
// temporary workspace, BusyboxImage, the test toolbox and Isolation; it is
// labelled with a unique LabelTest and removed at cleanup.
func New(t testing.TB, e *sandbox.Engine, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	if spec.Workspace == "" {
		spec.Workspace = t.TempDir()
	}
	if spec.Image == "" {
		spec.Image = BusyboxImage
	}
	if spec.Toolbox == "" {
		spec.Toolbox = Toolbox(t)
	}
	if spec.Isolation == "" {
		spec.Isolation = Isolation(t)
	}
	labels := map[string]string{sandbox.LabelTest: TestLabel(t)}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	spec.Labels = labels
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := e.Create(ctx, spec)
	if err != nil {
		t.Fatalf("creating sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Remove(ctx); err != nil {
			t.Errorf("removing sandbox %s: %v", sb.ID, err)
		}
	})
	return sb
}

// Containers lists every container (running or not) carrying
// LabelTest=value.
func Containers(t testing.TB, c *client.Client, value string) []container.Summary {
	t.Helper()
	cs, err := c.ContainerList(context.Background(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelTest+"="+value)),
	})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	return cs
}

// RemoveOnCleanup removes the container id when the test ends.
func RemoveOnCleanup(t testing.TB, c *client.Client, id string) {
	t.Cleanup(func() {
		err := c.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing container %s: %v", id, err)
		}
	})
}

// RunControl runs script with /bin/sh -c in a throwaway container built
// from cfg and hc exactly as given (no hardening added: this is how a
// security test shows that its attack works when the defence is off). The
// container is labelled for this test and removed afterwards. It returns
// the combined output and the exit code.
func RunControl(t testing.TB, c *client.Client, cfg *container.Config, hc *container.HostConfig, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg.Cmd = []string{"/bin/sh", "-c", script}
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	for k, v := range Labels(t) {
		cfg.Labels[k] = v
	}
	if cfg.Image == "" {
		cfg.Image = BusyboxImage
	}
	created, err := c.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		t.Fatalf("creating control container: %v", err)
	}
	defer func() {
		_ = c.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}()
	waitC, errC := c.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	if err := c.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("starting control container: %v", err)
	}
	var code int
	select {
	case w := <-waitC:
		code = int(w.StatusCode)
	case err := <-errC:
		t.Fatalf("waiting for control container: %v", err)
	}
	logs, err := c.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("control container logs: %v", err)
	}
	defer logs.Close()
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatalf("control container logs: %v", err)
	}
	return out.String(), code
}

// Mode is how a Maker makes sandboxes: Fresh ones with Engine.Create, or
// Pooled ones claimed from a warm pool (sandbox.Pool) made for the same
// spec. Security tests run in every mode (EachMode), so that a pooled
// sandbox is shown to pass exactly what a fresh one passes.
type Mode string

// Modes.
const (
	Fresh  Mode = "fresh"
	Pooled Mode = "pooled"
)

// Maker makes the sandboxes of one test in one Mode.
type Maker struct {
	Mode Mode
	e    *sandbox.Engine
	pool *sandbox.Pool
}

// EachMode runs f as a subtest per Mode, with a Maker of that mode.
func EachMode(t *testing.T, e *sandbox.Engine, f func(t *testing.T, m *Maker)) {
	for _, mode := range []Mode{Fresh, Pooled} {
		t.Run(string(mode), func(t *testing.T) {
			m := &Maker{Mode: mode, e: e}
			if mode == Pooled && Isolation(t) == sandbox.IsolationRunsc {
				// Never pooled: a task under gVisor gets a fresh sandbox,
				// which the fresh run covers (see sandbox.poolable).
				t.Skip("sandboxes under gVisor are not pooled")
			}
			if mode == Pooled {
				p, err := sandbox.NewPool(e, filepath.Join(t.TempDir(), "pool"), 1)
				if err != nil {
					t.Fatal(err)
				}
				m.pool = p
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					p.WaitRefills()
					members, _ := p.Members(ctx)
					for _, sb := range members {
						_ = e.Remove(ctx, sb.ID)
					}
				})
			}
			f(t, m)
		})
	}
}

// FreshMaker is a Fresh maker over e.
func FreshMaker(e *sandbox.Engine) *Maker { return &Maker{Mode: Fresh, e: e} }

// Engine is the maker's engine.
func (m *Maker) Engine() *sandbox.Engine { return m.e }

// Pool is the pool of a Pooled maker (nil for Fresh).
func (m *Maker) Pool() *sandbox.Pool { return m.pool }

// Lookup is the backend lookups go through: for Pooled, the engine with
// the pool's claims applied (as the orchestrator sees it).
func (m *Maker) Lookup() sandbox.Backend {
	if m.pool == nil {
		return m.e
	}
	return sandbox.WithPoolClaims(m.e, m.pool.Dir())
}

// New makes a sandbox as sandboxtest.New does, in the maker's mode: a
// Pooled maker first fills its pool for spec, then claims the member for
// spec's workspace, and fails the test when the claim does not come from
// the pool. A spec the pool refuses (sandbox.ErrNotPoolable) gets a fresh
// sandbox, as the orchestrator does; its Pool field is then empty.
func (m *Maker) New(t testing.TB, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	if m.pool == nil {
		return New(t, m.e, spec)
	}
	if spec.Workspace == "" {
		spec.Workspace = t.TempDir()
	}
	if spec.Image == "" {
		spec.Image = BusyboxImage
	}
	if spec.Toolbox == "" {
		spec.Toolbox = Toolbox(t)
	}
	labels := map[string]string{sandbox.LabelTest: TestLabel(t)}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	spec.Labels = labels
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.pool.Fill(ctx, spec); err != nil {
		if errors.Is(err, sandbox.ErrNotPoolable) {
			t.Logf("not pooled (%v): a fresh sandbox", err)
			return New(t, m.e, spec)
		}
		t.Fatalf("filling the pool: %v", err)
	}
	sb, err := m.pool.Claim(ctx, spec)
	if err != nil {
		t.Fatalf("claiming a pooled sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Remove(ctx); err != nil {
			t.Errorf("removing sandbox %s: %v", sb.ID, err)
		}
	})
	if sb.Pool != sandbox.PoolClaimed {
		t.Fatalf("claimed sandbox %s is not marked as a pool member", sb.ID)
	}
	return sb
}
