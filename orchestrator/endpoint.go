package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"time"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/scripted"
	"github.com/localagent/agent/orchestrator/llamaserver"
)

// ScriptPrefix selects the scripted server: "script:FILE".
const ScriptPrefix = "script:"

// endpoint is the model a task talks to.
type endpoint struct {
	spec      string // what the user gave ("" = managed)
	url       string
	client    *llm.HTTPClient
	model     string
	ctxTokens int
	slots     int // the server's parallel slots: how many sub-agents run at once
	// pin: the server reported its slots (llama-server's /props), so each
	// agent loop is pinned to one slot with prompt caching.
	pin      bool
	scripted bool
	close    func()
}

// openLLM connects to the model named by spec: "script:FILE" starts the
// scripted server in this process on 127.0.0.1 (the real HTTP client talks
// to it), a URL is used as is, "" means the managed llama-server. It checks
// that something answers before any task state is created.
func (o *Orchestrator) openLLM(ctx context.Context, spec, model string) (*endpoint, error) {
	ep := &endpoint{spec: spec, close: func() {}}
	switch {
	case strings.HasPrefix(spec, ScriptPrefix):
		file := strings.TrimPrefix(spec, ScriptPrefix)
		if file == "" {
			return nil, errors.New("--llm script: needs a file: --llm script:FILE")
		}
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("model script %s: %w", file, errors.Unwrap(err))
		}
		s, err := scripted.Load(file)
		if err != nil {
			return nil, err
		}
		// The server lives as long as the task run, not the request ctx
		// of this call.
		srv, err := scripted.Start(context.WithoutCancel(ctx), s)
		if err != nil {
			return nil, err
		}
		ep.url = srv.URL()
		ep.scripted = true
		ep.close = func() { _ = srv.Close() }
	case spec == "":
		ep.url = llamaserver.URL(o.opts.LLMPort)
		if o.opts.LLMAddress != nil {
			// The running server's own port beats configuration: it may
			// have been started with `llm up --port N`.
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if u, err := o.opts.LLMAddress(actx); err == nil && u != "" {
				ep.url = u
			}
			cancel()
		}
	default:
		ep.url = spec
	}
	c, err := llm.NewHTTP(llm.Options{BaseURL: ep.url, APIKey: o.opts.APIKey, Model: model,
		IdleTimeout: o.opts.LLMStallTimeout, MaxReplyTime: o.opts.LLMReplyTimeout})
	if err != nil {
		ep.close()
		return nil, err
	}
	ep.client = c
	ictx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	info, err := c.Info(ictx)
	if err != nil {
		ep.close()
		if spec == "" {
			return nil, fmt.Errorf("no LLM server answers at %s (%v): start one with `agent llm up --model FILE` or pass --llm URL", ep.url, err)
		}
		return nil, fmt.Errorf("no LLM server answers at %s (%v): check the address, or pass --llm script:FILE for a scripted model", ep.url, err)
	}
	ep.model = model
	if ep.model == "" {
		ep.model = info.Model
	}
	if ep.model == "" {
		ep.model = "unknown"
	}
	ep.ctxTokens = info.ContextWindow
	ep.slots = max(info.Slots, 1)
	ep.pin = info.Slots > 0
	return ep, nil
}

// mainSlot is the slot of the task's own agent loop, spread over the
// server's slots by task id: tasks running at once on one server rarely
// share a slot (a pinned request waits while its slot is busy).
func (r *Run) mainSlot() int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(r.Task.ID))
	return int(h.Sum32() % uint32(max(r.ep.slots, 1)))
}

// slot is the Slot option pinning an agent to slot id, or nil when the
// server has no slots to pin to.
func (ep *endpoint) slot(id int) *int {
	if !ep.pin {
		return nil
	}
	return &id
}
