package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

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
	// Concurrent sandboxes at once, over Rounds rounds (0: skipped).
	Concurrent, Rounds int
}

// benchReport is the JSON of `agent bench`: the sandbox and tool-call
// figures at the top level, the task start and concurrency benchmarks
// beside them.
type benchReport struct {
	sandbox.BenchReport
	TaskStart  *orchestrator.StartBenchReport `json:"task_start,omitempty"`
	Concurrent *sandbox.ConcurrentReport      `json:"concurrent,omitempty"`
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
  agent bench --json --iterations 50`,
		Long: `Measure, in one run on this machine, the sandbox ready time (create ->
first tool call answered) against 'docker run --rm --network none IMG true',
and tool-call latency (read_file of a small file, 'true' through the bash
tool) against one 'docker exec' call: medians, p95 and the ratios.

Then --concurrent sandboxes created at once (ready p95 against as many
'docker run' at once, --rounds rounds, failures counted), and on generated
repositories of --start-files files, task start to first tool call (the
first task on the commit, and later ones that take over a spare checkout)
against 'git worktree add' + 'docker run'.

Targets: read_file median <= 1/20 of docker exec; ready median <= 1.3x
docker run; concurrent ready p95 <= 1.0x with no failure; task start on a
big repository <= 0.25x.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Iterations < 0 {
				return UsageErrorf("--iterations must be positive")
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
	cmd.Flags().IntVar(&opts.Concurrent, "concurrent", 16, "`N` sandboxes created at once in the concurrency benchmark (0: skip)")
	cmd.Flags().IntVar(&opts.Rounds, "rounds", 5, "`N` rounds of the concurrency benchmark")
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
	progress := func(s string) { fmt.Fprintln(opts.IO.ErrOut, "bench: "+s) }
	rep, err := e.Bench(ctx, sandbox.BenchOptions{Image: opts.Image, Toolbox: tb, Iterations: opts.Iterations, Progress: progress, Labels: labels})
	if err != nil {
		return err
	}
	full := benchReport{BenchReport: rep}
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
	if opts.JSON {
		return writeJSON(opts.IO.Out, full)
	}
	if err := writeBenchTable(opts.IO.Out, rep); err != nil {
		return err
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
			fmt.Fprintf(w, "  %7d files: first task %.0f ms (%.3fx), with a spare checkout median %.0f ms p95 %.0f ms (%.3fx, target <= %.2fx: %s); baseline median %.0f ms\n",
				z.Files, z.ColdMS, z.ColdVsBaseline, z.Warm.MedianMS, z.Warm.P95MS, z.WarmVsBaseline, z.Target, verdict(z.WarmMet), z.Baseline.MedianMS)
		}
	}
	return nil
}

func writeBenchTable(w io.Writer, rep sandbox.BenchReport) error {
	fmt.Fprintf(w, "image %s, engine %s, %d iterations\n\n", rep.Image, rep.Engine, rep.Iterations)
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
	return nil
}

func inv(x float64) float64 {
	if x == 0 {
		return 0
	}
	return 1 / x
}
