package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// One short benchmark run end to end; the targets are reported, not
// asserted (timings on a shared machine are noisy).
func TestBenchJSON(t *testing.T) {
	label := sandboxEnv(t)
	r := agentCLI(t, "", "bench", "--json", "--iterations", "1", "--label", sandbox.LabelTest+"="+label)
	if r.code != 0 {
		t.Fatalf("bench: exit %d: %s", r.code, r.errOut)
	}
	var rep sandbox.BenchReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("bench --json printed %q: %v", r.out, err)
	}
	for name, s := range map[string]sandbox.Stats{"ready": rep.Ready, "docker run": rep.DockerRun, "read_file": rep.ReadFile, "bash": rep.BashTrue, "docker exec": rep.DockerExec} {
		if s.N == 0 || s.MedianMS <= 0 || s.P95MS < s.MedianMS {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if rep.ReadyVsDockerRun <= 0 || rep.ReadFileVsDockerExec <= 0 {
		t.Errorf("ratios: %+v", rep)
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
}
