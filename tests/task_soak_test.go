package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSoak runs 50 short tasks in a row on one repository, merging,
// keeping (then merging) and discarding them in turn, and checks that they
// leave no container, worktree, branch, lock or stray file behind and that
// the agent's peak memory does not grow from task to task. It takes about
// a minute here; set AGENT_SOAK=1 to run it.
func TestSoak(t *testing.T) {
	if os.Getenv("AGENT_SOAK") == "" {
		t.Skip("soak test; set AGENT_SOAK=1 to run it")
	}
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	const n = 50
	var rss []int64 // peak RSS of each `agent task`, KiB
	var kept []string
	start := time.Now()
	for i := range n {
		script := writeScript(t, fmt.Sprintf(`model: soak
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: soak/f%02d.txt, content: "task %d\n"}}
      - {name: bash, arguments: {command: "cat soak/f%02d.txt"}}
  - text: "Done."
`, i, i, i))
		approve := []string{"merge", "keep", "discard"}[i%3]
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := env.Command(ctx, repo, "task", "--llm", "script:"+script, "--approve", approve, env.LabelFlag(), fmt.Sprintf("Soak %d", i))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("task %d: %v\n%s", i, err, out)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = append(rss, ru.Maxrss)
		}
		if approve == "keep" {
			all, _ := taskStore(t, env.StateDir).List()
			kept = append(kept, all[0].ID)
		}
	}
	for _, id := range kept {
		mustRun(t, env, repo, "merge", id)
	}
	mustRun(t, env, repo, "gc")
	el := time.Since(start)
	assertNothingLeft(t, c, env, repo)
	files := Git(t, repo, "ls-tree", "--name-only", "main", "soak/")
	want := 0
	for i := range n {
		if i%3 != 2 {
			want++
		}
	}
	if got := strings.Count(files, "\n") + 1; got != want {
		t.Errorf("main holds %d soak files, want %d", got, want)
	}
	// Per-task files of the state directory: record, claim lock, use lock,
	// transcript, event log. Anything else is stray.
	count := map[string]int{}
	_ = filepath.WalkDir(env.StateDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(env.StateDir, p)
			count[strings.SplitN(rel, string(filepath.Separator), 2)[0]]++
		}
		return nil
	})
	avg := func(xs []int64) int64 {
		var s int64
		for _, x := range xs {
			s += x
		}
		return s / int64(len(xs))
	}
	first, last := avg(rss[:10]), avg(rss[len(rss)-10:])
	t.Logf("soak: %d tasks in %s (%.1f s/task); peak RSS per agent process: first 10 avg %d KiB, last 10 avg %d KiB, max %d KiB; state dir files by folder: %v",
		n, el.Round(time.Second), el.Seconds()/n, first, last, maxOf(rss), count)
	if last > first*13/10 {
		t.Errorf("peak memory grew from %d KiB to %d KiB", first, last)
	}
	if count["worktrees"] != 0 || count["locks"] > 1 {
		t.Errorf("stray files: %v", count)
	}
	if count["tasks"] > 3*n {
		t.Errorf("task store holds %d files for %d tasks", count["tasks"], n)
	}
}

func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
