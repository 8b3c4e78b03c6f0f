package orchestrator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
)

// A merge's removal of the task worktree cut short halfway (a file already
// deleted) is journalled before it starts, so gc finishes it: worktree and
// branch go in one run, and no line of its report calls the missing file
// an uncommitted change or advises rm -rf. Control: the same half-removed
// worktree with a record that does not say a removal began (as before the
// journal) is kept by gc as "uncommitted changes".
func TestGCFinishesHalfRemovedWorktree(t *testing.T) {
	for _, journalled := range []bool{true, false} {
		name := "journalled"
		if !journalled {
			name = "control-unjournalled"
		}
		t.Run(name, func(t *testing.T) {
			f := newLocalFixture(t, writeGreetScript)
			ctx := context.Background()
			task := f.run(t)
			removeWorktreeHook = func(path string) error {
				if err := os.Remove(filepath.Join(path, "greet.txt")); err != nil {
					return err
				}
				return errors.New("killed halfway")
			}
			out, err := f.o.Decide(ctx, task, Merge, false)
			removeWorktreeHook = nil
			if err != nil || out.State != string(store.Merged) {
				t.Fatalf("merge: %+v, %v", out, err)
			}
			if !strings.Contains(out.Message, "agent gc") {
				t.Errorf("merge message does not name the command that finishes: %s", out.Message)
			}
			saved, err := f.o.store.Load(task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !saved.RemovingWorktree {
				t.Fatal("the removal was not journalled before it started")
			}
			if _, err := os.Stat(filepath.Join(saved.Worktree, "README.md")); err != nil {
				t.Fatalf("the half-removed worktree is not there: %v", err)
			}
			if !journalled {
				saved.RemovingWorktree = false
				if err := f.o.store.Save(saved); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := f.o.GC(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, wtErr := os.Lstat(saved.Worktree)
			kept := strings.Join(rep.Kept, "\n")
			if !journalled {
				if wtErr != nil || !strings.Contains(kept, "uncommitted changes") {
					t.Fatalf("control: gc without the journal removed it or did not call it uncommitted: kept %q, worktree %v", kept, wtErr)
				}
				t.Logf("control: %s", kept)
				return
			}
			if wtErr == nil || !slices.Contains(rep.RemovedWorktrees, saved.Worktree) {
				t.Fatalf("gc did not finish the removal: %+v", rep)
			}
			if !slices.Contains(rep.RemovedBranches, saved.Branch) {
				t.Errorf("the merged branch survived gc: %+v", rep)
			}
			if strings.Contains(kept, "rm -rf") || strings.Contains(kept, saved.Worktree) {
				t.Errorf("gc report: %q", kept)
			}
			if cur, _ := f.o.store.Load(task.ID); cur.RemovingWorktree {
				t.Error("the record still says a removal is under way")
			}
			if b := testGit(t, f.repo, "branch", "--list", saved.Branch); b != "" {
				t.Errorf("branch %s still there", b)
			}
		})
	}
}
