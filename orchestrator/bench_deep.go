package orchestrator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// TargetDeepRatio: on a deep history, every task's first tool call comes
// no later than `git worktree add` + `docker run` of the same repository.
const TargetDeepRatio = 1.0

// DeepBenchOptions configure BenchDeep.
type DeepBenchOptions struct {
	// Commits and Files shape the generated repository (default 30,000
	// commits over 5,000 files).
	Commits, Files int
	// Tasks run in a row, each as its own process (default 3).
	Tasks int
	// TaskCommand is the agent command line the tasks run with (the
	// running binary); `task ...` is appended. Required.
	TaskCommand []string
	// CacheDir keeps the generated repository between runs ("" : made in
	// the run's temporary directory and removed with it).
	CacheDir string
	// Image, Labels: the sandbox image of the tasks and the baseline.
	Image  string
	Labels map[string]string
	// DockerCLI is the docker command for the baselines (default "docker").
	DockerCLI string
	Progress  func(string)
}

// DeepReport is the deep-history benchmark: task start to first tool call
// of tasks run one after the other as separate processes (as a user runs
// them), against `git worktree add` + `docker run --rm` of the same
// repository in the same run.
type DeepReport struct {
	Commits int `json:"commits"`
	Files   int `json:"files"`
	// GenerateMS is the time taken to generate the repository (0: it came
	// from the cache).
	GenerateMS float64 `json:"generate_ms"`
	// TasksMS: the i-th task's ready time (from the record), in order.
	TasksMS []float64 `json:"tasks_ms"`
	// ProcessMS: the i-th task's whole process (start to exit, including
	// the scripted agent, the commit and the discard).
	ProcessMS  []float64     `json:"process_ms"`
	Baseline   sandbox.Stats `json:"baseline"`
	VsBaseline []float64     `json:"vs_baseline"`
	Target     float64       `json:"target"`
	Met        bool          `json:"met"`
}

// BenchDeep measures tasks on a repository with a deep history.
func BenchDeep(ctx context.Context, opts DeepBenchOptions) (DeepReport, error) {
	if opts.Commits <= 0 {
		opts.Commits = 30_000
	}
	if opts.Files < 2 {
		opts.Files = 5_000
	}
	if opts.Tasks <= 0 {
		opts.Tasks = 3
	}
	if opts.DockerCLI == "" {
		opts.DockerCLI = "docker"
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	rep := DeepReport{Commits: opts.Commits, Files: opts.Files, Target: TargetDeepRatio}
	if len(opts.TaskCommand) == 0 {
		return rep, errors.New("the deep-history benchmark needs the agent command to run tasks with")
	}
	docker, err := exec.LookPath(opts.DockerCLI)
	if err != nil {
		return rep, fmt.Errorf("the benchmark compares against the docker command line, which is not installed (%v)", err)
	}
	tmp, err := os.MkdirTemp("", "agent-bench-deep-")
	if err != nil {
		return rep, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cacheDir := opts.CacheDir
	if cacheDir == "" {
		cacheDir = tmp
	}
	origin := filepath.Join(cacheDir, fmt.Sprintf("deep-%dx%d.git", opts.Commits, opts.Files))
	// The repository is renamed into place once complete: if it is there,
	// it is whole.
	if _, err := os.Stat(origin); err != nil {
		progress(fmt.Sprintf("deep history: generating %d commits over %d files (kept in %s)", opts.Commits, opts.Files, cacheDir))
		start := time.Now()
		if err := generateDeepRepo(ctx, origin, opts.Commits, opts.Files); err != nil {
			return rep, err
		}
		rep.GenerateMS = float64(time.Since(start).Milliseconds())
	}
	// The tasks' branches go into a clone that shares the cached objects,
	// so the cache is never changed by a run.
	repo := filepath.Join(tmp, "repo")
	if out, err := plainGit(ctx, "", "clone", "-q", "--shared", "-b", "main", origin, repo); err != nil {
		return rep, fmt.Errorf("git clone: %v: %s", err, out)
	}
	script := filepath.Join(tmp, "model.yaml")
	model := "model: bench\nturns:\n" +
		"  - tool_calls:\n      - {name: read_file, arguments: {path: d0000/f000000.txt}}\n" +
		"  - expect: {last_role: tool, tool_result_contains: \"file 0\"}\n    text: \"Nothing to do.\"\n"
	if err := os.WriteFile(script, []byte(model), 0o644); err != nil {
		return rep, err
	}
	stateDir := filepath.Join(tmp, "state")
	env := append(os.Environ(), "AGENT_STATE_DIR="+stateDir)
	if opts.Image != "" {
		env = append(env, "AGENT_SANDBOX_IMAGE="+opts.Image)
	}
	defer func() {
		// With the pool off, gc also removes the warm pool members the
		// tasks left for their successors.
		gc := exec.CommandContext(context.WithoutCancel(ctx), opts.TaskCommand[0], append(slices.Clone(opts.TaskCommand[1:]), "gc")...)
		gc.Env = append(slices.Clone(env), "AGENT_SANDBOX_POOL=0")
		_ = gc.Run()
	}()
	runArgs := []string{"run", "--rm", "--network", "none", "--label", sandbox.LabelManaged + "=" + sandbox.ManagedValue, "--label", sandbox.LabelBench + "=true"}
	for k, v := range opts.Labels {
		runArgs = append(runArgs, "--label", k+"="+v)
	}
	var base []time.Duration
	for i := range opts.Tasks {
		progress(fmt.Sprintf("deep history: task %d of %d (its own process), then git worktree add + docker run", i+1, opts.Tasks))
		args := append(slices.Clone(opts.TaskCommand[1:]), "task", "--repo", repo, "--llm", ScriptPrefix+script, "--approve", "discard", "benchmark")
		cmd := exec.CommandContext(ctx, opts.TaskCommand[0], args...)
		cmd.Env = env
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return rep, fmt.Errorf("agent task: %v: %s", err, lastLines(out, 20))
		}
		rep.ProcessMS = append(rep.ProcessMS, float64(time.Since(start).Milliseconds()))
		st, err := store.Open(filepath.Join(stateDir, "tasks"))
		if err != nil {
			return rep, err
		}
		all, err := st.List()
		if err != nil || len(all) == 0 {
			return rep, fmt.Errorf("deep history: no task record after task %d (%v)", i+1, err)
		}
		rep.TasksMS = append(rep.TasksMS, float64(all[0].Timings.Ready))
		d, err := baselineStart(ctx, docker, runArgs, opts.Image, repo, filepath.Join(tmp, fmt.Sprintf("baseline-%d", i)), fmt.Sprintf("bench-baseline-%d", i))
		if err != nil {
			return rep, err
		}
		base = append(base, d)
	}
	rep.Baseline = sandbox.Summarise(base)
	rep.Met = true
	for _, ms := range rep.TasksMS {
		r := 0.0
		if rep.Baseline.MedianMS > 0 {
			r = math.Round(ms/rep.Baseline.MedianMS*1000) / 1000
		}
		rep.VsBaseline = append(rep.VsBaseline, r)
		rep.Met = rep.Met && r <= TargetDeepRatio
	}
	return rep, nil
}

// baselineStart times `git worktree add -b` + `docker run --rm` of the
// worktree, then removes both.
func baselineStart(ctx context.Context, docker string, runArgs []string, image, repo, wt, branch string) (time.Duration, error) {
	start := time.Now()
	if out, err := plainGit(ctx, repo, "worktree", "add", "-q", "-b", branch, wt); err != nil {
		return 0, fmt.Errorf("git worktree add: %v: %s", err, out)
	}
	args := append(slices.Clone(runArgs), "-v", wt+":/workspace", image, "true")
	if out, err := exec.CommandContext(ctx, docker, args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("docker run: %v: %s", err, out)
	}
	d := time.Since(start)
	_, _ = plainGit(ctx, repo, "worktree", "remove", "--force", wt)
	_, _ = plainGit(ctx, repo, "branch", "-D", branch)
	return d, nil
}

// generateDeepRepo writes a bare repository at dir whose main holds
// commits commits over a tree of files files, one file changed per commit,
// through git fast-import streamed from here; it is made beside dir and
// renamed into place, so a killed run leaves no half-made cache.
func generateDeepRepo(ctx context.Context, dir string, commits, files int) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-deep-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if out, err := plainGit(ctx, "", "init", "-q", "--bare", "-b", "main", tmp); err != nil {
		return fmt.Errorf("git init: %v: %s", err, out)
	}
	cmd := exec.CommandContext(ctx, "git", "-C", tmp, "fast-import", "--quiet")
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out := &limitedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	w := bufio.NewWriterSize(in, 1<<20)
	fmt.Fprintf(w, "commit refs/heads/main\ncommitter bench <bench@localhost> 0 +0000\ndata 4\nroot\n")
	for i := range files {
		data := fmt.Sprintf("file %d\n", i)
		fmt.Fprintf(w, "M 644 inline d%04d/f%06d.txt\ndata %d\n%s\n", i/100, i, len(data), data)
	}
	for c := 1; c < commits; c++ {
		// File 0 stays as it is: the scripted model reads it.
		f := 1 + (c*7919)%(files-1)
		data := fmt.Sprintf("file %d, change %d\n", f, c)
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter bench <bench@localhost> %d +0000\ndata 6\nchange\nM 644 inline d%04d/f%06d.txt\ndata %d\n%s\n",
			c, f/100, f, len(data), data)
	}
	werr := w.Flush()
	_ = in.Close()
	if err := cmd.Wait(); err != nil || werr != nil {
		return fmt.Errorf("git fast-import: %v %v: %s", err, werr, out.b)
	}
	return os.Rename(tmp, dir)
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// lastLines returns at most n last lines of b.
func lastLines(b []byte, n int) []byte {
	for i := len(b) - 2; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}

// GitCountReport counts the host git processes of one small task (a
// three-file repository, three tool calls, discarded), run as its own
// process with a git on PATH that logs each run before running the real
// one.
type GitCountReport struct {
	Total int `json:"total"`
	// BySubcommand counts the runs per git sub-command.
	BySubcommand map[string]int `json:"by_subcommand"`
	Target       int            `json:"target"`
	Met          bool           `json:"met"`
}

// TargetGitProcesses is the most host git processes a small task should
// need.
const TargetGitProcesses = 20

// BenchGitCount runs one small task through opts.TaskCommand (as BenchDeep
// does) and counts its git processes.
func BenchGitCount(ctx context.Context, opts DeepBenchOptions) (GitCountReport, error) {
	rep := GitCountReport{BySubcommand: map[string]int{}, Target: TargetGitProcesses}
	if len(opts.TaskCommand) == 0 {
		return rep, errors.New("the git process count needs the agent command to run a task with")
	}
	realGit, err := exec.LookPath("git")
	if err != nil {
		return rep, err
	}
	tmp, err := os.MkdirTemp("", "agent-bench-git-")
	if err != nil {
		return rep, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	repo := filepath.Join(tmp, "repo")
	if err := generateRepo(ctx, repo, 3); err != nil {
		return rep, err
	}
	bin := filepath.Join(tmp, "bin")
	logFile := filepath.Join(tmp, "git.log")
	if err := os.Mkdir(bin, 0o755); err != nil {
		return rep, err
	}
	// One line per run: the arguments, NUL-free, space-separated.
	wrapper := fmt.Sprintf("#!/bin/sh\nprintf '%%s ' \"$@\" >> %q\necho >> %q\nexec %q \"$@\"\n", logFile, logFile, realGit)
	if err := os.WriteFile(filepath.Join(bin, "git"), []byte(wrapper), 0o755); err != nil {
		return rep, err
	}
	script := filepath.Join(tmp, "model.yaml")
	model := "model: bench\nturns:\n" +
		"  - tool_calls:\n      - {name: read_file, arguments: {path: d0000/f000000.txt}}\n" +
		"  - tool_calls:\n      - {name: list_dir, arguments: {path: d0000}}\n" +
		"  - tool_calls:\n      - {name: write_file, arguments: {path: d0000/new.txt, content: \"new\\n\"}}\n" +
		"  - text: \"Done.\"\n"
	if err := os.WriteFile(script, []byte(model), 0o644); err != nil {
		return rep, err
	}
	env := append(os.Environ(), "AGENT_STATE_DIR="+filepath.Join(tmp, "state"), "AGENT_SANDBOX_POOL=0",
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if opts.Image != "" {
		env = append(env, "AGENT_SANDBOX_IMAGE="+opts.Image)
	}
	args := append(slices.Clone(opts.TaskCommand[1:]), "task", "--repo", repo, "--llm", ScriptPrefix+script, "--approve", "discard", "benchmark")
	cmd := exec.CommandContext(ctx, opts.TaskCommand[0], args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return rep, fmt.Errorf("agent task: %v: %s", err, lastLines(out, 20))
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		return rep, fmt.Errorf("no git run was logged: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		rep.Total++
		rep.BySubcommand[gitSubcommand(strings.Fields(line))]++
	}
	rep.Met = rep.Total <= TargetGitProcesses
	return rep, nil
}

// gitSubcommand is the first argument of a git command line that is not
// a global option (nor the value of -c or -C).
func gitSubcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" || a == "-C":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return "?"
}
