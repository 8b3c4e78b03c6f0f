package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/localagent/agent/sandbox/toolbox"
)

// BenchImage is the image the benchmark uses by default: tiny, so the
// numbers measure the sandbox machinery rather than image size.
const BenchImage = "agent/busybox:latest"

// Benchmark targets (DESIGN.md): reported, never asserted in unit tests.
const (
	// TargetReadyRatio: sandbox ready median <= 1.3x `docker run --rm`.
	TargetReadyRatio = 1.3
	// TargetReadFileRatio: read_file median <= 1/20 of one `docker exec`.
	TargetReadFileRatio = 1.0 / 20
	// TargetWarmRatio and TargetWarmMS: a warm pool claim is ready (first
	// tool call answered) in a median of at most 0.2x `docker run --rm`
	// and at most 50 ms.
	TargetWarmRatio = 0.2
	TargetWarmMS    = 50
)

// BenchOptions configure Bench. Zero values are documented per field.
type BenchOptions struct {
	// Image defaults to BenchImage.
	Image string
	// Toolbox is the toolbox binary (see FindToolbox). Required.
	Toolbox string
	// Iterations is the number of sandbox creations timed (default 8); the
	// tool-call samples are multiples of it.
	Iterations int
	// Labels are added to every sandbox and container the benchmark makes.
	Labels map[string]string
	// Progress, when set, receives a line before each phase.
	Progress func(string)
	// DockerCLI is the docker command for the baselines (default "docker").
	DockerCLI string
	// Isolation of the benchmark's sandboxes ("" = runc), and Runtime the
	// engine's runtime name for it (Spec.Runtime); the docker run baseline
	// names the same runtime on an engine that honours the name.
	Isolation Isolation
	Runtime   string
}

// Stats summarise one measured operation, in milliseconds.
type Stats struct {
	N        int     `json:"n"`
	MedianMS float64 `json:"median_ms"`
	P95MS    float64 `json:"p95_ms"`
	MinMS    float64 `json:"min_ms"`
}

func summarise(samples []time.Duration) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }
	var median time.Duration
	if n := len(s); n%2 == 1 {
		median = s[n/2]
	} else {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	p95 := s[int(math.Ceil(0.95*float64(len(s))))-1]
	return Stats{N: len(s), MedianMS: ms(median), P95MS: ms(p95), MinMS: ms(s[0])}
}

// BenchReport is the outcome of one benchmark run. Every ratio compares
// medians measured in the same run on the same machine.
type BenchReport struct {
	Image      string `json:"image"`
	Engine     string `json:"engine"`
	Iterations int    `json:"iterations"`
	// Isolation the sandboxes (and the docker run baseline) ran under.
	Isolation Isolation `json:"isolation"`
	// Ready is create -> first tool call answered.
	Ready Stats `json:"sandbox_ready"`
	// DockerRun is `docker run --rm --network none IMAGE true`.
	DockerRun Stats `json:"docker_run"`
	// ReadFile is read_file of a small file over the session.
	ReadFile Stats `json:"read_file"`
	// BashTrue is `true` through the bash tool over the session.
	BashTrue Stats `json:"bash_true"`
	// DockerExec is one `docker exec CONTAINER true` CLI call.
	DockerExec Stats `json:"docker_exec"`
	// FreezeThaw is one freeze and thaw of a running sandbox: what every
	// host git step on a worktree (a task's commit, applying a
	// sub-agent's work) adds to guard against the sandbox.
	FreezeThaw Stats `json:"freeze_thaw"`

	// WarmReady is a warm pool claim -> first tool call answered, the
	// member made (and its session opened) by this process, as for a
	// sub-agent; WarmReadyOther is the same for a member another process
	// made (a new `agent task`), whose session the claim opens.
	WarmReady      Stats `json:"warm_pool_ready"`
	WarmReadyOther Stats `json:"warm_pool_ready_other_process"`

	ReadyVsDockerRun     float64 `json:"ready_vs_docker_run"`
	ReadFileVsDockerExec float64 `json:"read_file_vs_docker_exec"`
	BashVsDockerExec     float64 `json:"bash_vs_docker_exec"`
	WarmVsDockerRun      float64 `json:"warm_pool_ready_vs_docker_run"`
	WarmP95VsDockerRun   float64 `json:"warm_pool_ready_p95_vs_docker_run"`
	WarmOtherVsDockerRun float64 `json:"warm_pool_ready_other_process_vs_docker_run"`
	WarmTarget           float64 `json:"warm_pool_target"`
	WarmTargetMS         float64 `json:"warm_pool_target_ms"`
	WarmMet              bool    `json:"warm_pool_met"`
	WarmOtherMet         bool    `json:"warm_pool_other_process_met"`
	ReadyTarget          float64 `json:"ready_target"`
	ReadFileTarget       float64 `json:"read_file_target"`
	ReadyMet             bool    `json:"ready_met"`
	ReadFileMet          bool    `json:"read_file_met"`
}

// Bench measures sandbox ready time and tool-call latency against the
// docker CLI baselines, in one run. It removes everything it creates.
func (e *Engine) Bench(ctx context.Context, opts BenchOptions) (BenchReport, error) {
	if opts.Image == "" {
		opts.Image = BenchImage
	}
	if opts.Iterations <= 0 {
		opts.Iterations = 8
	}
	if opts.DockerCLI == "" {
		opts.DockerCLI = "docker"
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	iso, err := ParseIsolation(string(opts.Isolation))
	if err != nil {
		return BenchReport{}, err
	}
	runtime, err := e.checkIsolation(Spec{Isolation: iso, Runtime: opts.Runtime})
	if err != nil {
		return BenchReport{}, err
	}
	rep := BenchReport{Image: opts.Image, Engine: e.ServerVersion, Iterations: opts.Iterations, Isolation: iso,
		ReadyTarget: TargetReadyRatio, ReadFileTarget: TargetReadFileRatio, WarmTarget: TargetWarmRatio, WarmTargetMS: TargetWarmMS}
	docker, err := exec.LookPath(opts.DockerCLI)
	if err != nil {
		return rep, fmt.Errorf("the benchmark compares against the docker command line, which is not installed (%v): install the Docker CLI", err)
	}
	if err := e.ImagePresent(ctx, opts.Image); err != nil {
		return rep, err
	}
	ws, err := os.MkdirTemp("", "agent-bench-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(ws)
	if err := os.WriteFile(filepath.Join(ws, "small.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		return rep, err
	}
	labels := map[string]string{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	labels[LabelBench] = "true"
	spec := Spec{Workspace: ws, Image: opts.Image, Toolbox: opts.Toolbox, Labels: labels, Isolation: iso, Runtime: opts.Runtime}
	runArgs := []string{"run", "--rm", "--network", "none", "--label", LabelManaged + "=" + ManagedValue, "--label", LabelBench + "=true"}
	if runtime != "" {
		runArgs = append(runArgs, "--runtime", runtime)
	}
	for k, v := range opts.Labels {
		runArgs = append(runArgs, "--label", k+"="+v)
	}
	runArgs = append(runArgs, opts.Image, "true")
	readArgs := json.RawMessage(`{"path":"small.txt"}`)

	// One sandbox's life: create, first tool call answered, remove.
	ready := func() (time.Duration, error) {
		start := time.Now()
		sb, err := e.Create(ctx, spec)
		if err != nil {
			return 0, err
		}
		defer e.cleanup(ctx, sb.ID)
		r, err := sb.Tool(ctx, toolbox.ToolReadFile, readArgs)
		d := time.Since(start)
		sb.Close()
		if err == nil && r.IsError {
			err = fmt.Errorf("read_file failed in the benchmark sandbox: %s", r.Output)
		}
		return d, err
	}
	dockerRun := func() (time.Duration, error) {
		start := time.Now()
		out, err := exec.CommandContext(ctx, docker, runArgs...).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("docker run: %v: %s", err, out)
		}
		return time.Since(start), nil
	}

	progress(fmt.Sprintf("sandbox ready vs docker run (%d each)", opts.Iterations))
	// A warm-up of each, untimed, so neither side pays first-use costs.
	if _, err := dockerRun(); err != nil {
		return rep, err
	}
	if _, err := ready(); err != nil {
		return rep, err
	}
	var readyS, runS []time.Duration
	for i := 0; i < opts.Iterations; i++ {
		// Interleaved so that machine noise hits both alike.
		d, err := dockerRun()
		if err != nil {
			return rep, err
		}
		runS = append(runS, d)
		if d, err = ready(); err != nil {
			return rep, err
		}
		readyS = append(readyS, d)
	}

	warmS, otherS, err := e.benchWarm(ctx, spec, opts.Iterations, dockerRun, &runS, progress)
	if err != nil {
		return rep, err
	}

	sb, err := e.Create(ctx, spec)
	if err != nil {
		return rep, err
	}
	defer e.cleanup(ctx, sb.ID)
	defer sb.Close()
	call := func(name string, args json.RawMessage) (time.Duration, error) {
		start := time.Now()
		r, err := sb.Tool(ctx, name, args)
		d := time.Since(start)
		if err == nil && r.IsError {
			err = fmt.Errorf("%s failed in the benchmark sandbox: %s", name, r.Output)
		}
		return d, err
	}
	dockerExec := func() (time.Duration, error) {
		start := time.Now()
		out, err := exec.CommandContext(ctx, docker, "exec", sb.ID, "true").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("docker exec: %v: %s", err, out)
		}
		return time.Since(start), nil
	}
	bashArgs := json.RawMessage(`{"command":"true"}`)
	if _, err := call(toolbox.ToolReadFile, readArgs); err != nil {
		return rep, err
	}
	if _, err := dockerExec(); err != nil {
		return rep, err
	}
	progress(fmt.Sprintf("tool calls vs docker exec (%d read_file, %d bash, %d docker exec)", 25*opts.Iterations, 5*opts.Iterations, 3*opts.Iterations))
	var readS, bashS, execS []time.Duration
	for i := 0; i < opts.Iterations; i++ {
		for j := 0; j < 25; j++ {
			d, err := call(toolbox.ToolReadFile, readArgs)
			if err != nil {
				return rep, err
			}
			readS = append(readS, d)
		}
		for j := 0; j < 5; j++ {
			d, err := call(toolbox.ToolBash, bashArgs)
			if err != nil {
				return rep, err
			}
			bashS = append(bashS, d)
		}
		for j := 0; j < 3; j++ {
			d, err := dockerExec()
			if err != nil {
				return rep, err
			}
			execS = append(execS, d)
		}
	}
	progress(fmt.Sprintf("freeze and thaw the sandbox (%d)", 3*opts.Iterations))
	var freezeS []time.Duration
	for i := 0; i < 3*opts.Iterations; i++ {
		c, err := MeasureFreeze(ctx, sb)
		if err != nil {
			return rep, err
		}
		freezeS = append(freezeS, c.Freeze+c.Thaw)
	}
	// The session survives a freeze: the next call is answered as usual.
	if _, err := call(toolbox.ToolReadFile, readArgs); err != nil {
		return rep, fmt.Errorf("tool call after a freeze: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	rep.FreezeThaw = summarise(freezeS)
	rep.Ready, rep.DockerRun = summarise(readyS), summarise(runS)
	rep.ReadFile, rep.BashTrue, rep.DockerExec = summarise(readS), summarise(bashS), summarise(execS)
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return math.Round(a/b*1000) / 1000
	}
	rep.ReadyVsDockerRun = ratio(rep.Ready.MedianMS, rep.DockerRun.MedianMS)
	rep.WarmReady, rep.WarmReadyOther = summarise(warmS), summarise(otherS)
	rep.WarmVsDockerRun = ratio(rep.WarmReady.MedianMS, rep.DockerRun.MedianMS)
	rep.WarmP95VsDockerRun = ratio(rep.WarmReady.P95MS, rep.DockerRun.MedianMS)
	rep.WarmOtherVsDockerRun = ratio(rep.WarmReadyOther.MedianMS, rep.DockerRun.MedianMS)
	rep.WarmMet = rep.WarmVsDockerRun <= TargetWarmRatio && rep.WarmReady.MedianMS <= TargetWarmMS
	rep.WarmOtherMet = rep.WarmOtherVsDockerRun <= TargetWarmRatio && rep.WarmReadyOther.MedianMS <= TargetWarmMS
	rep.ReadFileVsDockerExec = ratio(rep.ReadFile.MedianMS, rep.DockerExec.MedianMS)
	rep.BashVsDockerExec = ratio(rep.BashTrue.MedianMS, rep.DockerExec.MedianMS)
	rep.ReadyMet = rep.ReadyVsDockerRun <= TargetReadyRatio
	rep.ReadFileMet = rep.ReadFileVsDockerExec <= TargetReadFileRatio
	if rep.Ready.N == 0 || rep.ReadFile.N == 0 {
		return rep, errors.New("benchmark collected no samples")
	}
	return rep, nil
}

// benchWarm times warm pool claims: each sample fills a pool of one for
// spec (untimed: the pool refills in the background after a claim), runs
// one `docker run` of the baseline (appended to runS: the pause between
// two starts, during which machine noise hits both alike), then times the
// claim for a new workspace up to the first read_file answered. other:
// the claim is made through a second Pool over the same directory, as
// another process would, which opens its own toolbox session.
func (e *Engine) benchWarm(ctx context.Context, spec Spec, n int, dockerRun func() (time.Duration, error), runS *[]time.Duration, progress func(string)) (warm, other []time.Duration, err error) {
	if err := poolable(spec); err != nil {
		progress(fmt.Sprintf("warm pool claim: skipped (%v)", err))
		return nil, nil, nil
	}
	root, err := os.MkdirTemp(filepath.Dir(spec.Workspace), "agent-bench-pool-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(root)
	readArgs := json.RawMessage(`{"path":"small.txt"}`)
	sample := func(fromOther bool) (time.Duration, error) {
		dir := filepath.Join(root, "pool")
		p, err := NewPool(e, dir, 1)
		if err != nil {
			return 0, err
		}
		if err := p.Fill(ctx, spec); err != nil {
			return 0, err
		}
		d, err := dockerRun()
		if err != nil {
			return 0, err
		}
		*runS = append(*runS, d)
		claimer := p
		if fromOther {
			if claimer, err = NewPool(e, dir, 1); err != nil {
				return 0, err
			}
		}
		ws, err := os.MkdirTemp(root, "ws-")
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(ws, "small.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
			return 0, err
		}
		s := spec
		s.Workspace = ws
		start := time.Now()
		sb, err := claimer.Claim(ctx, s)
		if err != nil {
			return 0, fmt.Errorf("claiming a warm sandbox: %w", err)
		}
		defer e.cleanup(ctx, sb.ID)
		r, err := sb.Tool(ctx, toolbox.ToolReadFile, readArgs)
		d = time.Since(start)
		sb.Close()
		if err == nil && (r.IsError || !strings.Contains(r.Output, "three")) {
			err = fmt.Errorf("read_file in a claimed warm sandbox: %s", r.Output)
		}
		if members, merr := p.Members(ctx); merr == nil {
			for _, m := range members {
				e.cleanup(ctx, m.ID)
			}
		}
		return d, err
	}
	progress(fmt.Sprintf("warm pool claim vs docker run (%d each, and %d claims of another process's member)", n, n))
	if _, err := sample(false); err != nil { // warm-up
		return nil, nil, err
	}
	for range n {
		d, err := sample(false)
		if err != nil {
			return nil, nil, err
		}
		warm = append(warm, d)
		if d, err = sample(true); err != nil {
			return nil, nil, err
		}
		other = append(other, d)
	}
	return warm, other, nil
}
