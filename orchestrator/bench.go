package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/localagent/agent/sandbox"
)

// Task start benchmark targets (reported, never asserted in tests).
const (
	// TargetStartRatio: a task on a big repository is ready in at most a
	// quarter of `git worktree add` + `docker run`.
	TargetStartRatio = 0.25
	// TargetStartMS: and in at most 1.5 s.
	TargetStartMS = 1500
)

// StartBenchOptions configure BenchStart.
type StartBenchOptions struct {
	// Engine runs the sandboxes. Required.
	Engine *sandbox.Engine
	// Sandbox is the template of the tasks' sandboxes (image, toolbox,
	// labels). Required: Image and Toolbox.
	Sandbox sandbox.Spec
	// Files are the sizes of the generated repositories (default 10k and
	// 100k files).
	Files []int
	// Iterations is the number of warm starts and baselines timed per size
	// (default 3).
	Iterations int
	// Progress, when set, receives a line before each phase.
	Progress func(string)
	// DockerCLI is the docker command for the baselines (default "docker").
	DockerCLI string
}

// StartSize is the task start benchmark of one repository size, in
// milliseconds.
type StartSize struct {
	Files int `json:"files"`
	// ColdMS: the first task on the commit (no spare checkout yet).
	ColdMS float64 `json:"cold_ms"`
	// Warm: later tasks on the commit (a spare checkout is there).
	Warm sandbox.Stats `json:"warm"`
	// NewCommit: the first task on a commit just made (a few files
	// changed, added and deleted) while the spare checkout is of the
	// commit before: the spare is brought to the new commit.
	NewCommit sandbox.Stats `json:"new_commit"`
	// CommitFrozen: the task's commit on the host with its sandbox frozen
	// (freeze, git add and commit of the whole worktree, scan for ignored
	// files, thaw), for a task that changed nothing.
	CommitFrozen sandbox.Stats `json:"commit_frozen"`
	// Baseline: `git worktree add -b` + `docker run --rm --network none
	// -v WORKTREE:/workspace IMAGE true`.
	Baseline sandbox.Stats `json:"baseline"`

	ColdVsBaseline      float64 `json:"cold_vs_baseline"`
	WarmVsBaseline      float64 `json:"warm_vs_baseline"`
	NewCommitVsBaseline float64 `json:"new_commit_vs_baseline"`
	Target              float64 `json:"target"`
	// TargetMS: the median start (warm, and first task on a new commit)
	// in milliseconds it must not exceed.
	TargetMS     float64 `json:"target_ms"`
	WarmMet      bool    `json:"warm_met"`
	NewCommitMet bool    `json:"new_commit_met"`
}

// StartBenchReport: task start (NewTask called) to the first tool call
// served, against doing the same by hand, per repository size.
type StartBenchReport struct {
	Sizes []StartSize `json:"sizes"`
}

// BenchStart measures, on generated repositories, the time from starting a
// task to its sandbox answering (the moment a first tool call can run):
// the real task path (worktree, populate, hardened sandbox, toolbox),
// against `git worktree add` + `docker run` in the same run. It removes
// everything it creates.
func BenchStart(ctx context.Context, opts StartBenchOptions) (StartBenchReport, error) {
	var rep StartBenchReport
	if len(opts.Files) == 0 {
		opts.Files = []int{10_000, 100_000}
	}
	if opts.Iterations <= 0 {
		opts.Iterations = 3
	}
	if opts.DockerCLI == "" {
		opts.DockerCLI = "docker"
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	docker, err := exec.LookPath(opts.DockerCLI)
	if err != nil {
		return rep, fmt.Errorf("the benchmark compares against the docker command line, which is not installed (%v)", err)
	}
	for _, n := range opts.Files {
		s, err := benchStartSize(ctx, opts, docker, n, progress)
		if err != nil {
			return rep, err
		}
		rep.Sizes = append(rep.Sizes, s)
	}
	return rep, nil
}

func benchStartSize(ctx context.Context, opts StartBenchOptions, docker string, files int, progress func(string)) (StartSize, error) {
	res := StartSize{Files: files, Target: TargetStartRatio, TargetMS: TargetStartMS}
	tmp, err := os.MkdirTemp("", "agent-bench-start-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	repo := filepath.Join(tmp, "repo")
	progress(fmt.Sprintf("task start: generating a %d-file repository", files))
	if err := generateRepo(ctx, repo, files); err != nil {
		return res, err
	}
	script := filepath.Join(tmp, "model.yaml")
	// One real tool call on a file of the checkout: a task whose sandbox
	// did not see its files fails the benchmark.
	model := "model: bench\nturns:\n" +
		"  - tool_calls:\n      - {name: read_file, arguments: {path: d0000/f000000.txt}}\n" +
		"  - expect: {last_role: tool, tool_result_contains: \"file 0\"}\n    text: \"Nothing to do.\"\n"
	if err := os.WriteFile(script, []byte(model), 0o644); err != nil {
		return res, err
	}
	spec := opts.Sandbox
	labels := map[string]string{sandbox.LabelBench: "true"}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	spec.Labels = labels
	o, err := New(Options{
		StateDir: filepath.Join(tmp, "state"),
		Engine:   func(context.Context) (sandbox.Backend, error) { return opts.Engine, nil },
		Sandbox:  spec, SpareCheckouts: 1,
	})
	if err != nil {
		return res, err
	}
	defer func() {
		o.WaitSpares()
		_, _ = o.GC(context.WithoutCancel(ctx))
	}()

	var commits []time.Duration
	task := func() (time.Duration, error) {
		r, err := o.NewTask(ctx, TaskOptions{Prompt: "benchmark", RepoDir: repo, LLM: ScriptPrefix + script})
		if err != nil {
			return 0, err
		}
		defer r.Close()
		if err := r.Execute(ctx); err != nil {
			return 0, err
		}
		ready := time.Duration(r.Task.Timings.Ready) * time.Millisecond
		commits = append(commits, time.Duration(r.Task.Timings.Commit)*time.Millisecond)
		if _, err := o.Decide(ctx, r.Task, Discard, true); err != nil {
			return 0, err
		}
		return ready, nil
	}
	runArgs := []string{"run", "--rm", "--network", "none", "--label", sandbox.LabelManaged + "=" + sandbox.ManagedValue, "--label", sandbox.LabelBench + "=true"}
	for k, v := range spec.Labels {
		runArgs = append(runArgs, "--label", k+"="+v)
	}
	baseline := func(i int) (time.Duration, error) {
		wt := filepath.Join(tmp, fmt.Sprintf("baseline-%d", i))
		branch := fmt.Sprintf("bench-baseline-%d", i)
		start := time.Now()
		if out, err := plainGit(ctx, repo, "worktree", "add", "-q", "-b", branch, wt); err != nil {
			return 0, fmt.Errorf("git worktree add: %v: %s", err, out)
		}
		args := append(slices.Clone(runArgs), "-v", wt+":/workspace", spec.Image, "true")
		if out, err := exec.CommandContext(ctx, docker, args...).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("docker run: %v: %s", err, out)
		}
		d := time.Since(start)
		_, _ = plainGit(ctx, repo, "worktree", "remove", "--force", wt)
		_, _ = plainGit(ctx, repo, "branch", "-D", branch)
		return d, nil
	}

	progress(fmt.Sprintf("task start on %d files: first task (no spare checkout)", files))
	cold, err := task()
	if err != nil {
		return res, err
	}
	var warm, base []time.Duration
	for i := range opts.Iterations {
		progress(fmt.Sprintf("task start on %d files: run %d of %d (task with a spare checkout, git worktree add + docker run)", files, i+1, opts.Iterations))
		// The spare made after the previous task is complete before the
		// next one starts, as when tasks do not follow each other at once.
		o.WaitSpares()
		d, err := task()
		if err != nil {
			return res, err
		}
		warm = append(warm, d)
		// Nor may the refill compete with the baseline.
		o.WaitSpares()
		if d, err = baseline(i); err != nil {
			return res, err
		}
		base = append(base, d)
	}
	var fresh []time.Duration
	for i := range opts.Iterations {
		progress(fmt.Sprintf("task start on %d files: first task on a new commit, %d of %d", files, i+1, opts.Iterations))
		if err := newCommit(ctx, repo, i); err != nil {
			return res, err
		}
		d, err := task()
		if err != nil {
			return res, err
		}
		fresh = append(fresh, d)
		o.WaitSpares()
	}
	res.ColdMS = float64(cold.Milliseconds())
	res.Warm, res.Baseline = sandbox.Summarise(warm), sandbox.Summarise(base)
	res.NewCommit, res.CommitFrozen = sandbox.Summarise(fresh), sandbox.Summarise(commits)
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return math.Round(a/b*1000) / 1000
	}
	res.ColdVsBaseline = ratio(res.ColdMS, res.Baseline.MedianMS)
	res.WarmVsBaseline = ratio(res.Warm.MedianMS, res.Baseline.MedianMS)
	res.NewCommitVsBaseline = ratio(res.NewCommit.MedianMS, res.Baseline.MedianMS)
	res.WarmMet = res.WarmVsBaseline <= TargetStartRatio && res.Warm.MedianMS <= TargetStartMS
	res.NewCommitMet = res.NewCommitVsBaseline <= TargetStartRatio && res.NewCommit.MedianMS <= TargetStartMS
	return res, nil
}

// generateRepo makes a repository of n small files in directories of 100,
// one commit, through git fast-import, and checks it out, as a user's
// repository is (a task reads the state of the user's checkout).
func generateRepo(ctx context.Context, dir string, n int) error {
	if out, err := plainGit(ctx, "", "init", "-q", "-b", "main", dir); err != nil {
		return fmt.Errorf("git init: %v: %s", err, out)
	}
	var in bytes.Buffer
	in.WriteString("commit refs/heads/main\ncommitter bench <bench@localhost> 0 +0000\ndata 9\nbenchmark\n")
	for i := range n {
		data := fmt.Sprintf("file %d\n", i)
		fmt.Fprintf(&in, "M 644 inline d%04d/f%06d.txt\ndata %d\n%s\n", i/100, i, len(data), data)
	}
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "fast-import", "--quiet")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git fast-import: %v: %s", err, out)
	}
	if out, err := plainGit(ctx, dir, "-c", "checkout.workers=8", "reset", "--hard", "-q"); err != nil {
		return fmt.Errorf("git reset --hard: %v: %s", err, out)
	}
	return nil
}

// newCommit commits on main of the generated repository, as a user would
// between two tasks: ten files changed, one added in a new directory, one
// deleted (the i-th commit changes other files than the one before); the
// checkout follows.
func newCommit(ctx context.Context, dir string, i int) error {
	tip, err := plainGit(ctx, dir, "rev-parse", "--verify", "main")
	if err != nil {
		return fmt.Errorf("git rev-parse: %v: %s", err, tip)
	}
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter bench <bench@localhost> %d +0000\ndata 7\nchange\nfrom %s\n", i+1, bytes.TrimSpace(tip))
	for k := range 10 {
		n := (i*10 + k) * 97 % 1000
		data := fmt.Sprintf("file %d, changed by commit %d\n", n, i)
		fmt.Fprintf(&in, "M 644 inline d%04d/f%06d.txt\ndata %d\n%s\n", n/100, n, len(data), data)
	}
	fmt.Fprintf(&in, "M 644 inline new%d/added.txt\ndata 6\nadded\n\n", i)
	fmt.Fprintf(&in, "D d0009/f%06d.txt\n\n", 900+i)
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "fast-import", "--quiet")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git fast-import: %v: %s", err, out)
	}
	// The user's checkout follows, as after a commit there.
	if out, err := plainGit(ctx, dir, "reset", "--hard", "-q"); err != nil {
		return fmt.Errorf("git reset --hard: %v: %s", err, out)
	}
	return nil
}

// plainGit runs git on the benchmark's own repository (which it made).
func plainGit(ctx context.Context, dir string, args ...string) ([]byte, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost")
	return cmd.CombinedOutput()
}
