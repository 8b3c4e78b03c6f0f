package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// Options configure a Backend.
type Options struct {
	// Client talks to the cluster. Required.
	Client clientset.Interface
	// Config is the REST configuration Client was made from; exec (the
	// pods/exec subresource) needs it. Without it Exec and OpenStream
	// fail.
	Config *rest.Config
	// Namespace holds every sandbox pod. Required.
	Namespace string
	// ToolboxImage holds the static agent-toolbox at /agent-toolbox; it is
	// mounted read-only into every pod (an image volume), never pulled.
	// Required.
	ToolboxImage string
	// RuntimeClasses maps Spec.Runtime to a RuntimeClass ("runsc" ->
	// "gvisor", "kata" -> "kata"); the entry for "" is the class of a Spec
	// that names no runtime. A runtime with no entry is refused.
	RuntimeClasses map[string]string
	// SeccompLocalhost is the node-local seccomp profile holding the
	// project's profile (StrictSeccompJSON), relative to the kubelet's
	// seccomp directory. Without it only Spec.EngineSeccomp sandboxes can
	// be created (the runtime's default profile).
	SeccompLocalhost string
	// Delivery puts a task's files into its pod. Required by Create.
	Delivery Delivery
	// StartTimeout bounds how long Create waits for a pod to run; zero
	// means two minutes.
	StartTimeout time.Duration
	// PollInterval is how often Create and Remove look at a pod while
	// they wait; zero means 250ms.
	PollInterval time.Duration
}

// Backend runs sandboxes as pods of one namespace: it implements
// sandbox.Backend for the orchestrator and sandbox.Driver for the
// sandboxes it returns.
type Backend struct {
	opts Options
}

var (
	_ sandbox.Backend = (*Backend)(nil)
	_ sandbox.Driver  = (*Backend)(nil)
)

// New checks opts and returns a Backend. It does not contact the cluster.
func New(opts Options) (*Backend, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("kubernetes backend: no client")
	case opts.Namespace == "":
		return nil, errors.New("kubernetes backend: no namespace")
	case opts.ToolboxImage == "":
		return nil, errors.New("kubernetes backend: no toolbox image (an image holding /" + ToolboxImageFile + ")")
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	return &Backend{opts: opts}, nil
}

func (b *Backend) pods() podClient { return b.opts.Client.CoreV1().Pods(b.opts.Namespace) }

type podClient interface {
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// runtimeClass maps Spec.Runtime to the pod's RuntimeClass.
func (b *Backend) runtimeClass(runtime string) (string, error) {
	rc, ok := b.opts.RuntimeClasses[runtime]
	if !ok && runtime != "" {
		known := make([]string, 0, len(b.opts.RuntimeClasses))
		for k := range b.opts.RuntimeClasses {
			if k != "" {
				known = append(known, k)
			}
		}
		sort.Strings(known)
		return "", fmt.Errorf("runtime %q has no RuntimeClass in the Kubernetes backend (it knows %s)", runtime, strings.Join(known, ", "))
	}
	return rc, nil
}

// Create implements sandbox.Backend: it builds the hardened pod (Pod),
// makes sure the namespace's deny-all NetworkPolicy exists, creates the
// pod and waits until its container runs. On any failure it deletes the
// pod.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	s, err := defaults(spec)
	if err != nil {
		return nil, err
	}
	if b.opts.Delivery == nil {
		return nil, errors.New("kubernetes backend: no workspace delivery configured: a pod cannot see the host worktree")
	}
	uid, gid := callerIDs()
	user, err := chooseUser(s, uid, gid)
	if err != nil {
		return nil, err
	}
	// The isolation names the runtime too (runsc: gVisor's RuntimeClass).
	rc, err := b.runtimeClass(s.RuntimeName())
	if err != nil {
		return nil, err
	}
	ws, err := b.opts.Delivery.Workspace(s, user)
	if err != nil {
		return nil, fmt.Errorf("delivering workspace %s: %w", s.Workspace, err)
	}
	name := s.Name
	if name == "" {
		name = randomName()
	}
	pod, err := Pod(s, PodConfig{
		Namespace: b.opts.Namespace, Name: name, User: user, RuntimeClass: rc,
		ToolboxImage: b.opts.ToolboxImage, SeccompLocalhost: b.opts.SeccompLocalhost, Workspace: ws,
	})
	if err != nil {
		return nil, err
	}
	if err := b.ensureNetworkPolicy(ctx); err != nil {
		return nil, err
	}
	created, err := b.pods().Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("a pod named %s already exists in namespace %s: choose another sandbox name", name, b.opts.Namespace)
		}
		if ctx.Err() != nil {
			// The API server may have made the pod after the client
			// stopped waiting; its name is the only handle on it.
			b.cleanup(ctx, name)
		}
		return nil, fmt.Errorf("creating sandbox pod: %w", err)
	}
	running, err := b.waitRunning(ctx, created.Name, s.Image)
	if err != nil {
		b.cleanup(ctx, created.Name)
		return nil, err
	}
	notice := ""
	if s.History != "" && !mountsAt(ws, toolbox.HistoryPath) {
		notice = "the task's history was not delivered to the pod: the git tools report none"
	}
	sb := b.toSandbox(running)
	sb.Notice = notice
	return sb, nil
}

// cleanup removes a half-created pod even when ctx is cancelled.
func (b *Backend) cleanup(ctx context.Context, name string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = b.Remove(cctx, name)
}

// ensureNetworkPolicy creates the namespace's DenyAllPolicy unless it
// exists. A cluster whose network plugin ignores NetworkPolicy accepts it
// and enforces nothing: that is the operator's to check (see
// docs/kubernetes-backend.md).
func (b *Backend) ensureNetworkPolicy(ctx context.Context) error {
	_, err := b.opts.Client.NetworkingV1().NetworkPolicies(b.opts.Namespace).Create(ctx, DenyAllPolicy(b.opts.Namespace), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the sandboxes' deny-all NetworkPolicy: %w", err)
	}
	return nil
}

// waitRunning polls pod name until its sandbox container runs, and turns
// the kubelet's reasons for not starting it into errors.
func (b *Backend) waitRunning(ctx context.Context, name, image string) (*corev1.Pod, error) {
	deadline := time.Now().Add(b.opts.StartTimeout)
	for {
		p, err := b.pods().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, b.wrap(name, "waiting for sandbox pod", err)
		}
		st := podState(p)
		switch {
		case st.state == stateRunning:
			return p, nil
		case st.imageMissing:
			return nil, &sandbox.ImageMissingError{Image: image}
		case st.state == stateExited || st.failed != "":
			return nil, fmt.Errorf("sandbox pod %s did not start: %s", name, st.why())
		case time.Now().After(deadline):
			return nil, fmt.Errorf("sandbox pod %s did not start within %s (%s)", name, b.opts.StartTimeout, st.why())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(b.opts.PollInterval):
		}
	}
}

// List implements sandbox.Backend: the namespace's sandbox pods whose
// labels match opts, newest first.
func (b *Backend) List(ctx context.Context, opts sandbox.ListOptions) ([]*sandbox.Sandbox, error) {
	pods, err := b.listPods(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make([]*sandbox.Sandbox, 0, len(pods))
	for i := range pods {
		out = append(out, b.toSandbox(&pods[i]))
	}
	return out, nil
}

// listPods lists the sandbox pods matching opts, newest first. The label
// selector compares encoded values (LabelValue); the exact values are
// compared afterwards.
func (b *Backend) listPods(ctx context.Context, opts sandbox.ListOptions) ([]corev1.Pod, error) {
	sel, exact, err := selector(opts.Labels)
	if err != nil {
		return nil, err
	}
	list, err := b.pods().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing sandbox pods: %w", err)
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
		return !exact(sandboxLabels(&p)) || (opts.Running && podState(&p).state != stateRunning)
	})
	sort.SliceStable(pods, func(i, j int) bool {
		ti, tj := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return pods[i].Name < pods[j].Name
	})
	return pods, nil
}

// selector turns ListOptions.Labels ("key" or "key=value") into a label
// selector on the project's sandboxes, and the exact test the decoded
// labels of each pod must pass.
func selector(filters []string) (labels.Selector, func(map[string]string) bool, error) {
	sel := labels.NewSelector()
	type want struct {
		key, value string
		has        bool
	}
	wants := []want{
		{sandbox.LabelManaged, sandbox.ManagedValue, true},
		{sandbox.LabelKind, sandbox.KindSandbox, true},
	}
	for _, f := range filters {
		k, v, has := strings.Cut(f, "=")
		wants = append(wants, want{k, v, has})
	}
	for _, w := range wants {
		var r *labels.Requirement
		var err error
		if w.has {
			r, err = labels.NewRequirement(w.key, selection.Equals, []string{LabelValue(w.value)})
		} else {
			r, err = labels.NewRequirement(w.key, selection.Exists, nil)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("label filter %q: %w", w.key, err)
		}
		sel = sel.Add(*r)
	}
	exact := func(l map[string]string) bool {
		for _, w := range wants {
			v, ok := l[w.key]
			if !ok || (w.has && v != w.value) {
				return false
			}
		}
		return true
	}
	return sel, exact, nil
}

// Get implements sandbox.Backend: a sandbox pod by name, or by a prefix of
// its name or UID that only it has.
func (b *Backend) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	if ref == "" {
		return nil, errors.New("no sandbox id given: list them with `agent sandbox ls`")
	}
	pods, err := b.listPods(ctx, sandbox.ListOptions{})
	if err != nil {
		return nil, err
	}
	var matches []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Name == ref {
			return b.toSandbox(p), nil
		}
		if strings.HasPrefix(p.Name, ref) || strings.HasPrefix(string(p.UID), ref) {
			matches = append(matches, p)
		}
	}
	switch len(matches) {
	case 0:
		return nil, notFound(ref)
	case 1:
		return b.toSandbox(matches[0]), nil
	default:
		return nil, fmt.Errorf("%q matches %d sandboxes: give more of the id", ref, len(matches))
	}
}

// Remove implements sandbox.Backend and sandbox.Driver: it deletes the pod
// at once (no grace period) and waits until it is gone; one already gone
// is not an error.
func (b *Backend) Remove(ctx context.Context, id string) error {
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	err := b.pods().Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &bg})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing sandbox pod %s: %w", id, err)
	}
	deadline := time.Now().Add(b.opts.StartTimeout)
	for {
		_, err := b.pods().Get(ctx, id, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("removing sandbox pod %s: %w", id, err)
		case time.Now().After(deadline):
			return fmt.Errorf("sandbox pod %s is still terminating after %s", id, b.opts.StartTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b.opts.PollInterval):
		}
	}
}

// ImagePresent implements sandbox.Backend from what the nodes report
// (node.status.images): an image no node lists is missing. Nodes list at
// most the kubelet's nodeStatusMaxImages (50 by default) images, so on a
// node with more the check can miss one; and a client without the right
// to list nodes learns nothing here. Either way the pod's own
// ErrImageNeverPull is the final word, and Create maps it to
// *sandbox.ImageMissingError too.
func (b *Backend) ImagePresent(ctx context.Context, ref string) error {
	nodes, err := b.opts.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing nodes for image %s: %w", ref, err)
	}
	want := normalizeImage(ref)
	for _, n := range nodes.Items {
		for _, img := range n.Status.Images {
			if slices.ContainsFunc(img.Names, func(name string) bool { return normalizeImage(name) == want }) {
				return nil
			}
		}
	}
	return &sandbox.ImageMissingError{Image: ref}
}

// normalizeImage writes an image reference the way nodes report it:
// "agent/sandbox" is "docker.io/agent/sandbox:latest".
func normalizeImage(ref string) string {
	name, digest, hasDigest := strings.Cut(ref, "@")
	first, _, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		name = "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + name
	}
	if hasDigest {
		return name + "@" + digest
	}
	if i := strings.LastIndex(name, ":"); i < 0 || strings.Contains(name[i:], "/") {
		name += ":latest"
	}
	return name
}

// Freeze implements sandbox.Backend and sandbox.Driver. The pod API has
// no pause: the cgroup freezer behind `docker pause` belongs to the
// kubelet and the runtime, and no API call reaches it. A freeze from
// inside the pod, by signals over exec (SIGSTOP to every process of the
// sandbox's uid, then a wait until /proc shows each one stopped), is not
// a freeze the host may trust: a process that is still running when the
// signals go out can SIGCONT one already stopped, and a process started
// as another uid is out of reach. The host steps that need a freeze
// (invariant 9) therefore fail closed on this backend: a pod whose
// processes run or may still start (pending, running, terminating)
// answers an error wrapping sandbox.ErrCannotFreeze; one that is gone, or
// whose container has exited for good (restartPolicy Never), has no
// process that could run, and is frozen already. With the mirror delivery
// (see Delivery) the host never works on files a pod can write, so no
// freeze is needed at all.
func (b *Backend) Freeze(ctx context.Context, id string) error {
	p, err := b.pods().Get(ctx, id, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return b.wrap(id, "freezing sandbox pod", err)
	case podState(p).state == stateExited:
		return nil
	}
	return fmt.Errorf("sandbox pod %s (%s): a pod cannot be paused: %w", id, podState(p).why(), sandbox.ErrCannotFreeze)
}

// Thaw implements sandbox.Backend and sandbox.Driver: this backend never
// freezes a pod (see Freeze), so there is nothing to thaw.
func (b *Backend) Thaw(context.Context, string) error { return nil }

// toSandbox describes a pod as a sandbox bound to this backend. The id
// is the pod's name: the API addresses pods by it.
func (b *Backend) toSandbox(p *corev1.Pod) *sandbox.Sandbox {
	l := sandboxLabels(p)
	image := ""
	for _, c := range p.Spec.Containers {
		if c.Name == ContainerName {
			image = c.Image
		}
	}
	sb := &sandbox.Sandbox{
		ID: p.Name, Name: p.Name, Image: image,
		Workspace: l[sandbox.LabelWorkspace], User: l[sandbox.LabelUser],
		State: podState(p).state, Created: p.CreationTimestamp.Time, Labels: l,
	}
	return sandbox.Bind(sb, b)
}

func mountsAt(ws WorkspaceMount, target string) bool {
	for _, m := range ws.Mounts {
		if m.MountPath == target {
			return true
		}
	}
	return false
}
