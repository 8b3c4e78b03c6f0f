package cli_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// One short benchmark run end to end; the targets are reported, not
// asserted (timings on a shared machine are noisy).
func TestBenchJSON(t *testing.T) {
	label := sandboxEnv(t)
	t.Setenv("AGENT_TEST_AS_AGENT", "1")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	r := agentCLI(t, "", "bench", "--json", "--iterations", "1", "--start-files", "300", "--concurrent", "3", "--rounds", "1",
		"--deep-commits", "40", "--label", sandbox.LabelTest+"="+label)
	if r.code != 0 {
		t.Fatalf("bench: exit %d: %s", r.code, r.errOut)
	}
	var full struct {
		sandbox.BenchReport
		TaskStart  *orchestrator.StartBenchReport `json:"task_start"`
		Concurrent *sandbox.ConcurrentReport      `json:"concurrent"`
		Deep       *orchestrator.DeepReport       `json:"deep_history"`
		GitCount   *orchestrator.GitCountReport   `json:"git_processes"`
	}
	if err := json.Unmarshal([]byte(r.out), &full); err != nil {
		t.Fatalf("bench --json printed %q: %v", r.out, err)
	}
	rep := full.BenchReport
	if c := full.Concurrent; c == nil || c.Ready.N != 3 || c.DockerRun.N != 3 || c.Failures != 0 || c.P95VsDockerRun <= 0 {
		t.Errorf("concurrent: %+v", c)
	}
	if s := full.TaskStart; s == nil || len(s.Sizes) != 1 || s.Sizes[0].Files != 300 || s.Sizes[0].ColdMS <= 0 ||
		s.Sizes[0].Warm.N == 0 || s.Sizes[0].Baseline.N == 0 || s.Sizes[0].WarmVsBaseline <= 0 ||
		s.Sizes[0].NewCommit.N != s.Sizes[0].Warm.N || s.Sizes[0].NewCommitVsBaseline <= 0 || s.Sizes[0].CommitFrozen.N == 0 || s.Sizes[0].TargetMS != 1500 {
		t.Errorf("task start: %+v", s)
	}
	if d := full.Deep; d == nil || d.Commits != 40 || len(d.TasksMS) != 3 || len(d.VsBaseline) != 3 || d.Baseline.N != 3 || d.GenerateMS <= 0 ||
		slices.Min(d.TasksMS) <= 0 || slices.Min(d.ProcessMS) <= 0 {
		t.Errorf("deep history: %+v", d)
	}
	// The count is what the wrapper saw, so it cannot be zero for a task
	// that made a worktree.
	if g := full.GitCount; g == nil || g.Total == 0 || g.BySubcommand["worktree"] == 0 || g.Target != 20 {
		t.Errorf("git processes: %+v", g)
	}
	for name, s := range map[string]sandbox.Stats{"ready": rep.Ready, "docker run": rep.DockerRun, "read_file": rep.ReadFile, "bash": rep.BashTrue, "docker exec": rep.DockerExec} {
		if s.N == 0 || s.MedianMS <= 0 || s.P95MS < s.MedianMS {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if rep.ReadyVsDockerRun <= 0 || rep.ReadFileVsDockerExec <= 0 {
		t.Errorf("ratios: %+v", rep)
	}
	if rep.Isolation != sandbox.IsolationRunc {
		t.Errorf("isolation %q, want the configured runc", rep.Isolation)
	}
	t.Logf("ready %.2fx docker run, read_file 1/%.0f of docker exec", rep.ReadyVsDockerRun, 1/rep.ReadFileVsDockerExec)
	if !strings.Contains(r.errOut, "bench:") {
		t.Errorf("no progress on stderr: %q", r.errOut)
	}
	if left := sandboxtest.Containers(t, sandboxtest.Client(t), label); len(left) != 0 {
		t.Errorf("bench left %d containers", len(left))
	}
}

func TestBenchUsage(t *testing.T) {
	r := agentCLI(t, "", "bench", "--iterations", "-1")
	if r.code != 2 {
		t.Errorf("negative iterations: %+v", r)
	}
	if r := agentCLI(t, "", "bench", "--isolation", "runc,kata"); r.code != 2 || !strings.Contains(r.errOut, "runsc") {
		t.Errorf("bad isolation: %+v", r)
	}
}

// Two isolations are measured in turn and compared (here the same one
// twice, which every engine offers: the ratios are then about 1).
func TestBenchComparesIsolations(t *testing.T) {
	label := sandboxEnv(t)
	r := agentCLI(t, "", "bench", "--json", "--iterations", "1", "--start-files", "0", "--concurrent", "0",
		"--deep-commits", "0", "--git-count=false", "--isolation", "runc,runc", "--label", sandbox.LabelTest+"="+label)
	if r.code != 0 {
		t.Fatalf("bench: exit %d: %s", r.code, r.errOut)
	}
	var full struct {
		ByIsolation []sandbox.BenchReport `json:"by_isolation"`
		Compared    map[string]any        `json:"compared"`
	}
	if err := json.Unmarshal([]byte(r.out), &full); err != nil {
		t.Fatalf("bench --json printed %q: %v", r.out, err)
	}
	if len(full.ByIsolation) != 2 || full.ByIsolation[1].Ready.N == 0 || full.Compared["of"] != "runc" {
		t.Fatalf("reports %+v compared %v", full.ByIsolation, full.Compared)
	}
	for _, k := range []string{"sandbox_ready", "read_file", "bash_true"} {
		if v, _ := full.Compared[k].(float64); v <= 0 {
			t.Errorf("compared %s = %v", k, full.Compared[k])
		}
	}
}
