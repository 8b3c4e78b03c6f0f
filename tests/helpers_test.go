package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// The built binaries shared by every suite in this package: `agent` and
// `agent-toolbox` side by side (agent finds the toolbox next to itself),
// built once, on first use, into a temporary directory that TestMain
// removes.
var (
	binOnce  sync.Once
	binDir   string
	binErr   error
	prebuilt bool
)

// ModuleRoot is the repository root (the directory holding go.mod).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// Binaries builds agent and agent-toolbox once (static, like `make
// build`) and returns the directory holding both.
func Binaries(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		// AGENT_TEST_BIN_DIR points at binaries already built (e.g. by
		// `make build`); they are used as they are and not removed.
		if d := os.Getenv("AGENT_TEST_BIN_DIR"); d != "" {
			binDir, binErr = filepath.Abs(d)
			prebuilt = true
			return
		}
		binDir, binErr = os.MkdirTemp("", "agent-tests-bin-*")
		if binErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{
			{"agent", "./cmd/agent"},
			{"agent-toolbox", "./cmd/agent-toolbox"},
		} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(binDir, b.out), b.pkg)
			cmd.Dir = ModuleRoot()
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("building %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// AgentBin is the path of the built agent binary.
func AgentBin(t testing.TB) string { return filepath.Join(Binaries(t), "agent") }

func cleanupBinaries() {
	if binDir != "" && !prebuilt {
		_ = os.RemoveAll(binDir)
	}
}

// RequireEngine skips under -short and fails when the Docker engine is
// unreachable (an integration test must not pass silently on a broken
// machine). It returns a client closed at cleanup.
func RequireEngine(t testing.TB) *client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test against the Docker engine; skipped with -short")
	}
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("the Docker engine is not reachable: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// UniqueLabel returns a value for sandbox.LabelTest unique to this test.
func UniqueLabel(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", "-", " ", "_", "#", "").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return name + "-" + hex.EncodeToString(b)
}

// LabelledContainers lists the containers carrying sandbox.LabelTest=value.
func LabelledContainers(ctx context.Context, c *client.Client, value string) ([]container.Summary, error) {
	return c.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelTest+"="+value))})
}

// removeLabelled removes exactly the containers carrying
// sandbox.LabelTest=value (never other tests').
func removeLabelled(c *client.Client, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := LabelledContainers(ctx, c, value)
	if err != nil {
		return fmt.Errorf("listing containers of %s: %w", value, err)
	}
	for _, ct := range cs {
		_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	return nil
}

// RemoveLabelledOnCleanup removes, when the test ends, exactly the
// containers carrying sandbox.LabelTest=value.
func RemoveLabelledOnCleanup(t testing.TB, c *client.Client, value string) {
	t.Cleanup(func() {
		if err := removeLabelled(c, value); err != nil {
			t.Error(err)
		}
	})
}

// AgentEnv is an isolated environment for running the built agent: its
// own state directory and config home, so no user configuration leaks in.
type AgentEnv struct {
	T        testing.TB
	Bin      string
	StateDir string
	Label    string // sandbox.LabelTest value of this test's containers
	Env      []string
	// Timeout bounds each Run; 0 means three minutes. Runs that install
	// real packages (environment builds) need more on a busy machine.
	Timeout time.Duration
}

// NewAgentEnv builds the binaries and prepares an isolated environment.
// Sandboxes of tasks run through Run carry a unique LabelTest and are
// removed at cleanup.
func NewAgentEnv(t testing.TB, c *client.Client) *AgentEnv {
	t.Helper()
	dir := t.TempDir()
	e := &AgentEnv{T: t, Bin: AgentBin(t), StateDir: filepath.Join(dir, "state"), Label: UniqueLabel(t)}
	e.Env = append(os.Environ(),
		"AGENT_STATE_DIR="+e.StateDir,
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"AGENT_SANDBOX_IMAGE=agent/busybox:latest",
		// No warm pool unless a test asks for one: its idle sandboxes
		// would outlive each command (tests that count containers rely
		// on none); TestTaskWarmPool turns it on.
		"AGENT_SANDBOX_POOL=0",
	)
	if c != nil {
		RemoveLabelledOnCleanup(t, c, e.Label)
	}
	return e
}

// LabelFlag is the hidden flag that puts this env's test label on the
// sandboxes `agent task`, `resume` and `shell` create.
func (e *AgentEnv) LabelFlag() string { return "--label=" + sandbox.LabelTest + "=" + e.Label }

// Command returns the agent command line, ready to start.
func (e *AgentEnv) Command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.Bin, args...)
	cmd.Dir = dir
	cmd.Env = e.Env
	return cmd
}

// Run runs agent in dir and returns its exit code, stdout and stderr.
func (e *AgentEnv) Run(dir string, args ...string) (int, string, string) {
	e.T.Helper()
	limit := e.Timeout
	if limit == 0 {
		limit = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := e.Command(ctx, dir, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			e.T.Fatalf("running agent %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errOut.String()
}

// Git runs plain git in dir (as a user would) and returns its trimmed
// output, failing the test on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := GitErr(dir, args...)
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return out
}

// GitErr runs plain git in dir.
func GitErr(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@localhost",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@localhost")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// NewSampleRepo creates a git repository holding demo/sample with one
// commit on main.
func NewSampleRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	out, err := exec.Command(filepath.Join(ModuleRoot(), "demo", "setup.sh"), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("demo/setup.sh: %v\n%s", err, out)
	}
	return dir
}

// fataler is what *testing.T and *testscript.TestScript share.
type fataler interface {
	Fatalf(format string, args ...any)
}

// taskStore opens the task records of stateDir.
func taskStore(t fataler, stateDir string) *store.Store {
	s, err := store.Open(filepath.Join(stateDir, "tasks"))
	if err != nil {
		t.Fatalf("opening the task store: %v", err)
	}
	return s
}

// onlyTask returns the record of the only task in stateDir, failing when
// there is not exactly one.
func onlyTask(t fataler, stateDir string) *store.Task {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	all, err := taskStore(t, stateDir).List()
	if err != nil || len(all) != 1 {
		t.Fatalf("want exactly one task, have %d (%v)", len(all), err)
	}
	return all[0]
}
