package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/sandbox"
)

// stopBackground kills the background processes the agent left running in
// sb (process_start) once its loop is over: before the host commits, so no
// process the model started still writes to the workspace, and even when
// the task was interrupted. A failure is reported and not fatal: removing
// the sandbox ends them anyway, and host steps keep their own guards.
func stopBackground(ctx context.Context, sb *sandbox.Sandbox, sink event.Sink, taskID string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	n, err := sb.StopProcesses(cctx)
	switch {
	case err != nil:
		sink.Emit(event.Event{Time: time.Now(), Kind: event.Error, Task: taskID, Text: err.Error()})
	case n > 0:
		sink.Emit(event.Event{Time: time.Now(), Kind: event.Notice, Task: taskID,
			Text: fmt.Sprintf("stopped %d background process(es) the agent left running", n)})
	}
}
