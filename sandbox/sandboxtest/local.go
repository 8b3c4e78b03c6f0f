package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// Local is an in-process sandbox.Backend for unit tests of the code above
// sandbox (task lifecycle, sub-agents, review, gc). A "sandbox" is the real
// toolbox server (toolbox.Server) over the workspace directory, run in the
// test process: the same tools and protocol as in a container, with no
// engine, no container and NO ISOLATION. It is a test double only: it lives
// in this test-helper package, which no command imports, so users can never
// select it, and it runs nothing but toolbox calls (paths are relative
// to the workspace: an absolute /workspace/... path is refused) (the bash tool runs its
// command on the host, in the workspace: scripts given to it must be
// harmless).
//
// It keeps the contract of sandbox.Backend: sandboxes carry the labels
// Spec.SandboxLabels gives them, a removed one answers with errors wrapping
// sandbox.ErrNotFound and a frozen one with sandbox.ErrNotRunning.
type Local struct {
	// Missing are images ImagePresent reports as missing.
	Missing map[string]bool
	// FailCreate, when set, is returned by Create (an engine failure).
	FailCreate error

	mu    sync.Mutex
	boxes map[string]*localBox
	seq   int
	log   []string
}

type localBox struct {
	sb      *sandbox.Sandbox // the description (ID, Name, Labels...); never bound
	srv     *toolbox.Server
	frozen  bool
	removed bool
	streams []*localStream
}

// NewLocal returns an empty in-process backend.
func NewLocal() *Local { return &Local{boxes: map[string]*localBox{}} }

var (
	_ sandbox.Backend = (*Local)(nil)
	_ sandbox.Driver  = (*Local)(nil)
)

// Ops lists what was asked of the backend ("create ID", "remove ID",
// "freeze ID", "thaw ID", "exec ID"), in order.
func (l *Local) Ops() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}

func (l *Local) record(op, id string) { l.log = append(l.log, op+" "+id) }

// Create implements sandbox.Backend. The workspace must exist; the user is
// the caller's own unless the spec names one.
func (l *Local) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.FailCreate != nil {
		return nil, l.FailCreate
	}
	if spec.Image == "" {
		spec.Image = sandbox.DefaultImage
	}
	if err := l.ImagePresent(ctx, spec.Image); err != nil {
		return nil, err
	}
	fi, err := os.Stat(spec.Workspace)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("workspace %s is not a directory: %w", spec.Workspace, err)
	}
	user := sandbox.UserChoice{UID: os.Geteuid(), GID: os.Getegid()}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	id := fmt.Sprintf("%064x", l.seq)
	name := spec.Name
	if name == "" {
		name = "local-" + id[len(id)-8:]
	}
	b := &localBox{
		sb: &sandbox.Sandbox{
			ID: id, Name: name, Image: spec.Image, Workspace: spec.Workspace,
			User: user.String(), State: "running", Created: time.Now(),
			Labels: spec.SandboxLabels(user),
		},
		srv: &toolbox.Server{Root: spec.Workspace, Shell: spec.Shell},
	}
	l.boxes[id] = b
	l.record("create", id)
	return l.handle(b), nil
}

// handle is a fresh Sandbox for b, bound to l.
func (l *Local) handle(b *localBox) *sandbox.Sandbox {
	d := b.sb
	labels := map[string]string{}
	for k, v := range d.Labels {
		labels[k] = v
	}
	state := d.State
	if b.frozen {
		state = "paused"
	}
	return sandbox.Bind(&sandbox.Sandbox{
		ID: d.ID, Name: d.Name, Image: d.Image, Workspace: d.Workspace,
		User: d.User, State: state, Created: d.Created, Labels: labels,
	}, l)
}

// Get implements sandbox.Backend.
func (l *Local) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	all, err := l.List(ctx, sandbox.ListOptions{})
	if err != nil {
		return nil, err
	}
	var match []*sandbox.Sandbox
	for _, sb := range all {
		if sb.ID == ref || sb.Name == ref {
			return sb, nil
		}
		if ref != "" && strings.HasPrefix(sb.ID, ref) {
			match = append(match, sb)
		}
	}
	if len(match) == 1 {
		return match[0], nil
	}
	return nil, fmt.Errorf("no sandbox matches %q: %w", ref, sandbox.ErrNotFound)
}

// List implements sandbox.Backend: label filters are "key" or "key=value".
func (l *Local) List(ctx context.Context, opts sandbox.ListOptions) ([]*sandbox.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*sandbox.Sandbox
	for _, b := range l.boxes {
		if b.removed || (opts.Running && b.frozen) || !hasLabels(b.sb.Labels, opts.Labels) {
			continue
		}
		out = append(out, l.handle(b))
	}
	slices.SortFunc(out, func(a, b *sandbox.Sandbox) int { return strings.Compare(b.ID, a.ID) })
	return out, nil
}

func hasLabels(have map[string]string, want []string) bool {
	for _, w := range want {
		k, v, withValue := strings.Cut(w, "=")
		got, ok := have[k]
		if !ok || (withValue && got != v) {
			return false
		}
	}
	return true
}

// Remove implements sandbox.Backend and sandbox.Driver.
func (l *Local) Remove(_ context.Context, id string) error {
	l.mu.Lock()
	b := l.boxes[id]
	var streams []*localStream
	if b != nil && !b.removed {
		b.removed = true
		streams = b.streams
		b.streams = nil
		l.record("remove", id)
	}
	l.mu.Unlock()
	for _, s := range streams {
		_ = s.Close()
	}
	return nil
}

// ImagePresent implements sandbox.Backend.
func (l *Local) ImagePresent(_ context.Context, ref string) error {
	if l.Missing[ref] {
		return &sandbox.ImageMissingError{Image: ref}
	}
	return nil
}

// box returns a live, unfrozen sandbox or the classified error.
func (l *Local) box(id string) (*localBox, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.boxes[id]
	switch {
	case b == nil || b.removed:
		return nil, fmt.Errorf("sandbox %s no longer exists: %w", id, sandbox.ErrNotFound)
	case b.frozen:
		return nil, fmt.Errorf("sandbox %s is frozen: %w", id, sandbox.ErrNotRunning)
	}
	return b, nil
}

// CheckRunning implements sandbox.Driver.
func (l *Local) CheckRunning(_ context.Context, id string) error {
	_, err := l.box(id)
	return err
}

// Freeze implements sandbox.Driver.
func (l *Local) Freeze(_ context.Context, id string) error { return l.setFrozen(id, true) }

// Thaw implements sandbox.Driver.
func (l *Local) Thaw(_ context.Context, id string) error { return l.setFrozen(id, false) }

func (l *Local) setFrozen(id string, frozen bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.boxes[id]
	switch {
	case b == nil || b.removed:
		return nil // gone: no process of it can run (as Engine.Freeze)
	case frozen && b.frozen:
		// Engine.Freeze waits for another holder's freeze to end; in
		// process there is no other holder to wait for.
		return fmt.Errorf("sandbox %s is frozen by another holder: %w", id, sandbox.ErrNotRunning)
	case !frozen && !b.frozen:
		return nil // thawing one that is not frozen is not an error
	}
	b.frozen = frozen
	l.record(map[bool]string{true: "freeze", false: "thaw"}[frozen], id)
	return nil
}

// isToolbox reports whether cmd runs the toolbox in mode ("serve", "call").
func isToolbox(cmd []string, mode string) bool {
	return len(cmd) >= 2 && cmd[0] == sandbox.ToolboxPath && cmd[1] == mode
}

// Exec implements sandbox.Driver. Only `toolbox call` runs (the toolbox
// server answers it in process); any other command exits 127, since there
// is no container to run it in.
func (l *Local) Exec(ctx context.Context, id string, opts sandbox.ExecOptions) (int, error) {
	b, err := l.box(id)
	if err != nil {
		return -1, err
	}
	l.mu.Lock()
	l.record("exec", id)
	l.mu.Unlock()
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if !isToolbox(opts.Cmd, "call") {
		fmt.Fprintf(stderr, "in-process sandbox runs only the toolbox, not %q\n", opts.Cmd)
		return 127, nil
	}
	in := opts.Stdin
	if in == nil {
		in = bytes.NewReader(nil)
	}
	if err := b.srv.Call(ctx, in, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1, nil
	}
	return 0, nil
}

// OpenStream implements sandbox.Driver: `toolbox serve` as a goroutine
// serving the real protocol over pipes.
func (l *Local) OpenStream(_ context.Context, id, _ string, cmd []string, errOut io.Writer) (sandbox.Stream, error) {
	b, err := l.box(id)
	if err != nil {
		return nil, err
	}
	if !isToolbox(cmd, "serve") {
		return nil, fmt.Errorf("in-process sandbox runs only the toolbox, not %q", cmd)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	s := &localStream{in: inW, out: outR, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := b.srv.Serve(ctx, inR, outW)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) && errOut != nil {
			fmt.Fprintln(errOut, err)
		}
		outW.CloseWithError(io.EOF)
		inR.Close()
	}()
	l.mu.Lock()
	b.streams = append(b.streams, s)
	l.mu.Unlock()
	return s, nil
}

type localStream struct {
	in     *io.PipeWriter
	out    *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (s *localStream) Write(p []byte) (int, error) { return s.in.Write(p) }
func (s *localStream) Stdout() io.Reader           { return s.out }
func (s *localStream) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.in.CloseWithError(io.ErrClosedPipe)
		s.out.CloseWithError(io.ErrClosedPipe)
	})
	return nil
}
