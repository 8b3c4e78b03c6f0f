package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ToolOptions configure RunTool.
type ToolOptions struct {
	// ArtifactDir is the host directory long outputs are stored in. Empty:
	// long outputs are cut to a head and tail instead.
	ArtifactDir string
	// ArtifactPrefix is put in front of artifact file names (e.g. a session id).
	ArtifactPrefix string
}

// RunTool runs one tool call exactly as the agent loop does: arguments are
// normalised and validated against the tool's schema, workspace tools are
// forwarded to ws, todo_write/think/read_artifact are handled here, and an
// output over ~10 KB is stored as an artifact with an excerpt returned.
// Hooks and spawn_agents need a running agent and are not available here.
//
// A bad call (unknown tool, invalid JSON, schema violation, a tool that
// fails) is a ToolResult with IsError set; the error return is only for
// infrastructure failures from ws.
func RunTool(ctx context.Context, ws Workspace, name string, args json.RawMessage, opts ToolOptions) (ToolResult, error) {
	r := newToolRunner(ws, newArtifactStore(opts.ArtifactDir, opts.ArtifactPrefix), nil)
	return r.run(ctx, name, args)
}

// toolRunner executes the model's tool calls for one agent.
type toolRunner struct {
	cat       *toolCatalog
	ws        Workspace
	artifacts *artifactStore // nil: no artifact dir
	spawner   Spawner
	hooks     Hooks
	hookSink  func(hook string, res ToolResult) // reports hook runs; may be nil
	memory    Memory                            // nil: remember is not offered
	allow     []string                          // tool patterns offered; nil: all
	user      User                              // nil: nobody to ask
	planMode  bool                              // writes wait for an approved plan
	coreOnly  bool                              // small window: optional tools are not offered
	mcp       map[string]*mcpTool               // MCP servers' tools by offered name
	online    bool                              // the task has egress: web_fetch is offered

	mu           sync.Mutex
	todos        []todoItem
	planApproved bool
}

type todoItem struct {
	Content string `json:"content"`
	Status  string `json:"status"`
}

func newToolRunner(ws Workspace, arts *artifactStore, sp Spawner) *toolRunner {
	return &toolRunner{cat: mustCatalog(), ws: ws, artifacts: arts, spawner: sp}
}

// offered reports whether name is a tool this runner offers: spawn_agents
// needs a Spawner, read_artifact an artifact directory.
func (r *toolRunner) offered(name string) bool {
	if _, ok := r.mcp[name]; ok {
		return allowed(r.allow, name)
	}
	if _, ok := r.cat.specs[name]; !ok {
		return false
	}
	if !allowed(r.allow, name) {
		return false
	}
	// ask_user stays when someone can answer: a small window is no
	// reason to stop asking a person who is there.
	if r.coreOnly && optionalTools[name] && !(r.planMode && name == ToolPresentPlan) && !(r.user != nil && name == ToolAskUser) {
		return false
	}
	switch name {
	case ToolSpawnAgents:
		return r.spawner != nil
	case ToolReadArtifact:
		return r.artifacts != nil
	case ToolRemember:
		return r.memory != nil
	case ToolPresentPlan:
		return r.planMode
	case ToolWebFetch:
		return r.online
	}
	return true
}

// names lists the offered tools in the order they are described to the
// model.
func (r *toolRunner) names() []string {
	names := make([]string, 0, len(toolSpecs))
	for _, s := range toolSpecs {
		if r.offered(s.name) {
			names = append(names, s.name)
		}
	}
	names = append(names, r.mcpNames()...)
	return names
}

// readOnly reports whether a call may run concurrently with its neighbours.
// Unknown tools count as read-only: they only produce an error result.
func (r *toolRunner) readOnly(name string) bool {
	if _, ok := r.mcp[name]; ok {
		return false // a server's tool may change anything
	}
	spec, ok := r.cat.specs[name]
	return !ok || spec.readOnly()
}

// errResult is a failed call's result for the model.
func errResult(format string, a ...any) ToolResult {
	return ToolResult{Output: "error: " + fmt.Sprintf(format, a...), IsError: true}
}

// normalizeArgs repairs the two argument shapes weak models commonly send:
// nothing at all for a tool without required arguments, and the arguments
// object encoded a second time as a JSON string.
func normalizeArgs(args []byte) []byte {
	t := bytes.TrimSpace(args)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return []byte("{}")
	}
	if t[0] == '"' {
		var inner string
		if json.Unmarshal(t, &inner) == nil {
			in := bytes.TrimSpace([]byte(inner))
			if len(in) > 0 && in[0] == '{' && json.Valid(in) {
				return in
			}
		}
	}
	return t
}

// checkCall validates a call without running it.
//
// name must be canonical (see canonicalTool); aliased argument names are
// renamed to ours.
func (r *toolRunner) checkCall(name string, args []byte) ([]byte, error) {
	if !r.offered(name) {
		if _, known := r.cat.specs[name]; known && !allowed(r.allow, name) {
			return nil, fmt.Errorf("%s is not available to this agent (its type does not allow it). Available tools: %s", name, strings.Join(r.names(), ", "))
		}
		return nil, fmt.Errorf("unknown tool %q. Available tools: %s", name, strings.Join(r.names(), ", "))
	}
	if _, ok := r.mcp[name]; ok {
		return normalizeArgs(args), nil // the server checks its own arguments
	}
	args = canonicalArgs(name, normalizeArgs(args))
	if _, err := r.cat.validate(name, args); err != nil {
		return nil, err
	}
	return args, nil
}

// run executes one call. Duration is measured here when the workspace does
// not report it.
func (r *toolRunner) run(ctx context.Context, name string, rawArgs []byte) (ToolResult, error) {
	start := time.Now()
	res, err := r.dispatch(ctx, name, rawArgs)
	if err != nil {
		return res, err
	}
	if res.Duration == 0 {
		res.Duration = time.Since(start)
	}
	if len(res.Output) > artifactThreshold {
		res.Output = r.store(res.Output)
		res.Truncated = true
	}
	return res, nil
}

func (r *toolRunner) store(out string) string {
	if r.artifacts != nil {
		id, err := r.artifacts.save(out)
		if err == nil {
			return excerpt(out, id)
		}
		return shorten(out, excerptHead+excerptTail, fmt.Sprintf("output cut: %d bytes total; storing it failed: %v", len(out), err))
	}
	return shorten(out, excerptHead+excerptTail, fmt.Sprintf("output cut: %d bytes total", len(out)))
}

func (r *toolRunner) dispatch(ctx context.Context, name string, rawArgs []byte) (ToolResult, error) {
	name = canonicalTool(name)
	args, err := r.checkCall(name, rawArgs)
	if err != nil {
		return errResult("%s: %v", name, err), nil
	}
	if why := r.planGate(name); why != "" {
		return errResult("%s", why), nil
	}
	if t, ok := r.mcp[name]; ok {
		return r.callMCP(ctx, t, args)
	}
	spec := r.cat.specs[name]
	hooked := spec.kind == kindWorkspaceWrite || spec.kind == kindWorkspaceRead || name == ToolSpawnAgents
	if hooked && len(r.hooks.PreTool) > 0 {
		blocked, res, err := r.preTool(ctx, name, args)
		if err != nil || blocked {
			return res, err
		}
	}
	var res ToolResult
	switch spec.kind {
	case kindWorkspaceRead, kindWorkspaceWrite:
		res, err = r.ws.Call(ctx, name, json.RawMessage(args))
		if err != nil {
			return ToolResult{}, fmt.Errorf("workspace %s: %w", name, err)
		}
	default:
		res, err = r.local(ctx, name, args)
		if err != nil {
			return ToolResult{}, err
		}
	}
	if hooked && len(r.hooks.PostTool) > 0 {
		if err := r.postTool(ctx, name, args, res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// local runs the tools the agent handles itself.
func (r *toolRunner) local(ctx context.Context, name string, args []byte) (ToolResult, error) {
	switch name {
	case ToolThink:
		return ToolResult{Output: "ok"}, nil
	case ToolTodoWrite:
		var a struct {
			Todos []todoItem `json:"todos"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return errResult("todo_write: %v", err), nil
		}
		r.mu.Lock()
		r.todos = a.Todos
		r.mu.Unlock()
		return ToolResult{Output: renderTodos(a.Todos)}, nil
	case ToolReadArtifact:
		var a struct {
			ID     string `json:"id"`
			Offset int    `json:"offset"`
			Limit  int    `json:"limit"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return errResult("read_artifact: %v", err), nil
		}
		out, ok := r.artifacts.page(a.ID, a.Offset, a.Limit)
		// A page is capped below the artifact threshold, so it is never
		// stored again.
		return ToolResult{Output: out, IsError: !ok}, nil
	case ToolSpawnAgents:
		return r.spawn(ctx, args)
	case ToolRemember:
		if r.memory == nil {
			break
		}
		return r.remember(ctx, args)
	case ToolAskUser:
		return r.askUser(ctx, args)
	case ToolPresentPlan:
		return r.presentPlan(ctx, args)
	}
	return errResult("unknown tool %q", name), nil
}

func renderTodos(todos []todoItem) string {
	if len(todos) == 0 {
		return "todo list is empty"
	}
	var b strings.Builder
	for _, t := range todos {
		mark := "[ ]"
		switch t.Status {
		case "in_progress":
			mark = "[~]"
		case "completed":
			mark = "[x]"
		}
		fmt.Fprintf(&b, "%s %s\n", mark, t.Content)
	}
	return b.String()
}

// spawn runs sub-agents through the Spawner. A sub-agent's failure is part
// of the result; only cancellation stops the parent.
func (r *toolRunner) spawn(ctx context.Context, args []byte) (ToolResult, error) {
	var a struct {
		Tasks []SubTask `json:"tasks"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return errResult("spawn_agents: %v", err), nil
	}
	seen := map[string]bool{}
	for _, t := range a.Tasks {
		if seen[t.Name] {
			return errResult("spawn_agents: task name %q is used twice; give every task its own name", t.Name), nil
		}
		seen[t.Name] = true
	}
	results, err := r.spawner.Spawn(ctx, a.Tasks)
	if err != nil {
		if ctx.Err() != nil {
			return ToolResult{}, fmt.Errorf("spawn_agents: %w", err)
		}
		return errResult("spawn_agents: %v", err), nil
	}
	var b strings.Builder
	failed := 0
	for _, res := range results {
		state := "done"
		if res.IsError {
			state = "failed"
			failed++
		}
		fmt.Fprintf(&b, "## %s (%s)\n%s\n\n", res.Name, state, strings.TrimSpace(res.Summary))
	}
	return ToolResult{Output: b.String(), IsError: failed == len(results) && failed > 0}, nil
}
