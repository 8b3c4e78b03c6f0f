package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// defaultTestTimeout bounds the test command when none is configured.
const defaultTestTimeout = 10 * time.Minute

// testCommand picks a new task's test command: the task's own (a flag),
// else the user's configuration, else the test: of the project's
// environment at the base commit (never the agent's branch: the model
// cannot choose what judges it).
func (o *Orchestrator) testCommand(ctx context.Context, repo *worktree.Repo, commit, own string) (string, error) {
	if own != "" {
		return own, nil
	}
	if o.opts.Test != "" {
		return o.opts.Test, nil
	}
	def, _, err := o.loadDefinition(ctx, repo, commit)
	if err != nil || def == nil {
		if err != nil {
			err = fmt.Errorf("project environment: %w", err)
		}
		return "", err
	}
	return def.Test, nil
}

// runTests runs the task's test command in its sandbox after the agent's
// last turn (its background processes already stopped), bounded in time,
// and records the exit code and the output's tail: with a test command,
// that run, not any the model made, is the verdict.
func (r *Run) runTests(ctx context.Context, sb *sandbox.Sandbox, sink event.Sink) {
	t := r.Task
	if t.TestCommand == "" {
		return
	}
	timeout := r.o.opts.TestTimeout
	if timeout <= 0 {
		timeout = defaultTestTimeout
	}
	sink.Emit(event.Event{Time: time.Now(), Kind: event.Progress, Task: t.ID, State: "tests",
		Text: "running the test command: " + t.TestCommand})
	ht := &store.HostTest{Command: t.TestCommand}
	args, _ := json.Marshal(toolbox.BashArgs{Command: t.TestCommand, Timeout: timeout.Seconds()})
	start := time.Now()
	// The toolbox ends the command at its timeout; the margin covers a
	// toolbox that cannot answer.
	tctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	res, err := sb.Tool(tctx, toolbox.ToolBash, args)
	cancel()
	ht.DurationMS = time.Since(start).Milliseconds()
	switch {
	case err != nil:
		ht.Error = err.Error()
	case res.ExitCode == nil:
		ht.Error = firstLine(res.Output)
	default:
		ht.ExitCode, ht.TimedOut = res.ExitCode, res.TimedOut
		ht.OutputTail = tailBytes(res.Output, store.MaxOutputTail)
	}
	_ = r.update(func(t *store.Task) { t.HostTest = ht })
	text := fmt.Sprintf("test command exited %s", exitWord(ht.ExitCode))
	if ht.Error != "" {
		text = "the test command could not run: " + ht.Error
	}
	sink.Emit(event.Event{Time: time.Now(), Kind: event.Progress, Task: t.ID, State: "tests", Text: text})
}

func exitWord(code *int) string {
	if code == nil {
		return "without an exit code"
	}
	return fmt.Sprint(*code)
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
