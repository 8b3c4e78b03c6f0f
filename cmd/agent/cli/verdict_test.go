package cli

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
)

// hiddenFailureScript runs the demo's failing test behind COMMAND and then
// claims success.
const hiddenFailureScript = `
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: note.txt, content: "hello\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {command: %q}}
  - expect: {last_role: tool}
    text: "Done, all tests pass."
`

// TestMergeIfGreenSeesHiddenFailures: a failing test run piped into tail,
// or followed by || true, is not a pass: --approve merge-if-green keeps
// the branch and exits 3, and the review says failed or masked. The
// control (a passing run merges) is TestMergeIfGreen's.
func TestMergeIfGreenSeesHiddenFailures(t *testing.T) {
	label, stateDir := taskEnv(t)
	labels := []string{sandbox.LabelTest + "=" + label}
	for _, c := range []struct {
		command, verdict string
		exit             int
	}{
		// pipefail: the pipeline exits with test.sh's status.
		{"sh test.sh 2>&1 | tail -5", "failed", 1},
		{"sh test.sh || true", "masked", 0},
	} {
		t.Run(c.verdict, func(t *testing.T) {
			t.Setenv("AGENT_STATE_DIR", stateDir+"-"+c.verdict)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			repo, base := demoRepo(t)
			ios, _, out, errOut := TestStreams()
			script := writeScript(t, strings.Replace(hiddenFailureScript, "%q", jsonString(c.command), 1))
			err := taskRun(ctx, &TaskOptions{IO: ios, Factory: NewFactory(ios), Prompt: "write a note", Repo: repo, Approve: "merge-if-green",
				JSON: true, Labels: labels, Run: RunFlags{LLM: "script:" + script, LLMSet: true}})
			var ec *ExitCodeError
			if !errors.As(err, &ec) || ec.Code != ExitNotGreen {
				t.Fatalf("merge-if-green after %q: %v, want exit code %d\n%s", c.command, err, ExitNotGreen, errOut.String())
			}
			if gitOut(t, repo, "rev-parse", "main") != base {
				t.Error("main moved although the tests failed")
			}
			tk := onlyTask(t, stateDir+"-"+c.verdict)
			if tk.State != store.Kept || gitOut(t, repo, "branch", "--list", tk.Branch) == "" {
				t.Errorf("task %s, branch kept: %q", tk.State, gitOut(t, repo, "branch", "--list", tk.Branch))
			}
			var ran *store.Command
			for i := range tk.Commands {
				if tk.Commands[i].Command == c.command {
					ran = &tk.Commands[i]
				}
			}
			if ran == nil || ran.ExitCode == nil || *ran.ExitCode != c.exit {
				t.Errorf("recorded command %+v, want exit %d", ran, c.exit)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var res struct {
				Review struct {
					Tests struct {
						Verdict string `json:"verdict"`
						Passed  bool   `json:"passed"`
						Reason  string `json:"reason"`
					} `json:"tests"`
				} `json:"review"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
				t.Fatalf("result line: %v", err)
			}
			if res.Review.Tests.Verdict != c.verdict || res.Review.Tests.Passed {
				t.Errorf("review tests %+v, want verdict %s", res.Review.Tests, c.verdict)
			}
			if !strings.Contains(errOut.String(), "not merged") {
				t.Errorf("no reason given:\n%s", errOut.String())
			}
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// claimScript runs a passing test of its own making (the agent's own
// verdict would be passed) and claims success.
const claimScript = `
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: test_ok.sh, content: "echo PASS\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {command: "sh test_ok.sh"}}
  - expect: {last_role: tool}
    text: "Done, all tests pass."
`

// TestHostTestCommandDecides: with a test command (--test), agent runs it
// in the sandbox after the agent's last turn and only that run decides
// merge-if-green, whatever the model ran or said. Control: the same
// command passing (after the demo's fix) merges.
func TestHostTestCommandDecides(t *testing.T) {
	label, stateDir := taskEnv(t)
	labels := []string{sandbox.LabelTest + "=" + label}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	repo, base := demoRepo(t)
	ios, _, out, errOut := TestStreams()
	err := taskRun(ctx, &TaskOptions{IO: ios, Factory: NewFactory(ios), Prompt: "write a note", Repo: repo, Approve: "merge-if-green",
		JSON: true, Labels: labels, Test: "sh test.sh", Run: RunFlags{LLM: "script:" + writeScript(t, claimScript), LLMSet: true}})
	var ec *ExitCodeError
	if !errors.As(err, &ec) || ec.Code != ExitNotGreen {
		t.Fatalf("merge-if-green with a failing test command: %v, want exit code %d\n%s", err, ExitNotGreen, errOut.String())
	}
	if gitOut(t, repo, "rev-parse", "main") != base {
		t.Error("main moved although the test command failed")
	}
	tk := onlyTask(t, stateDir)
	if own := orchestrator.DetectTests(tk.Commands); own == nil || !own.Passed {
		t.Errorf("the agent's own run %+v: want a pass, which the host run overrides", own)
	}
	if tk.HostTest == nil || tk.HostTest.ExitCode == nil || *tk.HostTest.ExitCode != 1 || !strings.Contains(tk.HostTest.OutputTail, "FAIL") {
		t.Errorf("host test run %+v, want exit 1 with FAIL", tk.HostTest)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res struct {
		Review struct {
			Raw      map[string]any `json:"tests"`
			Warnings []string       `json:"warnings"`
		} `json:"review"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("result line: %v", err)
	}
	if res.Review.Raw["source"] != "host" || res.Review.Raw["verdict"] != "failed" || !strings.Contains(res.Review.Raw["output_tail"].(string), "FAIL") {
		t.Errorf("review tests %v", res.Review.Raw)
	}
	if !strings.Contains(strings.Join(res.Review.Warnings, "\n"), "says the tests pass, but the test command (sh test.sh) failed") {
		t.Errorf("the false claim is not named: %q", res.Review.Warnings)
	}

	// Control: the demo's model fixes greet.sh; the same test command
	// passes and the gate merges.
	t.Setenv("AGENT_STATE_DIR", stateDir+"-control")
	repo2, base2 := demoRepo(t)
	ios2, _, _, errOut2 := TestStreams()
	demo := filepath.Join(moduleRoot(), "demo", "script.yaml")
	if err := taskRun(ctx, &TaskOptions{IO: ios2, Factory: NewFactory(ios2), Prompt: "Make greet.sh greet the name given", Repo: repo2,
		Approve: "merge-if-green", Labels: labels, Test: "sh test.sh", Run: RunFlags{LLM: "script:" + demo, LLMSet: true}}); err != nil {
		t.Fatalf("merge-if-green with a passing test command: %v\n%s", err, errOut2.String())
	}
	if gitOut(t, repo2, "rev-parse", "main") == base2 {
		t.Error("a passing test command was not merged")
	}
}

// A mode-only change and a new executable are named in the review's file
// list; a plain edit gets no note (the control).
func TestModeNote(t *testing.T) {
	for _, c := range []struct {
		f    worktree.FileStat
		want string
	}{
		{worktree.FileStat{Path: "deploy.sh", Status: "M", Mode: "100755", OldMode: "100644"}, "made executable"},
		{worktree.FileStat{Path: "tool", Status: "A", Mode: "100755", Binary: true}, "new executable"},
		{worktree.FileStat{Path: "x.go", Status: "M", Mode: "100644"}, ""},
	} {
		if got := modeNote(c.f); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("modeNote(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
}
