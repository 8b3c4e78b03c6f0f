package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator/store"
)

// followPoll is how often `agent log -f` looks for new events.
const followPoll = 100 * time.Millisecond

// maxEventLine bounds one line of the event log.
const maxEventLine = 4 << 20

// withFollow adds -f to `agent log`: follow a running task's event log
// with the live rendering, until the task ends.
func withFollow(f *Factory, cmd *cobra.Command) *cobra.Command {
	var follow, thinking bool
	run := cmd.RunE
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the task's events as it runs (from another terminal), until it ends")
	cmd.Flags().BoolVar(&thinking, "show-thinking", false, "with -f: show the model's thinking too")
	cmd.Long = strings.TrimSpace(cmd.Long + `

Shows the model's thinking too. With -f, follow the task while it runs, from
any terminal: its events (text, tool calls and results, network, sub-agents)
are rendered as the terminal that started it renders them, and the command
returns when the task ends; with --json, the events themselves, one JSON
object per line.`)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if !follow {
			return run(c, args)
		}
		jsonOut, _ := c.Flags().GetBool("json")
		return followRun(c.Context(), &TaskRefOptions{IO: f.IO, Factory: f, Task: args[0], JSON: jsonOut}, thinking)
	}
	return cmd
}

// followRun renders the events of task opts.Task as they are appended to
// its event log, until the task is no longer running (or ctx ends).
func followRun(ctx context.Context, opts *TaskRefOptions, thinking bool) error {
	o, t, err := loadTask(opts)
	if err != nil {
		return err
	}
	if t.Events == "" {
		return fmt.Errorf("task %s has no event log", t.ID)
	}
	r := newEventRenderer(opts.IO, false)
	r.showThinking = thinking
	// Elapsed times are the task's, not this command's.
	var mu sync.Mutex
	var at time.Time
	r.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if at.IsZero() {
			return time.Now()
		}
		return at
	}
	if !t.Started.IsZero() {
		r.start = t.Started
	}
	defer r.Close()

	running := func() bool {
		cur, err := o.Store().Load(t.ID)
		if err != nil {
			return false
		}
		t = cur
		return (cur.State == store.Running || cur.State == store.Created) && o.Store().Alive(cur.ID)
	}
	var file *os.File
	defer func() {
		if file != nil {
			_ = file.Close()
		}
	}()
	var rd *bufio.Reader
	var partial []byte
	// drain reads and renders every complete line written so far.
	drain := func() error {
		if file == nil {
			f, err := os.Open(t.Events)
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			file, rd = f, bufio.NewReaderSize(f, 64<<10)
		}
		for {
			chunk, err := rd.ReadSlice('\n')
			partial = append(partial, chunk...)
			if errors.Is(err, bufio.ErrBufferFull) {
				if len(partial) > maxEventLine {
					return fmt.Errorf("event log %s: a line longer than %d bytes", t.Events, maxEventLine)
				}
				continue
			}
			if err == io.EOF {
				return nil // a line still being written stays in partial
			}
			if err != nil {
				return err
			}
			line := partial
			partial = nil
			if opts.JSON {
				if _, err := opts.IO.Out.Write(termtext.JSON(line)); err != nil {
					return err
				}
				continue
			}
			var e event.Event
			if json.Unmarshal(line, &e) != nil {
				continue
			}
			mu.Lock()
			at = e.Time
			mu.Unlock()
			r.mu.Lock()
			if r.start.IsZero() || e.Time.Before(r.start) {
				r.start = e.Time
			}
			r.mu.Unlock()
			r.Emit(safeEvent(e))
		}
	}
	for {
		live := running()
		if err := drain(); err != nil {
			return err
		}
		if !live {
			// The task is over (or not running at all): what it wrote
			// before ending has been read.
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
	}
	r.Close()
	if !opts.JSON {
		fmt.Fprintf(opts.IO.ErrOut, "task %s is %s\n", t.ID, t.State)
	}
	return nil
}

// safeEvent escapes every text field of an event read back from a log the
// model's and the sandbox's output went into.
func safeEvent(e event.Event) event.Event {
	e.Text, e.Tool, e.Args = termtext.Text(e.Text), termtext.Text(e.Tool), termtext.Text(e.Args)
	e.Agent, e.State, e.CallID = termtext.Text(e.Agent), termtext.Text(e.State), termtext.Text(e.CallID)
	e.Output = termtext.Text(e.Output)
	return e
}
