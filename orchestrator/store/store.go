package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// State is where a task is in its life.
type State string

// Task states. Created -> Running -> Review -> Merged | Kept | Discarded;
// Running -> Interrupted (the process died or was stopped) -> Running again
// on resume; anything -> Failed on an infrastructure error (the worktree
// and branch stay).
const (
	Created     State = "created"
	Running     State = "running"
	Interrupted State = "interrupted"
	Review      State = "review"
	Merged      State = "merged"
	Kept        State = "kept"
	Discarded   State = "discarded"
	Failed      State = "failed"
)

// Final reports whether the task's worktree is gone for good (merged or
// discarded).
func (s State) Final() bool { return s == Merged || s == Discarded }

// Tokens counts model tokens.
type Tokens struct {
	Prompt     int `json:"prompt"`
	Completion int `json:"completion"`

	// Speed over the model requests that reported it: prompt tokens
	// computed vs taken from the server's cache, time to first token, and
	// generation speed.
	Requests        int     `json:"requests,omitempty"`
	PromptProcessed int     `json:"prompt_processed,omitempty"`
	PromptCached    int     `json:"prompt_cached,omitempty"`
	FirstTokenMS    int64   `json:"first_token_ms_total,omitempty"`
	GenTokens       int     `json:"gen_tokens,omitempty"`
	GenMS           float64 `json:"gen_ms,omitempty"`
	// ServerTimings: some figures are the server's own (else measured
	// from the stream; cached tokens are then unknown).
	ServerTimings bool `json:"server_timings,omitempty"`
	// GenPerSecond and AvgFirstTokenMS are derived from the above.
	GenPerSecond    float64 `json:"gen_tokens_per_s,omitempty"`
	AvgFirstTokenMS int64   `json:"avg_first_token_ms,omitempty"`
	// Turns are the per-request prompt figures from the server's timings
	// (the first MaxTurns), with the slot each agent was pinned to.
	Turns []TurnTokens `json:"turns,omitempty"`
}

// TurnTokens are one model request's prompt figures.
type TurnTokens struct {
	// Agent is "" for the task's own loop, else the sub-agent's name.
	Agent string `json:"agent,omitempty"`
	// Slot is the llama-server slot the agent is pinned to (nil: none).
	Slot      *int `json:"slot,omitempty"`
	Prompt    int  `json:"prompt"`
	Processed int  `json:"processed"`
	Cached    int  `json:"cached"`
}

// MaxTurns bounds Tokens.Turns, so a long task's record stays small.
const MaxTurns = 500

// Timings of a task's steps, in milliseconds.
type Timings struct {
	Worktree int64 `json:"worktree_ms,omitempty"`
	Sandbox  int64 `json:"sandbox_ms,omitempty"`
	// Ready is from the start of the command to the first tool call being
	// possible (worktree + sandbox + toolbox session).
	Ready  int64 `json:"ready_ms,omitempty"`
	Agent  int64 `json:"agent_ms,omitempty"`
	Commit int64 `json:"commit_ms,omitempty"`
}

// Command is one shell command the agent ran.
type Command struct {
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// Running is set while the command runs: one still set after the run
	// ended was cut short (the process was killed or stopped).
	Running    bool  `json:"running,omitempty"`
	CutShort   bool  `json:"cut_short,omitempty"`
	TimedOut   bool  `json:"timed_out,omitempty"`
	OOMKilled  bool  `json:"oom_killed,omitempty"`
	DurationMS int64 `json:"duration_ms"`
	// Missing is the program an exit-127 command could not find.
	Missing string `json:"missing,omitempty"`
	// OutputTail is the end of a test command's output (at most
	// MaxOutputTail bytes; kept for test commands only): the test
	// runner's summary, which the verdict reads.
	OutputTail string `json:"output_tail,omitempty"`
}

// HostTest is a run of the task's test command by the orchestrator, in
// the task's sandbox after the agent's last turn.
type HostTest struct {
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// Error is why the command could not be run at all ("" when it ran).
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	OutputTail string `json:"output_tail,omitempty"`
}

// MaxOutputTail bounds Command.OutputTail.
const MaxOutputTail = 2048

// MaxCommands caps the commands kept in a record.
const MaxCommands = 500

// Task is the record of one task.
type Task struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
	State  State  `json:"state"`
	// Error says why the task failed or was interrupted.
	Error string `json:"error,omitempty"`

	Repo       string `json:"repo"`         // the user's checkout
	RepoGitDir string `json:"repo_git_dir"` // its common git directory
	BaseRef    string `json:"base_ref"`
	BaseBranch string `json:"base_branch,omitempty"` // "" when the base is not a branch
	BaseCommit string `json:"base_commit"`
	// StartCommit is where the branch started: BaseCommit, or a snapshot of
	// the user's uncommitted changes on top of it.
	StartCommit string `json:"start_commit"`
	Branch      string `json:"branch"`
	Worktree    string `json:"worktree"`
	WorktreeGit string `json:"worktree_git_dir"`
	// Populated is set once the worktree's files are checked out (the
	// worktree is created empty and filled while the sandbox starts).
	Populated bool `json:"populated"`

	SandboxID string `json:"sandbox_id,omitempty"`
	Image     string `json:"image,omitempty"`
	// Environment is the project environment the sandbox runs in (its
	// image is Image), when the repository or the user defines one.
	Environment *Environment `json:"environment,omitempty"`
	GPUs        string       `json:"gpus,omitempty"`     // NVIDIA GPUs of the task's sandboxes ("" none)
	GPUNote     string       `json:"gpu_note,omitempty"` // what the GPU memory check could not tell ("" nothing)
	// SandboxNote is what the engine could not enforce on the task's
	// sandbox (rootless Podman on cgroup v1: no memory or CPU limit); the
	// review repeats it.
	SandboxNote string `json:"sandbox_note,omitempty"`
	// Isolation is the isolation of the task's sandboxes, "runc" or
	// "runsc", chosen when the task started and kept by every sandbox made
	// for it later (continue, chat, shell, sub-agents); "" (records from
	// before it was kept) means the configured one.
	Isolation string `json:"isolation,omitempty"`
	Session   string `json:"session,omitempty"` // transcript (JSONL)
	Events    string `json:"events,omitempty"`  // event log (JSONL)
	LLM       string `json:"llm,omitempty"`     // endpoint URL or script:FILE
	Model     string `json:"model,omitempty"`
	PID       int    `json:"pid,omitempty"`

	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	Timings  Timings   `json:"timings"`
	Tokens   Tokens    `json:"tokens"`

	// Result is the agent's final answer.
	Result   string    `json:"result,omitempty"`
	Commits  []string  `json:"commits,omitempty"`
	Commands []Command `json:"commands,omitempty"`
	// TestCommand is the test command the orchestrator runs after the
	// agent's last turn ("" none: the verdict comes from the agent's own
	// test runs); HostTest is its last run (nil: not run in this round).
	TestCommand string    `json:"test_command,omitempty"`
	HostTest    *HostTest `json:"host_test,omitempty"`
	// Network is the task's egress: the allowlist it ran under and how many
	// connections the proxy allowed and denied (log: EgressLog).
	Network Network `json:"network"`

	Decision    string `json:"decision,omitempty"` // merge, squash, keep, discard
	MergeCommit string `json:"merge_commit,omitempty"`

	// FollowUps are the messages that continued the task after its first
	// prompt (agent continue, Request changes), in order.
	FollowUps []string `json:"follow_ups,omitempty"`
	// FollowUpFrom is the task as it stood under review when a follow-up
	// began; it is written before the follow-up changes anything, so that
	// one which fails having changed nothing (branch and worktree as they
	// were) puts the task back there, its reviewed work still mergeable.
	FollowUpFrom *FollowUpFrom `json:"follow_up_from,omitempty"`
	// Released is set while the task's worktree is handed back (agent
	// checkout): the branch lives in the user's checkout and the next
	// agent continue re-creates the worktree.
	Released bool `json:"released,omitempty"`

	// RemovingWorktree is set once a finished task's worktree was found
	// without uncommitted changes, before its removal starts: a removal
	// killed halfway (files partly deleted) is finished by gc, never taken
	// for uncommitted changes.
	RemovingWorktree bool `json:"removing_worktree,omitempty"`

	// MergedTip is the task branch's tip that the merge took in: gc
	// deletes the branch when it still points there.
	MergedTip string `json:"merged_tip,omitempty"`

	// Pending is the step that changes state on disk and has started but
	// not been recorded as done; it is written before the step begins, so
	// that after a kill resume, merge or gc can finish or undo it.
	Pending *Pending `json:"pending,omitempty"`
	// SubAgents are the task's sub-agents, recorded before each one's
	// branch and worktree are created.
	SubAgents []SubAgent `json:"sub_agents,omitempty"`
	// Ignored lists files the agent created that .gitignore excludes: they
	// are not committed and go with the worktree (at most MaxIgnored).
	Ignored      []string `json:"ignored,omitempty"`
	IgnoredCount int      `json:"ignored_count,omitempty"`
	// Submodules are the agent's changes inside submodules, committed in
	// each submodule's own repository (a gitlink in the task's commit
	// cannot hold files).
	Submodules []SubmoduleCommit `json:"submodules,omitempty"`
}

// SubmoduleCommit is the agent's work inside one submodule: a commit on
// Branch in the submodule's repository.
type SubmoduleCommit struct {
	Path   string `json:"path"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
}

// MaxIgnored caps the ignored files named in a record.
const MaxIgnored = 50

// Pending step kinds.
const (
	PendingMerge  = "merge"
	PendingCreate = "create"
)

// Pending is a journalled step: what it was about to change.
type Pending struct {
	Op      string    `json:"op"`
	Started time.Time `json:"started"`
	// A merge: branch Into moves from From to To; the files of Checkout
	// (git dir CheckoutGitDir) listed in Paths move with it.
	Into           string   `json:"into,omitempty"`
	From           string   `json:"from,omitempty"`
	To             string   `json:"to,omitempty"`
	BranchTip      string   `json:"branch_tip,omitempty"`
	Squash         bool     `json:"squash,omitempty"`
	Checkout       string   `json:"checkout,omitempty"`
	CheckoutGitDir string   `json:"checkout_git_dir,omitempty"`
	Paths          []string `json:"paths,omitempty"`
}

// Sub-agent states.
const (
	SubRunning = "running" // branch and worktree may exist; work may be uncommitted
	SubDone    = "done"    // its work is in the parent's worktree; branch removed
	SubKept    = "kept"    // its work is committed on Branch, not in the parent's
	SubEmpty   = "empty"   // it changed nothing; branch removed
)

// SubAgent is one sub-agent of a task.
type SubAgent struct {
	Name        string `json:"name"`
	ID          string `json:"id"`
	Prompt      string `json:"prompt,omitempty"`
	Branch      string `json:"branch"`
	Worktree    string `json:"worktree"`
	WorktreeGit string `json:"worktree_git_dir,omitempty"`
	// Start is the snapshot of the parent's files it started from.
	Start string `json:"start"`
	State string `json:"state"`
	Note  string `json:"note,omitempty"`
	// Unfilled is set from before its worktree is created until all its
	// files are written: a worktree left unfilled by a kill holds no work
	// (what is missing is not a deletion) and is removed, never committed.
	Unfilled bool `json:"unfilled,omitempty"`
}

// Network records a task's egress. An empty Allow means the sandbox had no
// network at all (the default).
type Network struct {
	Allow     []string `json:"allow,omitempty"`
	Allowed   int      `json:"allowed"`
	Denied    int      `json:"denied"`
	EgressLog string   `json:"egress_log,omitempty"`
}

// Environment records a task's project environment: what its sandboxes
// add to the image (variables, dependency-cache mounts).
type Environment struct {
	Hash   string `json:"hash"`
	Source string `json:"source"` // where the definition came from
	// Base is the image the environment was built on.
	Base   string       `json:"base,omitempty"`
	Env    []string     `json:"env,omitempty"`
	Mounts []CacheMount `json:"mounts,omitempty"`
	// Reused is set when the image was already built; BuildMS is the time
	// spent making it present.
	Reused  bool  `json:"reused"`
	BuildMS int64 `json:"build_ms"`
}

// CacheMount is a dependency cache mounted into the task's sandboxes.
type CacheMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// ErrNotFound: no task has that id.
var ErrNotFound = errors.New("no such task")

// Store keeps task records in a directory.
type Store struct {
	dir string
}

// Open returns the store in dir, creating it.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("task store %s: %w", dir, err)
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// NewID returns a fresh short task id (6 hex digits) not used by any
// record.
func (s *Store) NewID() (string, error) {
	for range 100 {
		var b [3]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id := hex.EncodeToString(b[:])
		f, err := os.OpenFile(s.path(id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reserving task id: %w", err)
		}
		// An empty placeholder reserves the id until the first Save.
		_ = f.Close()
		return id, nil
	}
	return "", errors.New("could not find a free task id")
}

// Save writes t atomically and sets t.Updated.
func (s *Store) Save(t *Task) error {
	if !validID(t.ID) {
		return fmt.Errorf("invalid task id %q", t.ID)
	}
	t.Updated = time.Now().UTC()
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding task %s: %w", t.ID, err)
	}
	tmp, err := os.CreateTemp(s.dir, "."+t.ID+".*.tmp")
	if err != nil {
		return fmt.Errorf("saving task %s: %w", t.ID, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("saving task %s: %w", t.ID, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("saving task %s: %w", t.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving task %s: %w", t.ID, err)
	}
	if err := os.Rename(tmp.Name(), s.path(t.ID)); err != nil {
		return fmt.Errorf("saving task %s: %w", t.ID, err)
	}
	return nil
}

// Load reads the record of id.
func (s *Store) Load(id string) (*Task, error) {
	if !validID(id) {
		return nil, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(b) == 0) {
		return nil, fmt.Errorf("task %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading task %s: %w", id, err)
	}
	var t Task
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("task record %s is corrupt: %w", s.path(id), err)
	}
	return &t, nil
}

// Delete removes the record of id (and its reservation placeholder). Only
// for tasks that never got a worktree.
func (s *Store) Delete(id string) error {
	if !validID(id) {
		return fmt.Errorf("invalid task id %q", id)
	}
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = os.Remove(s.lockPath(id))
	_ = os.Remove(s.usePath(id))
	return nil
}

// List returns every task, newest first. Unreadable records are skipped.
func (s *Store) List() ([]*Task, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("listing tasks: %w", err)
	}
	var ts []*Task
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		t, err := s.Load(id)
		if err != nil {
			continue
		}
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Created.After(ts[j].Created) })
	return ts, nil
}

// Resolve finds the task named by ref: a full id, a unique id prefix, or
// the task's branch name.
func (s *Store) Resolve(ref string) (*Task, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil, fmt.Errorf("empty task id: %w", ErrNotFound)
	}
	if validID(ref) {
		if t, err := s.Load(ref); err == nil {
			return t, nil
		}
	}
	ts, err := s.List()
	if err != nil {
		return nil, err
	}
	var match []*Task
	for _, t := range ts {
		if strings.HasPrefix(t.ID, ref) || t.Branch == ref {
			match = append(match, t)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("task %q: %w (list tasks with `agent tasks`)", ref, ErrNotFound)
	case 1:
		return match[0], nil
	}
	ids := make([]string, len(match))
	for i, t := range match {
		ids[i] = t.ID
	}
	return nil, fmt.Errorf("task id %q is ambiguous: it matches %s; give more characters", ref, strings.Join(ids, ", "))
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

func (s *Store) lockPath(id string) string { return filepath.Join(s.dir, id+".lock") }

// Claim marks the calling process as the one running task id, for as long
// as it lives or until release is called. It fails when another live
// process holds the task.
func (s *Store) Claim(id string) (release func(), err error) {
	if !validID(id) {
		return nil, fmt.Errorf("invalid task id %q", id)
	}
	f, err := os.OpenFile(s.lockPath(id), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("claiming task %s: %w", id, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("task %s is being run by another agent process", id)
		}
		return nil, fmt.Errorf("claiming task %s: %w", id, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// Alive reports whether a live process holds task id's claim.
func (s *Store) Alive(id string) bool {
	release, err := s.Claim(id)
	if err != nil {
		return true
	}
	release()
	return false
}

func (s *Store) usePath(id string) string { return filepath.Join(s.dir, id+".use.lock") }

// Use marks the calling process as a user of task id's worktree and
// sandbox (an open `agent shell`) for as long as it lives or until release
// is called. Any number of processes may use a task at once (a shared
// lock); gc and resume leave a used task's sandboxes alone.
func (s *Store) Use(id string) (release func(), err error) {
	if !validID(id) {
		return nil, fmt.Errorf("invalid task id %q", id)
	}
	f, err := os.OpenFile(s.usePath(id), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("using task %s: %w", id, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("using task %s: %w", id, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// InUse reports whether a live process uses task id (see Use).
func (s *Store) InUse(id string) bool {
	if !validID(id) {
		return false
	}
	f, err := os.OpenFile(s.usePath(id), os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// PruneReservations removes the empty placeholders of ids that NewID
// reserved for a task whose process died before it saved the record (no
// live process claims the id and the placeholder is older than minAge). It
// returns the ids removed.
func (s *Store) PruneReservations(minAge time.Duration) ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("listing tasks: %w", err)
	}
	var pruned []string
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.Size() != 0 || time.Since(fi.ModTime()) < minAge {
			continue
		}
		release, err := s.Claim(id)
		if err != nil {
			continue
		}
		if fi, err := os.Lstat(s.path(id)); err == nil && fi.Size() == 0 {
			if err := s.Delete(id); err == nil {
				pruned = append(pruned, id)
			}
		}
		release()
	}
	return pruned, nil
}

// FollowUpFrom is what a follow-up that fails having changed nothing
// restores (see Task.FollowUpFrom).
type FollowUpFrom struct {
	State    State     `json:"state"`
	Decision string    `json:"decision,omitempty"`
	Tip      string    `json:"tip"` // the branch's commit the review showed
	Finished time.Time `json:"finished,omitzero"`
	HostTest *HostTest `json:"host_test,omitempty"`
	// SubAgents is how many sub-agents the task had: one started by the
	// follow-up is work of its own, for resume to recover.
	SubAgents int `json:"sub_agents,omitempty"`
}
