package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// BenchmarkCommit measures a task commit (git add -A and commit of one
// changed file in the sample repository's worktree) with its sandbox
// running, as before, and frozen around it, as every host git step on a
// worktree now is: the difference is what the freeze costs per commit.
//
//	go test -run '^$' -bench Commit -benchtime 20x ./tests/
func BenchmarkCommit(b *testing.B) {
	c := RequireEngine(b)
	ctx := context.Background()
	repo, err := worktree.Open(ctx, NewSampleRepo(b))
	if err != nil {
		b.Fatal(err)
	}
	wt, err := repo.Add(ctx, worktree.AddOptions{Path: filepath.Join(b.TempDir(), "wt"), Branch: "agent/bench-commit", Start: "HEAD"})
	if err != nil {
		b.Fatal(err)
	}
	e, err := sandbox.Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	label := UniqueLabel(b)
	RemoveLabelledOnCleanup(b, c, label)
	sb, err := e.Create(ctx, sandbox.Spec{Workspace: wt.Path, Image: "agent/busybox:latest",
		Toolbox: filepath.Join(Binaries(b), "agent-toolbox"), Labels: map[string]string{sandbox.LabelTest: label}})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	commit := func(b *testing.B, freeze bool) {
		n++
		if err := os.WriteFile(filepath.Join(wt.Path, "bench.txt"), []byte(fmt.Sprintf("change %d\n", n)), 0o644); err != nil {
			b.Fatal(err)
		}
		if freeze {
			if err := sb.Freeze(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if id, err := repo.CommitAll(ctx, wt, "bench"); err != nil || id == "" {
			b.Fatal(id, err)
		}
		if freeze {
			if err := sb.Thaw(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, freeze := range []bool{false, true} {
		b.Run(map[bool]string{false: "running", true: "frozen"}[freeze], func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				commit(b, freeze)
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/commit")
		})
	}
}
