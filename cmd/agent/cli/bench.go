package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/sandbox"
)

// BenchOptions are the inputs of `agent bench`.
type BenchOptions struct {
	IO         *IOStreams
	Factory    *Factory
	JSON       bool
	Iterations int
	Image      string
	Labels     []string
	// StartFiles are the sizes of the generated repositories of the task
	// start benchmark (none: skipped).
	StartFiles []int
	// DeepCommits is the length of the generated deep history on which
	// tasks run as separate processes (0: skipped).
	DeepCommits int
	// GitCount runs one small task as its own process and counts its
	// host git processes.
	GitCount bool
	// Concurrent sandboxes at once, over Rounds rounds (0: skipped).
	Concurrent, Rounds int
	// Isolations are measured one after the other in the same run (none:
	// the configured sandbox.isolation); with two, the report compares
	// them.
	Isolations []string
}

// benchReport is the JSON of `agent bench`: the sandbox and tool-call
// figures at the top level, the task start and concurrency benchmarks
// beside them.
type benchReport struct {
	sandbox.BenchReport
	TaskStart  *orchestrator.StartBenchReport `json:"task_start,omitempty"`
	Deep       *orchestrator.DeepReport       `json:"deep_history,omitempty"`
	GitCount   *orchestrator.GitCountReport   `json:"git_processes,omitempty"`
	Concurrent *sandbox.ConcurrentReport      `json:"concurrent,omitempty"`
	// ByIsolation holds one report per --isolation when more than one was
	// measured (the first is also the top level); Compared sets the
	// second's medians against the first's.
	ByIsolation []sandbox.BenchReport `json:"by_isolation,omitempty"`
	Compared    *isolationComparison  `json:"compared,omitempty"`
}

// isolationComparison is the second isolation's medians over the first's,
// measured in the same run on the same engine.
type isolationComparison struct {
	Of         sandbox.Isolation `json:"of"`
	Against    sandbox.Isolation `json:"against"`
	Ready      float64           `json:"sandbox_ready"`
	ReadFile   float64           `json:"read_file"`
	BashTrue   float64           `json:"bash_true"`
	FreezeThaw float64           `json:"freeze_thaw"`
	DockerRun  float64           `json:"docker_run"`
	DockerExec float64           `json:"docker_exec"`
}

func compareIsolations(a, b sandbox.BenchReport) *isolationComparison {
	r := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return math.Round(x/y*100) / 100
	}
	return &isolationComparison{Of: b.Isolation, Against: a.Isolation,
		Ready: r(b.Ready.MedianMS, a.Ready.MedianMS), ReadFile: r(b.ReadFile.MedianMS, a.ReadFile.MedianMS),
		BashTrue: r(b.BashTrue.MedianMS, a.BashTrue.MedianMS), FreezeThaw: r(b.FreezeThaw.MedianMS, a.FreezeThaw.MedianMS),
		DockerRun: r(b.DockerRun.MedianMS, a.DockerRun.MedianMS), DockerExec: r(b.DockerExec.MedianMS, a.DockerExec.MedianMS)}
}

// NewCmdBench builds `agent bench`.
func NewCmdBench(f *Factory) *cobra.Command {
	return newCmdBench(f, nil)
}

func newCmdBench(f *Factory, runF func(context.Context, *BenchOptions) error) *cobra.Command {
	opts := &BenchOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "bench [--json] [--iterations N] [--image IMG]",
		Short: "Measure sandbox and tool-call latency",
		Example: `  agent bench
  agent bench --json --iterations 50
  agent bench --isolation runc,runsc --concurrent 0 --start-files 0`,
		Long: `Measure, in one run on this machine, the sandbox ready time (create ->
first tool call answered) against 'docker run --rm --network none IMG true',
and tool-call latency (read_file of a small file, 'true' through the bash
tool) against one 'docker exec' call: medians, p95 and the ratios.

A warm pool claim (a started sandbox from sandbox.pool bound to a new
workspace -> first tool call answered) is timed too, for a member this
process made and for one another process made (whose toolbox session the
claim opens), against the same 'docker run'.

Then --concurrent sandboxes created at once (ready p95 against as many
'docker run' at once, --rounds rounds, failures counted), and on generated
repositories of --start-files files, task start to first tool call (the
first task on the repository, later ones that take over a spare checkout,
and the first task on a new commit, whose spare of the commit before is
brought to it) against 'git worktree add' + 'docker run', and the task's
commit with its sandbox frozen.

On a generated repository with a deep history (--deep-commits commits,
kept under the user's cache directory between runs), three tasks in a row,
each run as its own 'agent task' process as a user runs them: task start to
first tool call of each against 'git worktree add' + 'docker run' of the
same repository.

One small task (three files, three tool calls) run as its own process with a
git on PATH that logs every run: its host git processes, by sub-command.

Targets: read_file median <= 1/20 of docker exec; ready median <= 1.3x
docker run; warm pool claim median <= 0.2x docker run and <= 50 ms;
concurrent ready p95 <= 1.0x with no failure; task start on a big
repository <= 0.25x and <= 1.5 s; every task on the deep history <= 1.0x; a small task <= 20 git processes.

With --isolation runc,runsc the sandbox and tool-call figures are measured
under each isolation in turn, on the same engine in the same run, and the
second is compared with the first (gVisor's cost). The concurrency and task
start benchmarks use the first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Iterations < 0 {
				return UsageErrorf("--iterations must be positive")
			}
			for _, i := range opts.Isolations {
				if _, err := sandbox.ParseIsolation(i); err != nil {
					return UsageErrorf("--isolation: %v", err)
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return benchRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the report as one JSON object")
	cmd.Flags().IntVarP(&opts.Iterations, "iterations", "n", 8, "`N` sandboxes created (tool-call samples scale with it)")
	cmd.Flags().StringVar(&opts.Image, "image", sandbox.BenchImage, "`IMAGE` to benchmark with")
	cmd.Flags().IntSliceVar(&opts.StartFiles, "start-files", []int{10_000, 100_000}, "sizes of the generated repositories timed from task start to first tool call (0: skip)")
	cmd.Flags().IntVar(&opts.DeepCommits, "deep-commits", 30_000, "`N` commits of the generated deep-history repository, three tasks on it as separate processes (0: skip)")
	cmd.Flags().BoolVar(&opts.GitCount, "git-count", true, "count the host git processes of one small task")
	cmd.Flags().IntVar(&opts.Concurrent, "concurrent", 16, "`N` sandboxes created at once in the concurrency benchmark (0: skip)")
	cmd.Flags().IntVar(&opts.Rounds, "rounds", 5, "`N` rounds of the concurrency benchmark")
	cmd.Flags().StringSliceVar(&opts.Isolations, "isolation", nil, "`runc|runsc[,...]`: isolations measured in turn and compared (default: sandbox.isolation)")
	cmd.Flags().StringArrayVar(&opts.Labels, "label", nil, "extra label `KEY=VALUE` on every container the benchmark makes (repeatable)")
	return cmd
}

func benchRun(ctx context.Context, opts *BenchOptions) error {
	labels, err := parseLabelFlags(opts.Labels)
	if err != nil {
		return err
	}
	cfg, err := opts.Factory.Config()
	if err != nil {
		return err
	}
	tb, err := sandbox.FindToolbox(cfg.Sandbox.Toolbox)
	if err != nil {
		return err
	}
	e, err := sandboxEngine(ctx, opts.Factory)
	if err != nil {
		return err
	}
	progress := func(s string) { fmt.Fprintln(opts.IO.ErrOut, "bench: "+termtext.Line(s)) }
	isolations := opts.Isolations
	if len(isolations) == 0 {
		isolations = []string{cfg.Sandbox.Isolation}
	}
	var reps []sandbox.BenchReport
	for _, name := range isolations {
		iso, err := sandbox.ParseIsolation(name)
		if err != nil {
			return err
		}
		runtime := cfg.Sandbox.Runtime
		if string(iso) != cfg.Sandbox.Isolation {
			// A configured runtime name belongs to the configured isolation.
			runtime = ""
		}
		progress("isolation " + string(iso))
		rep, err := e.Bench(ctx, sandbox.BenchOptions{Image: opts.Image, Toolbox: tb, Iterations: opts.Iterations, Progress: progress, Labels: labels,
			Isolation: iso, Runtime: runtime})
		if err != nil {
			return err
		}
		reps = append(reps, rep)
	}
	rep := reps[0]
	full := benchReport{BenchReport: rep}
	if len(reps) > 1 {
		full.ByIsolation = reps
		full.Compared = compareIsolations(reps[0], reps[1])
	}
	if opts.Concurrent > 0 {
		c, err := e.BenchConcurrent(ctx, sandbox.ConcurrentBenchOptions{Image: opts.Image, Toolbox: tb,
			Sandboxes: opts.Concurrent, Rounds: opts.Rounds, Labels: labels, Progress: progress})
		if err != nil {
			return err
		}
		full.Concurrent = &c
	}
	var sizes []int
	for _, n := range opts.StartFiles {
		if n > 0 {
			sizes = append(sizes, n)
		}
	}
	if len(sizes) > 0 {
		s, err := orchestrator.BenchStart(ctx, orchestrator.StartBenchOptions{Engine: e,
			Sandbox: sandbox.Spec{Image: opts.Image, Toolbox: tb, Labels: labels},
			Files:   sizes, Progress: progress})
		if err != nil {
			return err
		}
		full.TaskStart = &s
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if opts.GitCount {
		g, err := orchestrator.BenchGitCount(ctx, orchestrator.DeepBenchOptions{TaskCommand: []string{self}, Image: opts.Image})
		if err != nil {
			return err
		}
		full.GitCount = &g
	}
	if opts.DeepCommits > 0 {
		cache, err := os.UserCacheDir()
		if err != nil {
			return err
		}
		d, err := orchestrator.BenchDeep(ctx, orchestrator.DeepBenchOptions{Commits: opts.DeepCommits,
			TaskCommand: []string{self}, CacheDir: filepath.Join(cache, "agent", "bench"),
			Image: opts.Image, Labels: labels, Progress: progress})
		if err != nil {
			return err
		}
		full.Deep = &d
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, full)
	}
	for i, r := range reps {
		if i > 0 {
			fmt.Fprintln(opts.IO.Out)
		}
		if err := writeBenchTable(opts.IO.Out, r); err != nil {
			return err
		}
	}
	if c := full.Compared; c != nil {
		fmt.Fprintf(opts.IO.Out, "\n%s / %s (medians, same engine, same run): sandbox ready %.2fx, read_file %.2fx, bash true %.2fx, freeze+thaw %.2fx; docker run %.2fx, docker exec %.2fx\n",
			c.Of, c.Against, c.Ready, c.ReadFile, c.BashTrue, c.FreezeThaw, c.DockerRun, c.DockerExec)
	}
	return writeStartBench(opts.IO.Out, full)
}

// writeStartBench prints the concurrency and task start figures.
func writeStartBench(w io.Writer, r benchReport) error {
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	if c := r.Concurrent; c != nil {
		fmt.Fprintf(w, "\n%d sandboxes at once, %d rounds: ready p95 %.0f ms, docker run p95 %.0f ms: %.3fx (target <= %.2fx, no failures: %s); failures %d\n",
			c.Sandboxes, c.Rounds, c.Ready.P95MS, c.DockerRun.P95MS, c.P95VsDockerRun, c.Target, verdict(c.Met), c.Failures)
	}
	if s := r.TaskStart; s != nil {
		fmt.Fprintln(w, "\ntask start -> first tool call vs git worktree add + docker run:")
		for _, z := range s.Sizes {
			fmt.Fprintf(w, "  %7d files: baseline median %.0f ms\n", z.Files, z.Baseline.MedianMS)
			fmt.Fprintf(w, "    first task on the repository (no spare)  %7.0f ms (%.3fx)\n", z.ColdMS, z.ColdVsBaseline)
			fmt.Fprintf(w, "    later task on the commit (spare)         median %.0f ms p95 %.0f ms (%.3fx, target <= %.2fx and <= %.0f ms: %s)\n",
				z.Warm.MedianMS, z.Warm.P95MS, z.WarmVsBaseline, z.Target, z.TargetMS, verdict(z.WarmMet))
			fmt.Fprintf(w, "    first task on a new commit (spare moved) median %.0f ms p95 %.0f ms (%.3fx, target <= %.2fx and <= %.0f ms: %s)\n",
				z.NewCommit.MedianMS, z.NewCommit.P95MS, z.NewCommitVsBaseline, z.Target, z.TargetMS, verdict(z.NewCommitMet))
			fmt.Fprintf(w, "    commit with the sandbox frozen           median %.0f ms p95 %.0f ms\n", z.CommitFrozen.MedianMS, z.CommitFrozen.P95MS)
		}
	}
	if d := r.Deep; d != nil {
		fmt.Fprintf(w, "\ndeep history (%d commits, %d files), tasks in a row as separate processes, task start -> first tool call:\n", d.Commits, d.Files)
		fmt.Fprintf(w, "  git worktree add + docker run: median %.0f ms\n", d.Baseline.MedianMS)
		for i, ms := range d.TasksMS {
			fmt.Fprintf(w, "  task %d: %7.0f ms (%.3fx; whole process %.0f ms)\n", i+1, ms, d.VsBaseline[i], d.ProcessMS[i])
		}
		fmt.Fprintf(w, "  every task <= %.2fx: %s\n", d.Target, verdict(d.Met))
	}
	if g := r.GitCount; g != nil {
		subs := make([]string, 0, len(g.BySubcommand))
		for k := range g.BySubcommand {
			subs = append(subs, k)
		}
		sort.Slice(subs, func(i, j int) bool { return g.BySubcommand[subs[i]] > g.BySubcommand[subs[j]] })
		var parts []string
		for _, k := range subs {
			parts = append(parts, fmt.Sprintf("%s %d", termtext.Line(k), g.BySubcommand[k]))
		}
		fmt.Fprintf(w, "\nsmall task (3 files, 3 tool calls): %d host git processes (target <= %d: %s): %s\n", g.Total, g.Target, verdict(g.Met), strings.Join(parts, ", "))
	}
	return nil
}

func writeBenchTable(w io.Writer, rep sandbox.BenchReport) error {
	fmt.Fprintf(w, "image %s, engine %s, isolation %s, %d iterations\n\n", termtext.Line(rep.Image), termtext.Line(rep.Engine), rep.Isolation, rep.Iterations)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tn\tmedian ms\tp95 ms\t")
	for _, r := range []struct {
		name string
		s    sandbox.Stats
	}{
		{"sandbox ready (create -> first tool call)", rep.Ready},
		{"docker run --rm --network none IMG true", rep.DockerRun},
		{"read_file (session)", rep.ReadFile},
		{"bash true (session)", rep.BashTrue},
		{"docker exec CID true", rep.DockerExec},
		{"freeze + thaw (around each host git step)", rep.FreezeThaw},
		{"warm pool claim -> first tool call", rep.WarmReady},
		{"  (member made by another process)", rep.WarmReadyOther},
	} {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t\n", r.name, r.s.N, r.s.MedianMS, r.s.P95MS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(w, "\nready / docker run:       %.3fx (target <= %.2fx: %s)\n", rep.ReadyVsDockerRun, rep.ReadyTarget, verdict(rep.ReadyMet))
	fmt.Fprintf(w, "read_file / docker exec:  %.4fx = 1/%.0f (target <= 1/%.0f: %s)\n", rep.ReadFileVsDockerExec, inv(rep.ReadFileVsDockerExec), inv(rep.ReadFileTarget), verdict(rep.ReadFileMet))
	fmt.Fprintf(w, "bash true / docker exec:  %.3fx\n", rep.BashVsDockerExec)
	fmt.Fprintf(w, "warm pool claim / docker run: median %.3fx, p95 %.3fx (target <= %.2fx and <= %.0f ms: %s); another process's member %.3fx (%s)\n",
		rep.WarmVsDockerRun, rep.WarmP95VsDockerRun, rep.WarmTarget, rep.WarmTargetMS, verdict(rep.WarmMet), rep.WarmOtherVsDockerRun, verdict(rep.WarmOtherMet))
	return nil
}

func inv(x float64) float64 {
	if x == 0 {
		return 0
	}
	return 1 / x
}
