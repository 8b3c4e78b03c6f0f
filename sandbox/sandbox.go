package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Sandbox is one hardened workspace container. Its methods are safe for
// concurrent use.
type Sandbox struct {
	// ID is the container id.
	ID string `json:"id"`
	// Name is the container name.
	Name string `json:"name"`
	// Image is the image it runs.
	Image string `json:"image"`
	// Workspace is the host directory mounted at /workspace.
	Workspace string `json:"workspace"`
	// User is the uid:gid its processes run as.
	User string `json:"user"`
	// State is the container state when the Sandbox was created or looked
	// up ("running", "exited", ...).
	State string `json:"state"`
	// Created is when the container was created.
	Created time.Time `json:"created"`
	// Labels are the container's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Notice says what Create did to the host beyond creating the container
	// (e.g. handing the workspace to an unprivileged uid); empty otherwise.
	Notice string `json:"notice,omitempty"`
	// Pool is PoolIdle or PoolClaimed for a member of a warm pool (see
	// Pool) when the lookup knew its pool directory; "" otherwise.
	Pool string `json:"pool,omitempty"`

	drv Driver // the backend's operations on this sandbox (see Bind)

	// shell is Spec.Shell (or LabelShell of a found sandbox): the bash
	// tool's shell; "" lets the toolbox choose (bash where the image has it).
	shell string

	held atomic.Pointer[hold] // see Hold

	mu      sync.Mutex
	sess    *session
	opening chan struct{} // closed when a session open in progress ends
	lastTry time.Time     // last failed open, to back off re-opening
	closed  bool
	stdio   []*Stdio // StartStdio commands, stopped by StopProcesses
}

// cleanupTimeout bounds cleanup work that must run even after the caller's
// context is cancelled.
const cleanupTimeout = 30 * time.Second

// Create makes and starts a hardened sandbox for spec. On any failure it
// removes what it created. The toolbox session is opened in the background
// so the caller can overlap its own work with it; the first Tool call waits
// for it.
func (e *Engine) Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	s, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := refuseSocketParent(s.Workspace, e.Host); err != nil {
		return nil, err
	}
	if err := CheckToolbox(s.Toolbox); err != nil {
		return nil, err
	}
	runtime, err := e.checkIsolation(s)
	if err != nil {
		return nil, err
	}
	if err := e.ImagePresent(ctx, s.Image); err != nil {
		return nil, err
	}

	user, notice, err := chooseUser(s)
	if err != nil {
		return nil, err
	}
	cfg, hc, err := containerConfig(s, user)
	if err != nil {
		return nil, err
	}
	hc.Runtime = runtime
	if e.Podman {
		if err := podmanHostConfig(hc, e.Rootless); err != nil {
			return nil, err
		}
	}
	if e.NoCgroupLimits {
		notice = joinNotice(notice, rlimitFallback(cfg, s.Limits))
	}
	name := s.Name
	if name == "" {
		name = "agent-sandbox-" + randomHex(6)
	}
	created, err := e.createAndStart(ctx, cfg, hc, name)
	var cerr *createError
	if errors.As(err, &cerr) || (err != nil && created.ID == "") {
		if cerrdefs.IsNotFound(err) {
			// The image vanished between the check and the create.
			return nil, &ImageMissingError{Image: s.Image}
		}
		if ctx.Err() != nil {
			// The engine may still create it after we stopped waiting;
			// the name is the only handle we have on it.
			e.cleanupLate(ctx, name)
		}
		return nil, e.wrap("creating sandbox container", err)
	}
	if err != nil {
		e.cleanup(ctx, created.ID)
		return nil, e.wrap("starting sandbox container", err)
	}
	sb := &Sandbox{
		ID: created.ID, Name: name, Image: s.Image, Workspace: s.Workspace,
		User: user.String(), State: "running", Created: time.Now(),
		Labels: cfg.Labels, Notice: notice, drv: e, shell: s.Shell,
	}
	sb.openAsync()
	return sb, nil
}

// cleanup removes a half-created container even when ctx is cancelled.
func (e *Engine) cleanup(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = e.Remove(cctx, id)
}

// lateCreateWindow is how long a create the client gave up on is watched
// for, so that a container the engine makes afterwards is still removed.
const lateCreateWindow = 2 * time.Second

// cleanupLate removes the container called name, waiting a little for it
// to appear when its create request was abandoned mid-flight.
func (e *Engine) cleanupLate(ctx context.Context, name string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	deadline := time.Now().Add(lateCreateWindow)
	for {
		err := e.api.ContainerRemove(cctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err == nil || !cerrdefs.IsNotFound(err) || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ListOptions narrow List. The zero value lists every sandbox of this
// project, running or not.
type ListOptions struct {
	// Labels are extra label filters, "key" or "key=value".
	Labels []string
	// Running lists only running sandboxes.
	Running bool
}

// List returns this project's sandboxes, newest first.
func (e *Engine) List(ctx context.Context, opts ListOptions) ([]*Sandbox, error) {
	f := managedFilter(opts.Labels...)
	if opts.Running {
		f.Add("status", "running")
	}
	cs, err := e.api.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, e.wrap("listing sandboxes", err)
	}
	out := make([]*Sandbox, 0, len(cs))
	for _, c := range cs {
		out = append(out, e.fromSummary(c))
	}
	return out, nil
}

func (e *Engine) fromSummary(c container.Summary) *Sandbox {
	name := ""
	if len(c.Names) > 0 {
		name = strings.TrimPrefix(c.Names[0], "/")
	}
	return &Sandbox{
		ID: c.ID, Name: name, Image: c.Image, Workspace: c.Labels[LabelWorkspace],
		User: c.Labels[LabelUser], State: string(c.State), Created: time.Unix(c.Created, 0),
		Labels: c.Labels, drv: e, shell: c.Labels[LabelShell],
	}
}

// Get finds one of this project's sandboxes by full id, unique id prefix or
// name. Containers without the project's labels are never matched.
func (e *Engine) Get(ctx context.Context, ref string) (*Sandbox, error) {
	if ref == "" {
		return nil, errors.New("no sandbox id given: list them with `agent sandbox ls`")
	}
	all, err := e.List(ctx, ListOptions{})
	if err != nil {
		return nil, err
	}
	var matches []*Sandbox
	for _, sb := range all {
		if sb.ID == ref || sb.Name == ref {
			return sb, nil
		}
		if strings.HasPrefix(sb.ID, ref) {
			matches = append(matches, sb)
		}
	}
	switch len(matches) {
	case 0:
		return nil, notFound(ref)
	case 1:
		return matches[0], nil
	}
	return nil, fmt.Errorf("sandbox id prefix %q is ambiguous (%d sandboxes match): give more characters", ref, len(matches))
}

// Remove kills and removes a sandbox container and its anonymous volumes.
// A container that is already gone is not an error.
func (e *Engine) Remove(ctx context.Context, id string) error {
	err := e.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		if e.useSignalFreeze() {
			forgetFreeze(id)
		}
		e.execs.forget(id)
		return nil
	}
	if cerrdefs.IsConflict(err) {
		// "removal already in progress": someone else is removing it.
		return nil
	}
	return e.wrap("removing sandbox "+shortID(id), err)
}

// Remove closes the sandbox's session and removes its container.
func (s *Sandbox) Remove(ctx context.Context) error {
	s.Close()
	return s.drv.Remove(ctx, s.ID)
}

// Close ends the toolbox session (the container keeps running). A closed
// Sandbox still answers Tool calls with one exec per call.
func (s *Sandbox) Close() {
	s.mu.Lock()
	sess := s.sess
	s.sess = nil
	s.closed = true
	s.mu.Unlock()
	if sess != nil {
		sess.close()
	}
}

// checkRunning turns "cannot exec" into a clear error about the container.
func (s *Sandbox) checkRunning(ctx context.Context) error {
	return s.drv.CheckRunning(ctx, s.ID)
}

// CheckRunning implements Driver: nil when container id can run commands.
func (e *Engine) CheckRunning(ctx context.Context, id string) error {
	ins, err := e.api.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("sandbox %s no longer exists (it was removed): create a new one: %w", shortID(id), ErrNotFound)
		}
		return e.wrap("inspecting sandbox "+shortID(id), err)
	}
	if ins.State != nil && ins.State.Running && ins.State.Paused {
		return fmt.Errorf("sandbox %s is paused (`docker pause`) and cannot answer: run `docker unpause %s`, then resume the task: %w", shortID(id), shortID(id), ErrNotRunning)
	}
	if ins.State == nil || !ins.State.Running || ins.State.Paused || ins.State.Restarting {
		st := ins.State
		if st == nil {
			return notRunning(id, "", 0, false)
		}
		return notRunning(id, string(st.Status), st.ExitCode, st.OOMKilled)
	}
	return e.refuseIfFrozen(id)
}
