package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

// TestFreezeStopsEveryProcess: a process started outside any tool call
// (docker exec, so no toolbox sweep ends it) keeps writing to the
// workspace; while the sandbox is frozen the file does not change, and
// after the thaw it grows again and the toolbox session still answers.
// Control: over the same interval without a freeze the file grows.
func TestFreezeStopsEveryProcess(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	t.Logf("signal freeze: %v (engine %s, rootless %v, cgroup v%s)", e.SignalFreeze, e.ServerVersion, e.Rootless, e.CgroupVersion)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) { freezeStopsEveryProcessIn(t, m) })
}

// TestSignalFreezeStopsEveryProcess is the same with the freeze an engine
// without a cgroup freezer uses (rootless Podman on cgroup v1): the
// toolbox stops every process of the sandbox with SIGSTOP from inside.
// Forced here so that it is tested under Docker too.
func TestSignalFreezeStopsEveryProcess(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandbox.UseSignalFreeze(e)
	freezeStopsEveryProcess(t, e)
}

func freezeStopsEveryProcess(t *testing.T, e *sandbox.Engine) {
	freezeStopsEveryProcessIn(t, sandboxtest.FreshMaker(e))
}

func freezeStopsEveryProcessIn(t *testing.T, m *sandboxtest.Maker) {
	e := m.Engine()
	sb := m.New(t, sandbox.Spec{})
	ctx := t.Context()
	if _, err := sb.Tool(ctx, toolbox.OpPing, nil); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("docker", "exec", "-d", "-u", sb.User, sb.ID, "sh", "-c",
		"while :; do echo x >> /workspace/tick; sleep 0.01; done").CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec: %v\n%s", err, out)
	}
	size := func() int64 {
		st, err := os.Stat(filepath.Join(sb.Workspace, "tick"))
		if err != nil {
			return 0
		}
		return st.Size()
	}
	grows := func() bool {
		a := size()
		time.Sleep(300 * time.Millisecond)
		return size() > a
	}
	deadline := time.Now().Add(10 * time.Second)
	for size() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !grows() {
		t.Fatal("control failed: the writer does not write while the sandbox runs")
	}
	if err := sb.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	// A second holder waits for the first one's thaw and then holds its
	// own freeze: the first holder's thaw never releases the second's.
	second := make(chan error, 1)
	go func() { second <- sb.Freeze(ctx) }()
	if grows() {
		t.Fatal("a process of the frozen sandbox still wrote to the workspace")
	}
	select {
	case err := <-second:
		t.Fatalf("a second freeze returned while the first held the sandbox: %v", err)
	default:
	}
	// Nothing new starts in a frozen sandbox: the engine refuses to exec
	// into a paused container, and the signal freeze refuses the same way.
	if _, err := sb.Run(ctx, "true"); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Fatalf("exec into a frozen sandbox: %v, want ErrNotRunning", err)
	}
	if err := sb.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second freeze: %v", err)
	}
	if grows() {
		t.Fatal("the sandbox ran while the second holder froze it")
	}
	if err := sb.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Thaw(ctx); err != nil {
		t.Fatalf("thawing a running sandbox: %v", err)
	}
	if !grows() {
		t.Fatal("the writer did not resume after the thaw")
	}
	if r, err := sb.Tool(ctx, toolbox.ToolBash, []byte(`{"command":"echo alive"}`)); err != nil || r.IsError {
		t.Fatalf("tool call after the thaw: %v %v", r, err)
	}
	// A frozen sandbox can be removed as it is.
	if err := sb.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sb.Remove(rctx); err != nil {
		t.Fatalf("removing a frozen sandbox: %v", err)
	}
	if err := e.Freeze(ctx, sb.ID); err != nil {
		t.Fatalf("freezing a removed sandbox: %v", err)
	}
}

// The signal freeze against processes that keep forking: a shell loop
// whose every write is a new process, several of them, plus a
// multi-threaded writer (busybox's sh runs each pipeline stage as its own
// process). While frozen, no byte is added; thawed, they write again.
// Control: the same writers, without the freeze, keep writing over the
// same interval.
func TestSignalFreezeStopsForkingWriters(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandbox.UseSignalFreeze(e)
	sb := sandboxtest.New(t, e, sandbox.Spec{})
	ctx := t.Context()
	// Started outside any tool call (docker exec -d), so that no sweep of
	// a finished call ends them.
	for i := 0; i < 4; i++ {
		out, err := exec.Command("docker", "exec", "-d", "-u", sb.User, sb.ID, "sh", "-c",
			`while :; do sh -c "echo x >> /workspace/forks"; done`).CombinedOutput()
		if err != nil {
			t.Fatalf("docker exec: %v\n%s", err, out)
		}
	}
	size := func() int64 {
		st, err := os.Stat(filepath.Join(sb.Workspace, "forks"))
		if err != nil {
			return 0
		}
		return st.Size()
	}
	grows := func() bool {
		a := size()
		time.Sleep(300 * time.Millisecond)
		return size() > a
	}
	deadline := time.Now().Add(10 * time.Second)
	for size() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !grows() {
		t.Fatal("control failed: the writers do not write while the sandbox runs")
	}
	for i := 0; i < 5; i++ {
		if err := sb.Freeze(ctx); err != nil {
			t.Fatalf("freeze %d: %v", i, err)
		}
		if grows() {
			t.Fatalf("freeze %d: a forking writer wrote while the sandbox was frozen", i)
		}
		if err := sb.Thaw(ctx); err != nil {
			t.Fatal(err)
		}
		if !grows() {
			t.Fatalf("thaw %d: the writers did not resume", i)
		}
	}
}

// BenchmarkFreezeThaw is one freeze and thaw of a running sandbox, the
// cost every host git step on a worktree pays.
func BenchmarkFreezeThaw(b *testing.B) {
	sb := benchSandbox(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if _, err := sandbox.MeasureFreeze(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
}
