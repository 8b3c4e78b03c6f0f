package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/sandbox"
)

const benchFiles = 10_000

// newBigRepo makes a repository with benchFiles small files in 100
// directories, one commit.
func newBigRepo(b *testing.B) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "big")
	for i := range benchFiles {
		p := filepath.Join(dir, fmt.Sprintf("pkg%02d", i%100), fmt.Sprintf("file%05d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("line %d\n", i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "10k files"}} {
		if out, err := GitErr(dir, args...); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// BenchmarkTaskReady measures, on a 10k-file repository, the time from
// starting `agent task` to the first tool call being ready (worktree,
// branch, hardened sandbox, toolbox answering), against what the same
// steps cost by hand in the same run: `git worktree add` plus
// `docker run --rm --network none IMG true` of the same image.
//
//	go test -run '^$' -bench TaskReady -benchtime 5x ./tests/
func BenchmarkTaskReady(b *testing.B) {
	c := RequireEngine(b)
	env := NewAgentEnv(b, c)
	image := "agent/sandbox:latest"
	env.Env = append(env.Env, "AGENT_SANDBOX_IMAGE="+image)
	repo := newBigRepo(b)
	script := filepath.Join(b.TempDir(), "model.yaml")
	if err := os.WriteFile(script, []byte("model: bench\nturns:\n  - text: \"Nothing to do.\"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	var agentTotal, baseTotal time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		agentTotal += readyTime(b, env, repo, script)
		baseTotal += baselineTime(b, env, repo, image, i)
	}
	b.StopTimer()
	n := float64(b.N)
	agentMS := float64(agentTotal.Milliseconds()) / n
	baseMS := float64(baseTotal.Milliseconds()) / n
	b.ReportMetric(agentMS, "agent-ready-ms")
	b.ReportMetric(baseMS, "worktree+docker-run-ms")
	b.ReportMetric(agentMS/baseMS, "ratio")
}

// readyTime starts agent task and returns the time until its "ready"
// event; the task then finishes (discarded) outside the measurement.
func readyTime(b *testing.B, env *AgentEnv, repo, script string) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := env.Command(ctx, repo, "task", "--json", "--approve", "discard", "--llm", "script:"+script, env.LabelFlag(), "benchmark")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var ready time.Duration
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event.Event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Kind == event.Progress && e.State == "ready" && ready == 0 {
			ready = time.Since(start)
		}
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("agent task: %v", err)
	}
	if ready == 0 {
		b.Fatal("no ready event")
	}
	return ready
}

// baselineTime is `git worktree add` of a new branch plus `docker run
// --rm --network none IMG true`, cleaned up outside the measurement.
func baselineTime(b *testing.B, env *AgentEnv, repo, image string, i int) time.Duration {
	b.Helper()
	wt := filepath.Join(b.TempDir(), fmt.Sprintf("wt%d", i))
	branch := fmt.Sprintf("bench-%d", i)
	start := time.Now()
	if out, err := GitErr(repo, "worktree", "add", "-q", "-b", branch, wt); err != nil {
		b.Fatalf("git worktree add: %v\n%s", err, out)
	}
	run := exec.Command("docker", "run", "--rm", "--network", "none",
		"--label", sandbox.LabelManaged+"="+sandbox.ManagedValue, "--label", sandbox.LabelTest+"="+env.Label, image, "true")
	if out, err := run.CombinedOutput(); err != nil {
		b.Fatalf("docker run: %v\n%s", err, out)
	}
	d := time.Since(start)
	if out, err := GitErr(repo, "worktree", "remove", "--force", wt); err != nil {
		b.Fatalf("git worktree remove: %v\n%s", err, out)
	}
	if out, err := GitErr(repo, "branch", "-D", branch); err != nil {
		b.Fatalf("git branch -D: %v\n%s", err, out)
	}
	return d
}
