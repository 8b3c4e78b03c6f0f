package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox/toolbox"
)

// TestRunRecordUnderOneLock: while a task runs, its record is changed by
// the event recorder (fed by the agent loop, sub-agents and the egress
// proxy, each from a goroutine of its own) and by the run's own steps
// (sub-agents journalled and finished, the run stopped). Both paths change
// it at once here. Under -race the test fails when either changes or saves
// the record outside the run's lock (a save reads all of it), and the
// counts show that no change was lost, in memory or in the saved record.
func TestRunRecordUnderOneLock(t *testing.T) {
	o, err := New(Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := o.store.NewID()
	if err != nil {
		t.Fatal(err)
	}
	task := &store.Task{ID: id, Prompt: "p", State: store.Running, Events: filepath.Join(t.TempDir(), "events.jsonl")}
	if err := o.store.Save(task); err != nil {
		t.Fatal(err)
	}
	r := &Run{o: o, Task: task}
	rec, closeLog := r.recorder()
	const n = 30
	exit := 0
	var wg sync.WaitGroup
	wg.Go(func() { // the recorder's side
		for i := range n {
			call := fmt.Sprint(i)
			rec.Emit(event.Event{Kind: event.ToolStarted, Tool: toolbox.ToolBash, CallID: call, Args: `{"command":"cmd ` + call + `"}`})
			rec.Emit(event.Event{Kind: event.Usage, PromptTokens: 1, CompletionTokens: 2})
			rec.Emit(event.Event{Kind: event.Egress, Allowed: i%2 == 0})
			rec.Emit(event.Event{Kind: event.ToolFinished, Tool: toolbox.ToolBash, CallID: call, ExitCode: &exit})
		}
	})
	wg.Go(func() { // the run's side
		ctx := context.Background()
		for i := range n {
			sub := fmt.Sprint("s", i)
			r.journalSub(store.SubAgent{ID: sub, Name: sub, State: store.SubRunning})
			_ = r.stop(ctx, errors.New("stopped"))
			r.finishSub(sub, store.SubDone, "")
		}
	})
	wg.Wait()
	closeLog()
	r.save()

	saved, err := o.store.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]*store.Task{"in memory": task, "saved": saved} {
		finished := 0
		for _, c := range got.Commands {
			if c.ExitCode != nil {
				finished++
			}
		}
		done := 0
		for _, sa := range got.SubAgents {
			if sa.State == store.SubDone {
				done++
			}
		}
		if finished != n || len(got.SubAgents) != n || done != n || got.State != store.Failed ||
			got.Tokens.Prompt != n || got.Tokens.Completion != 2*n || got.Network.Allowed+got.Network.Denied != n {
			t.Errorf("%s: %d finished commands, %d sub-agents (%d done), state %s, tokens %d/%d, egress %d+%d; want %d of each",
				name, finished, len(got.SubAgents), done, got.State, got.Tokens.Prompt, got.Tokens.Completion,
				got.Network.Allowed, got.Network.Denied, n)
		}
	}
}
