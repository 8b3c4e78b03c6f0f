package orchestrator

import (
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
)

func TestEnvironmentWarnings(t *testing.T) {
	zero, one, c127 := 0, 1, 127
	cmds := []store.Command{
		{Command: "go test ./...", ExitCode: &c127, Missing: "go"},
		{Command: "python3 -m pytest", ExitCode: &one},
	}
	tk := &store.Task{Commands: cmds, Result: "Fixed it; all tests pass now."}
	w := strings.Join(environmentWarnings(tk, DetectTests(cmds)), "\n")
	if !strings.Contains(w, `"go test ./..." exited 127`) || !strings.Contains(w, "golang-go") {
		t.Errorf("no 127 note naming go and its package:\n%s", w)
	}
	if !strings.Contains(w, "says the tests pass, but its last test run (python3 -m pytest) failed") {
		t.Errorf("the contradicted claim is not flagged:\n%s", w)
	}

	// Control: the same claim backed by a passing run is not flagged.
	ok := []store.Command{{Command: "python3 -m pytest", ExitCode: &zero}}
	if w := environmentWarnings(&store.Task{Commands: ok, Result: "All tests pass."}, DetectTests(ok)); len(w) != 0 {
		t.Errorf("a true claim was flagged: %v", w)
	}
	if w := environmentWarnings(&store.Task{Result: "The tests passed."}, nil); len(w) != 1 || !strings.Contains(w[0], "ran no test command") {
		t.Errorf("a claim without any test run: %v", w)
	}
	for _, msg := range []string{"I could not make the tests pass.", "The tests fail until the fixture exists, so tests pass only with it."} {
		if w := environmentWarnings(&store.Task{Commands: cmds[1:], Result: msg}, DetectTests(cmds[1:])); len(w) != 0 && msg == "I could not make the tests pass." {
			t.Errorf("a negated claim was flagged: %q: %v", msg, w)
		}
	}
}
