package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/localagent/agent/sandbox/toolbox"
)

// Summarise is the median, p95 and minimum of samples, in milliseconds.
func Summarise(samples []time.Duration) Stats { return summarise(samples) }

// TargetConcurrentRatio: with many sandboxes created at once, the p95 of
// their ready times is at most that of as many `docker run --rm` at once.
const TargetConcurrentRatio = 1.0

// ConcurrentBenchOptions configure BenchConcurrent.
type ConcurrentBenchOptions struct {
	// Image defaults to BenchImage.
	Image string
	// Toolbox is the toolbox binary. Required.
	Toolbox string
	// Sandboxes created at once per round (default 16).
	Sandboxes int
	// Rounds (default 5).
	Rounds int
	// Labels are added to everything the benchmark makes.
	Labels map[string]string
	// Progress, when set, receives a line before each phase.
	Progress func(string)
	// DockerCLI is the docker command for the baseline (default "docker").
	DockerCLI string
}

// ConcurrentReport: Sandboxes sandboxes created at once, each timed from
// the round's start to its first tool call answered, against as many
// `docker run --rm --network none IMAGE true` at once, over Rounds rounds
// (the samples of every round together).
type ConcurrentReport struct {
	Sandboxes int   `json:"sandboxes"`
	Rounds    int   `json:"rounds"`
	Ready     Stats `json:"ready"`
	DockerRun Stats `json:"docker_run"`
	// Failures counts sandboxes that could not be created or did not
	// answer, over all rounds.
	Failures       int     `json:"failures"`
	FirstFailure   string  `json:"first_failure,omitempty"`
	P95VsDockerRun float64 `json:"p95_vs_docker_run"`
	Target         float64 `json:"target"`
	Met            bool    `json:"met"`
}

// BenchConcurrent creates many sandboxes at once, round after round,
// interleaved with the same number of concurrent `docker run`. It removes
// everything it creates.
func (e *Engine) BenchConcurrent(ctx context.Context, opts ConcurrentBenchOptions) (ConcurrentReport, error) {
	if opts.Image == "" {
		opts.Image = BenchImage
	}
	if opts.Sandboxes <= 0 {
		opts.Sandboxes = 16
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 5
	}
	if opts.DockerCLI == "" {
		opts.DockerCLI = "docker"
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	rep := ConcurrentReport{Sandboxes: opts.Sandboxes, Rounds: opts.Rounds, Target: TargetConcurrentRatio}
	docker, err := exec.LookPath(opts.DockerCLI)
	if err != nil {
		return rep, fmt.Errorf("the benchmark compares against the docker command line, which is not installed (%v)", err)
	}
	labels := map[string]string{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	labels[LabelBench] = "true"
	runArgs := []string{"run", "--rm", "--network", "none", "--label", LabelManaged + "=" + ManagedValue}
	for k, v := range labels {
		runArgs = append(runArgs, "--label", k+"="+v)
	}
	runArgs = append(runArgs, opts.Image, "true")
	root, err := os.MkdirTemp("", "agent-bench-many-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(root)
	readArgs := json.RawMessage(`{"path":"small.txt"}`)

	var ready, runs []time.Duration
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		rep.Failures++
		if rep.FirstFailure == "" {
			rep.FirstFailure = err.Error()
		}
	}
	for round := range opts.Rounds {
		progress(fmt.Sprintf("%d sandboxes at once vs %d docker run at once: round %d of %d", opts.Sandboxes, opts.Sandboxes, round+1, opts.Rounds))
		var wg sync.WaitGroup
		start := time.Now()
		for range opts.Sandboxes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := exec.CommandContext(ctx, docker, runArgs...).CombinedOutput()
				if err != nil {
					fail(fmt.Errorf("docker run: %v: %s", err, out))
					return
				}
				mu.Lock()
				runs = append(runs, time.Since(start))
				mu.Unlock()
			}()
		}
		wg.Wait()

		var sbs []*Sandbox
		start = time.Now()
		for i := range opts.Sandboxes {
			ws := filepath.Join(root, fmt.Sprintf("r%d-%d", round, i))
			if err := os.MkdirAll(ws, 0o755); err != nil {
				return rep, err
			}
			if err := os.WriteFile(filepath.Join(ws, "small.txt"), []byte("one\n"), 0o644); err != nil {
				return rep, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := e.Create(ctx, Spec{Workspace: ws, Image: opts.Image, Toolbox: opts.Toolbox, Labels: labels})
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				sbs = append(sbs, sb)
				mu.Unlock()
				r, err := sb.Tool(ctx, toolbox.ToolReadFile, readArgs)
				if err == nil && r.IsError {
					err = fmt.Errorf("read_file: %s", r.Output)
				}
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				ready = append(ready, time.Since(start))
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, sb := range sbs {
			sb.Close()
			e.cleanup(ctx, sb.ID)
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	rep.Ready, rep.DockerRun = summarise(ready), summarise(runs)
	if rep.DockerRun.P95MS > 0 {
		rep.P95VsDockerRun = math.Round(rep.Ready.P95MS/rep.DockerRun.P95MS*1000) / 1000
	}
	rep.Met = rep.Failures == 0 && rep.P95VsDockerRun <= TargetConcurrentRatio
	return rep, nil
}
