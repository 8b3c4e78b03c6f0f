package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// Sandbox states, as sandbox.Sandbox.State reports them for containers.
const (
	stateCreated  = "created"
	stateRunning  = "running"
	stateExited   = "exited"
	stateRemoving = "removing"
	stateUnknown  = "unknown"
)

// status is what a pod says about its sandbox container.
type status struct {
	state        string
	exitCode     int32
	oom          bool
	imageMissing bool   // the kubelet will not pull the image (never does)
	failed       string // why the container cannot start, when it cannot
	waiting      string // why it has not started yet
}

func (s status) why() string {
	switch {
	case s.failed != "":
		return s.failed
	case s.state == stateExited && s.oom:
		return fmt.Sprintf("exited with code %d, out of memory", s.exitCode)
	case s.state == stateExited:
		return fmt.Sprintf("exited with code %d", s.exitCode)
	case s.waiting != "":
		return s.waiting
	}
	return s.state
}

// podState reads the state of a sandbox pod's container from its status.
func podState(p *corev1.Pod) status {
	if p.DeletionTimestamp != nil {
		return status{state: stateRemoving}
	}
	var st status
	for _, c := range p.Status.InitContainerStatuses {
		if w := c.State.Waiting; w != nil && failedReason(w.Reason) {
			st.failed = fmt.Sprintf("workspace delivery (%s): %s: %s", c.Name, w.Reason, w.Message)
		}
		if t := c.State.Terminated; t != nil && t.ExitCode != 0 {
			st.failed = fmt.Sprintf("workspace delivery (%s) exited with code %d: %s", c.Name, t.ExitCode, t.Message)
		}
	}
	var cs *corev1.ContainerStatus
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == ContainerName {
			cs = &p.Status.ContainerStatuses[i]
		}
	}
	switch p.Status.Phase {
	case corev1.PodPending:
		st.state = stateCreated
	case corev1.PodRunning:
		st.state = stateRunning
	case corev1.PodSucceeded, corev1.PodFailed:
		st.state = stateExited
	default:
		st.state = stateUnknown
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			st.waiting = "not scheduled: " + c.Message
		}
	}
	if cs == nil {
		if st.state == stateRunning {
			st.state = stateCreated
		}
		return st
	}
	switch {
	case cs.State.Running != nil:
		if st.state != stateExited {
			st.state = stateRunning
		}
	case cs.State.Terminated != nil:
		t := cs.State.Terminated
		st.state, st.exitCode, st.oom = stateExited, t.ExitCode, t.Reason == "OOMKilled"
	case cs.State.Waiting != nil:
		w := cs.State.Waiting
		if st.state == stateRunning {
			st.state = stateCreated
		}
		switch {
		case w.Reason == "ErrImageNeverPull" || w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff":
			st.imageMissing = true
		case failedReason(w.Reason):
			st.failed = w.Reason + ": " + w.Message
		default:
			st.waiting = strings.TrimSuffix(w.Reason+": "+w.Message, ": ")
		}
	}
	return st
}

// failedReason says whether a container's waiting reason means it will
// not start without a change to the pod.
func failedReason(reason string) bool {
	switch reason {
	case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
		"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff":
		return true
	}
	return false
}

func notFound(ref string) error {
	return fmt.Errorf("no sandbox matches %q: list them with `agent sandbox ls`: %w", ref, sandbox.ErrNotFound)
}

// wrap classifies an API error about pod id by its kind, never its text:
// a pod that is gone wraps sandbox.ErrNotFound.
func (b *Backend) wrap(id, what string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w", what, id, errors.Join(sandbox.ErrNotFound, err))
	}
	return fmt.Errorf("%s %s: %w", what, id, err)
}

// runningPod returns pod id when its sandbox container runs.
func (b *Backend) runningPod(ctx context.Context, id string) (*corev1.Pod, error) {
	p, err := b.pods().Get(ctx, id, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, b.wrap(id, "looking up sandbox pod", err)
	}
	if _, ok := p.Labels[sandbox.LabelManaged]; !ok {
		return nil, notFound(id)
	}
	if st := podState(p); st.state != stateRunning {
		return nil, fmt.Errorf("sandbox %s is not running (%s): remove it with `agent sandbox rm %s` and create a new one: %w", id, st.why(), id, sandbox.ErrNotRunning)
	}
	return p, nil
}

// CheckRunning implements sandbox.Driver from the pod's phase and its
// container's state.
func (b *Backend) CheckRunning(ctx context.Context, id string) error {
	_, err := b.runningPod(ctx, id)
	return err
}

// podUser is the uid:gid the pod's sandbox container runs as.
func podUser(p *corev1.Pod) (uid, gid int64, ok bool) {
	for _, c := range p.Spec.Containers {
		if c.Name == ContainerName && c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			uid = *c.SecurityContext.RunAsUser
			gid = uid
			if c.SecurityContext.RunAsGroup != nil {
				gid = *c.SecurityContext.RunAsGroup
			}
			return uid, gid, true
		}
	}
	return 0, 0, false
}

// checkExec refuses what pods/exec cannot do. Unlike the Docker engine's
// exec, it runs every command as the container's user, in its working
// directory, with its environment: there is no field for another user
// (so no root exec, ever), directory or variables.
func checkExec(p *corev1.Pod, user, dir string, env []string) error {
	if len(env) > 0 {
		return fmt.Errorf("exec in sandbox pod %s: pods/exec cannot set environment variables (%s): set them in the sandbox's environment instead", p.Name, strings.SplitN(env[0], "=", 2)[0])
	}
	if dir != "" && dir != toolbox.WorkspaceRoot {
		return fmt.Errorf("exec in sandbox pod %s: pods/exec runs in %s, not %s", p.Name, toolbox.WorkspaceRoot, dir)
	}
	if user == "" {
		return nil
	}
	uid, gid, ok := podUser(p)
	if !ok {
		return fmt.Errorf("exec in sandbox pod %s: the pod names no user", p.Name)
	}
	us, gs, hasGID := strings.Cut(user, ":")
	wantUID, err := strconv.ParseInt(us, 10, 64)
	wantGID := wantUID
	if err == nil && hasGID {
		wantGID, err = strconv.ParseInt(gs, 10, 64)
	}
	if err != nil || wantUID != uid || wantGID != gid {
		return fmt.Errorf("exec in sandbox pod %s: pods/exec runs every command as the pod's user %d:%d, not %s", p.Name, uid, gid, user)
	}
	return nil
}

// executor opens the pods/exec subresource of pod name for cmd: over
// WebSocket, falling back to SPDY on API servers that refuse the upgrade
// (as kubectl does).
func (b *Backend) executor(name string, cmd []string, stdin, tty bool) (remotecommand.Executor, error) {
	if b.opts.Config == nil {
		return nil, errors.New("kubernetes backend: no REST configuration, so no exec")
	}
	u, err := execURL(b.opts.Config, b.opts.Namespace, name, &corev1.PodExecOptions{
		Container: ContainerName,
		Command:   cmd,
		Stdin:     stdin,
		Stdout:    true,
		Stderr:    !tty,
		TTY:       tty,
	})
	if err != nil {
		return nil, fmt.Errorf("exec in sandbox pod %s: %w", name, err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(b.opts.Config, http.MethodGet, u.String())
	if err != nil {
		return nil, fmt.Errorf("exec in sandbox pod %s: %w", name, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.opts.Config, http.MethodPost, u)
	if err != nil {
		return nil, fmt.Errorf("exec in sandbox pod %s: %w", name, err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, shouldFallback)
}

// execURL is the address of the pods/exec subresource of pod name, built
// from the REST configuration alone (the URL the clientset's REST client
// would build), so that exec does not depend on how the Client was made.
func execURL(cfg *rest.Config, namespace, name string, o *corev1.PodExecOptions) (*url.URL, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	base, versioned, err := rest.DefaultServerUrlFor(c)
	if err != nil {
		return nil, err
	}
	params, err := scheme.ParameterCodec.EncodeParameters(o, corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	u := *base
	u.Path = path.Join("/", base.Path, versioned, "namespaces", namespace, "pods", name, "exec")
	u.RawQuery = params.Encode()
	return &u, nil
}

// shouldFallback says whether a WebSocket exec failed in a way that SPDY
// may not: the API server refused the upgrade, or a proxy could not carry
// it. The error types are k8s.io/streaming's, which client-go's WebSocket
// transport returns (apimachinery's httpstream has look-alike types that
// would never match).
func shouldFallback(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// exitCode reads a command's exit code from the stream's end: nil is 0,
// an exec.ExitError carries the code, anything else is a failure of the
// exec itself.
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus(), nil
	}
	return -1, err
}

// Exec implements sandbox.Driver through pods/exec. A non-zero exit is
// not an error.
func (b *Backend) Exec(ctx context.Context, id string, opts sandbox.ExecOptions) (int, error) {
	if len(opts.Cmd) == 0 {
		return -1, errors.New("exec: no command given")
	}
	p, err := b.runningPod(ctx, id)
	if err != nil {
		return -1, err
	}
	if err := checkExec(p, opts.User, opts.WorkingDir, opts.Env); err != nil {
		return -1, err
	}
	ex, err := b.executor(id, opts.Cmd, opts.Stdin != nil, opts.TTY)
	if err != nil {
		return -1, err
	}
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	so := remotecommand.StreamOptions{Stdin: opts.Stdin, Stdout: stdout, Tty: opts.TTY}
	if !opts.TTY {
		so.Stderr = stderr
	}
	if opts.TTY {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		so.TerminalSizeQueue = &sizes{ctx: rctx, first: opts.ConsoleSize, ch: opts.Resize}
	}
	code, err := exitCode(ex.StreamWithContext(ctx, so))
	if err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, b.wrap(id, "exec in sandbox pod", err)
	}
	return code, nil
}

// sizes feeds terminal sizes to an exec: the initial one, then every
// size from ch until ctx ends.
type sizes struct {
	ctx   context.Context
	first *[2]uint
	ch    <-chan [2]uint
}

func (s *sizes) Next() *remotecommand.TerminalSize {
	if f := s.first; f != nil {
		s.first = nil
		return &remotecommand.TerminalSize{Height: uint16(f[0]), Width: uint16(f[1])}
	}
	if s.ch == nil {
		<-s.ctx.Done()
		return nil
	}
	select {
	case <-s.ctx.Done():
		return nil
	case sz := <-s.ch:
		return &remotecommand.TerminalSize{Height: uint16(sz[0]), Width: uint16(sz[1])}
	}
}

// OpenStream implements sandbox.Driver: one pods/exec with stdin held
// open, which carries the toolbox session (`agent-toolbox serve`) as the
// Docker engine's long-lived exec does. The stream outlives ctx, which
// bounds only the opening; Close ends it.
func (b *Backend) OpenStream(ctx context.Context, id, user string, cmd []string, errOut io.Writer) (sandbox.Stream, error) {
	p, err := b.runningPod(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := checkExec(p, user, "", nil); err != nil {
		return nil, err
	}
	ex, err := b.executor(id, cmd, true, false)
	if err != nil {
		return nil, err
	}
	if errOut == nil {
		errOut = io.Discard
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &stream{in: inW, out: outR, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: errOut})
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	return s, nil
}

// stream is a running pods/exec: writes go to its stdin, its stdout is
// read from out.
type stream struct {
	in     *io.PipeWriter
	out    *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (s *stream) Write(p []byte) (int, error) { return s.in.Write(p) }
func (s *stream) Stdout() io.Reader           { return s.out }

// Close ends the exec and unblocks a pending Read.
func (s *stream) Close() error {
	s.once.Do(func() {
		s.cancel()
		_ = s.in.Close()
		_ = s.out.Close()
	})
	<-s.done
	return nil
}
