package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// slowStartScript is the demo's script with the first reply held back, so
// that a follower is surely there before the first tool call.
func slowStartScript(t *testing.T) string {
	t.Helper()
	demo, err := os.ReadFile(filepath.Join(moduleRoot(), "demo", "script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(demo), "turns:\n  - text:", "turns:\n  - delay: 1500ms\n    reasoning: \"First I look at the script.\"\n    text:", 1)
	if s == string(demo) {
		t.Fatal("the demo script changed shape")
	}
	return writeScript(t, s)
}

// startTaskForFollow starts a task in the background and waits until its
// record exists and it runs, before any tool call.
func startTaskForFollow(t *testing.T, stateDir, label string) (*store.Task, chan error) {
	t.Helper()
	repo, _ := demoRepo(t)
	ios, _, _, _ := TestStreams()
	done := make(chan error, 1)
	script := slowStartScript(t)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done <- taskRun(ctx, &TaskOptions{IO: ios, Factory: NewFactory(ios), Prompt: "Make greet.sh greet the name given", Repo: repo,
			Approve: "keep", Labels: []string{sandbox.LabelTest + "=" + label}, Run: RunFlags{LLM: "script:" + script, LLMSet: true}})
	}()
	st, err := store.Open(filepath.Join(stateDir, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if ts, _ := st.List(); len(ts) == 1 && ts[0].State == store.Running {
			b, _ := os.ReadFile(ts[0].Events)
			if strings.Contains(string(b), `"tool_started"`) {
				t.Fatal("the task reached its first tool call before the follower started")
			}
			return ts[0], done
		}
		if time.Now().After(deadline) {
			t.Fatal("the task never started running")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLogFollow: `agent log -f`, started before the task's first tool call,
// prints that tool call (and, with --show-thinking, the thinking) and
// returns when the task ends; with --json it gives the events.
func TestLogFollow(t *testing.T) {
	for _, jsonOut := range []bool{false, true} {
		name := "rendered"
		if jsonOut {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			label, stateDir := taskEnv(t)
			tk, done := startTaskForFollow(t, stateDir, label)
			ios, _, out, errOut := TestStreams()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := followRun(ctx, &TaskRefOptions{IO: ios, Factory: NewFactory(ios), Task: tk.ID, JSON: jsonOut}, true); err != nil {
				t.Fatal(err)
			}
			// It returned: the task must be over.
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("task: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("log -f returned while the task still ran")
			}
			if jsonOut {
				var kinds []string
				for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					var e struct {
						Kind, Tool, Text string
					}
					if err := json.Unmarshal([]byte(l), &e); err != nil {
						t.Fatalf("not a JSON line: %q", l)
					}
					kinds = append(kinds, e.Kind+":"+e.Tool)
				}
				all := strings.Join(kinds, " ")
				for _, want := range []string{"tool_started:read_file", "tool_finished:bash", "thinking_delta:", "text_delta:", "done:"} {
					if !strings.Contains(all, want) {
						t.Errorf("the events lack %s: %s", want, all)
					}
				}
				return
			}
			got := errOut.String()
			for _, want := range []string{"> read_file greet.sh", "> bash $ sh test.sh", "thinking: First I look at the script.",
				"I'll read the script and its test first.", "done (done)", "task " + tk.ID + " is "} {
				if !strings.Contains(got, want) {
					t.Errorf("log -f did not print %q:\n%s", want, got)
				}
			}
		})
	}
}
