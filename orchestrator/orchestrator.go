package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
)

// Options configure an Orchestrator. StateDir and Engine are required.
type Options struct {
	// Test is the user's test command for every task (a task's own
	// TaskOptions.Test wins; "" = the project environment's test:), and
	// TestTimeout bounds its run (0: the bash tool's maximum).
	Test        string
	TestTimeout time.Duration
	// StateDir holds task records, worktrees, sessions, logs and locks.
	StateDir string
	// Engine connects to the sandbox backend (Docker or Podman; an
	// in-process one in unit tests). It is called only by operations that
	// need sandboxes, so listing tasks or showing a diff works without an
	// engine.
	Engine func(ctx context.Context) (sandbox.Backend, error)
	// Sandbox is the template of every task's sandbox (image, toolbox,
	// limits, runtime, extra labels); Workspace, Task and StateID are set
	// per task.
	Sandbox sandbox.Spec
	// ToolboxError, when set, is why no toolbox binary was found; tasks
	// fail with it before creating anything.
	ToolboxError error
	// Sink receives the events of tasks run by this orchestrator.
	Sink event.Sink
	// MaxIterations bounds model requests per run (0: the agent's default).
	MaxIterations int
	// Hooks run inside the sandbox.
	Hooks agent.Hooks
	// LLMPort is the port of the managed llama-server, used when a task
	// names no endpoint and LLMAddress finds no running server.
	LLMPort int
	// LLMAddress, when set, finds the running managed server's base URL
	// from its container (the port it really publishes).
	LLMAddress func(context.Context) (string, error)
	// APIKey is sent to the LLM endpoint when set.
	APIKey string
	// LLMStallTimeout ends a model reply that makes no progress for this
	// long (keep-alive comments are not progress); LLMReplyTimeout bounds
	// one reply in all. Either ends the turn with a retriable error and
	// leaves the task interrupted. Zero: the llm package's defaults.
	LLMStallTimeout time.Duration
	LLMReplyTimeout time.Duration
	// Egress is the allowlist of the tasks' sandboxes. Empty (the default):
	// no network at all. Otherwise a policy-enforcing proxy per task is the
	// only way out, and every connection is logged.
	Egress policy.Egress
	// ToolMode is how tools are offered to the model (auto, native, text).
	ToolMode agent.ToolMode
	// SubAgents offers the agent the spawn_agents tool: sub-agents in
	// their own worktrees and sandboxes, as many at once as the model
	// server has slots.
	SubAgents bool
	// Environment configures project environments (toolchain images and
	// dependency caches).
	Environment EnvironmentOptions
	// DiskLimit bounds the size of a task's (and each sub-agent's)
	// workspace in bytes; 0: no bound. MinFree is the free space the state
	// directory's file system must keep; 0: no floor. A task that crosses
	// either is stopped and its work so far committed.
	DiskLimit, MinFree int64
	// Unsafe switches host-side defences off, for security tests' control
	// runs only.
	Unsafe UnsafeOptions
	// AgentTypes are configured sub-agent types, added to (or replacing)
	// agent.BuiltinAgentTypes.
	AgentTypes map[string]agent.AgentType
	// User is the person at the terminal for ask_user and plan approval;
	// nil when there is none (ask_user then says so).
	User agent.User
	// MCPServers are started inside each task's sandbox; their tools are
	// offered as mcp__<server>__<tool>.
	MCPServers map[string]MCPServerConfig
	// SpareCheckouts is how many spare checkouts (complete checkouts of a
	// commit, made in the background for the next task on it) are kept at
	// most; 0 makes none.
	SpareCheckouts int
	// Pool is how many started sandboxes are kept waiting per set of
	// sandbox settings in use (see pool.go); 0 keeps none.
	Pool int
}

// Orchestrator runs and manages tasks of one state directory.
type Orchestrator struct {
	opts    Options
	store   *store.Store
	stateID string

	engOnce sync.Once
	eng     sandbox.Backend // rawEng with the pool's claims applied
	rawEng  sandbox.Backend
	engErr  error

	poolOnce sync.Once
	pool     *sandbox.Pool

	spares spares
}

// New opens the state directory.
func New(opts Options) (*Orchestrator, error) {
	if opts.StateDir == "" {
		return nil, errors.New("orchestrator: no state directory")
	}
	abs, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	opts.StateDir = abs
	if opts.Sink == nil {
		opts.Sink = event.Discard
	}
	st, err := store.Open(filepath.Join(abs, "tasks"))
	if err != nil {
		return nil, err
	}
	return &Orchestrator{opts: opts, store: st, stateID: StateID(abs)}, nil
}

// StateID is the value of sandbox.LabelState for a state directory: every
// container a state directory's tasks create carries it, and gc only ever
// removes containers that carry its own.
func StateID(stateDir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return hex.EncodeToString(sum[:6])
}

// Store is the task store.
func (o *Orchestrator) Store() *store.Store { return o.store }

func (o *Orchestrator) engine(ctx context.Context) (sandbox.Backend, error) {
	o.engOnce.Do(func() {
		if o.opts.Engine == nil {
			o.engErr = errors.New("orchestrator: no Docker engine configured")
			return
		}
		o.eng, o.engErr = o.opts.Engine(ctx)
		if o.engErr == nil && o.opts.StateDir != "" {
			// Every lookup sees a claimed pool member as the sandbox
			// of its task and worktree (see pool.go).
			o.rawEng = o.eng
			o.eng = sandbox.WithPoolClaims(o.eng, o.poolDir())
		}
	})
	return o.eng, o.engErr
}

func (o *Orchestrator) worktreePath(id string) string {
	return filepath.Join(o.opts.StateDir, "worktrees", id)
}
func (o *Orchestrator) sessionPath(id string) string {
	return filepath.Join(o.opts.StateDir, "sessions", id+".jsonl")
}
func (o *Orchestrator) eventsPath(id string) string {
	return filepath.Join(o.opts.StateDir, "logs", id+".events.jsonl")
}
func (o *Orchestrator) egressDir(id string) string {
	return filepath.Join(o.opts.StateDir, "egress", id)
}
func (o *Orchestrator) egressLogPath(id string) string {
	return filepath.Join(o.opts.StateDir, "logs", id+".egress.jsonl")
}
func (o *Orchestrator) artifactDir(id string) string {
	return filepath.Join(o.opts.StateDir, "artifacts", id)
}
func (o *Orchestrator) lockDir() string { return filepath.Join(o.opts.StateDir, "locks") }

// Task resolves a task id, unique id prefix or branch name.
func (o *Orchestrator) Task(ref string) (*store.Task, error) {
	return o.store.Resolve(ref)
}

// openRepo opens a task's repository by its recorded checkout.
func (o *Orchestrator) openRepo(ctx context.Context, t *store.Task) (*worktree.Repo, error) {
	r, err := worktree.Open(ctx, t.Repo)
	if err != nil {
		return nil, fmt.Errorf("task %s: repository %s: %w", t.ID, t.Repo, err)
	}
	if filepath.Clean(r.CommonDir) != filepath.Clean(t.RepoGitDir) {
		return nil, fmt.Errorf("task %s: %s is now a different repository (git dir %s, recorded %s)", t.ID, t.Repo, r.CommonDir, t.RepoGitDir)
	}
	r.UnsafeAddSpecial = o.opts.Unsafe.AddSpecial
	return r, nil
}

// taskWorktree returns the task's worktree handle.
func (o *Orchestrator) taskWorktree(r *worktree.Repo, t *store.Task) (*worktree.Worktree, error) {
	return r.Attach(worktree.Worktree{Path: t.Worktree, GitDir: t.WorktreeGit, Branch: t.Branch})
}

// checkedOutWorktree returns the task's worktree when its files are on
// disk, else nil: a worktree that was never checked out holds nothing of
// the agent's (git would call every file deleted).
func (o *Orchestrator) checkedOutWorktree(r *worktree.Repo, t *store.Task) *worktree.Worktree {
	if !t.Populated {
		return nil
	}
	wt, err := o.taskWorktree(r, t)
	if err != nil || !wt.Exists() {
		return nil
	}
	return wt
}

// insideStateDir reports whether path is inside the state directory (a
// task worktree must never be used as a repository: its .git, if any, was
// written by an agent).
func (o *Orchestrator) insideStateDir(path string) bool {
	rel, err := filepath.Rel(o.opts.StateDir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
