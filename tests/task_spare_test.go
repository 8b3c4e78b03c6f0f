package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTaskLeavesWholeSpares: after each `agent task` in a row exits, the
// state directory holds one complete spare checkout of the repository and
// nothing half-made. (At this size the spare is usually done before the
// task is; the commands also wait for it, which matters on big trees.)
func TestTaskLeavesWholeSpares(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	// More than a trivial tree, so that the spare takes a while.
	for i := range 2000 {
		p := filepath.Join(repo, "many", fmt.Sprintf("d%02d", i/100), fmt.Sprintf("f%04d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, repo, "add", ".")
	Git(t, repo, "commit", "-q", "-m", "many files")
	script := writeScript(t, "model: spare\nturns:\n  - text: \"Nothing to do.\"\n")
	spares := filepath.Join(env.StateDir, "spares")
	for i := range 2 {
		code, out, errOut := env.Run(repo, "task", "--llm", "script:"+script, "--approve", "discard", env.LabelFlag(), "Nothing")
		if code != 0 {
			t.Fatalf("task %d: exit %d\n%s\n%s", i+1, code, out, errOut)
		}
		ents, err := os.ReadDir(spares)
		if err != nil {
			t.Fatalf("after task %d: %v", i+1, err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if len(names) != 1 || strings.Contains(names[0], ".") {
			t.Fatalf("after task %d the spares are %q, want one complete spare", i+1, names)
		}
	}
}
