package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/localagent/agent/sandbox"
)

// kubelet stands in for the node: every pod created gets a UID, a
// creation time a second after the previous one, and the state start
// gives its sandbox container.
type kubelet struct {
	n     atomic.Int64
	start func(*corev1.Pod)
}

func (k *kubelet) react(a k8stesting.Action) (bool, runtime.Object, error) {
	p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
	n := k.n.Add(1)
	p.UID = types.UID(fmt.Sprintf("%08d-uid", n))
	p.CreationTimestamp = metav1.NewTime(time.Unix(1_700_000_000+n, 0))
	if k.start != nil {
		k.start(p)
	}
	return false, nil, nil // the tracker stores the pod
}

func running(p *corev1.Pod) {
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

func newBackend(t *testing.T, start func(*corev1.Pod), objs ...runtime.Object) (*Backend, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	k := &kubelet{start: start}
	cs.PrependReactor("create", "pods", k.react)
	b, err := New(Options{
		Client: cs, Namespace: "agents", ToolboxImage: "agent/toolbox:1",
		RuntimeClasses:   map[string]string{"": "gvisor", "runsc": "gvisor", "kata": "kata"},
		SeccompLocalhost: "agent/strict.json", Delivery: PVC{Claim: claim},
		StartTimeout: 2 * time.Second, PollInterval: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, cs
}

func TestCreateListGetRemove(t *testing.T) {
	ctx := context.Background()
	b, cs := newBackend(t, running)
	spec := baseSpec(t)
	spec.User = "1000:1000"
	spec.Runtime = "kata"
	sb, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := defaults(spec)
	if sb.State != "running" || sb.Workspace != s.Workspace || sb.User != "1000:1000" || sb.Labels[sandbox.LabelTask] != "t-1" {
		t.Errorf("created %+v", sb)
	}
	pod, err := cs.CoreV1().Pods("agents").Get(ctx, sb.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *pod.Spec.RuntimeClassName != "kata" {
		t.Errorf("runtime class %s, want kata", *pod.Spec.RuntimeClassName)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("agents").Get(ctx, NetworkPolicyName, metav1.GetOptions{}); err != nil {
		t.Errorf("no deny-all NetworkPolicy: %v", err)
	}

	// A second sandbox over another workspace, created later.
	other := baseSpec(t)
	other.User = "1000:1000"
	sb2, err := b.Create(ctx, other)
	if err != nil {
		t.Fatal(err)
	}

	all, err := b.List(ctx, sandbox.ListOptions{})
	if err != nil || len(all) != 2 || all[0].ID != sb2.ID {
		t.Fatalf("List = %v, %v; want both, newest first", ids(all), err)
	}
	// The orchestrator finds the sandboxes over one worktree by its path,
	// a value no label can hold as it is.
	got, err := b.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelWorkspace + "=" + s.Workspace}, Running: true})
	if err != nil || len(got) != 1 || got[0].ID != sb.ID {
		t.Errorf("List by workspace = %v, %v; want %s", ids(got), err, sb.ID)
	}
	got, _ = b.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelState + "=s-1", sandbox.LabelTask}})
	if len(got) != 2 {
		t.Errorf("List by state and task key = %v", ids(got))
	}
	if got, _ := b.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelTask + "=t-2"}}); len(got) != 0 {
		t.Errorf("List by another task = %v", ids(got))
	}

	if g, err := b.Get(ctx, sb.ID); err != nil || g.ID != sb.ID {
		t.Errorf("Get(name) = %v, %v", g, err)
	}
	if g, err := b.Get(ctx, string(pod.UID)[:8]); err != nil || g.ID != sb.ID {
		t.Errorf("Get(uid prefix) = %v, %v", g, err)
	}
	if _, err := b.Get(ctx, "agent-sandbox-"); err == nil {
		t.Error("an ambiguous prefix matched")
	}
	if _, err := b.Get(ctx, "nope"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
	}

	if err := b.CheckRunning(ctx, sb.ID); err != nil {
		t.Errorf("CheckRunning = %v", err)
	}
	if err := b.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, sb.ID); err != nil {
		t.Errorf("removing a removed sandbox: %v", err)
	}
	if err := b.CheckRunning(ctx, sb.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("CheckRunning after Remove = %v, want ErrNotFound", err)
	}
	if got, _ := b.List(ctx, sandbox.ListOptions{}); len(got) != 1 {
		t.Errorf("after Remove: %v", ids(got))
	}
}

func TestListComparesExactValues(t *testing.T) {
	ctx := context.Background()
	// A pod whose workspace label is the hash of /a but whose exact labels
	// say /b (as a hash collision would look): a filter on /a must not
	// match it.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "agent-sandbox-x", Namespace: "agents",
		Labels: map[string]string{
			sandbox.LabelManaged: sandbox.ManagedValue, sandbox.LabelKind: sandbox.KindSandbox,
			sandbox.LabelWorkspace: LabelValue("/a"),
		},
		Annotations: map[string]string{LabelsAnnotation: fmt.Sprintf(`{%q:"true",%q:"sandbox",%q:"/b"}`, sandbox.LabelManaged, sandbox.LabelKind, sandbox.LabelWorkspace)},
	}}
	b, cs := newBackend(t, running, pod)
	if got, _ := b.List(ctx, sandbox.ListOptions{Labels: []string{sandbox.LabelWorkspace + "=/a"}}); len(got) != 0 {
		t.Errorf("a pod whose exact workspace is /b matched /a: %v", ids(got))
	}
	// Control: the label selector alone matches it; the exact comparison
	// is what leaves it out.
	sel, _, err := selector([]string{sandbox.LabelWorkspace + "=/a"})
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := cs.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{LabelSelector: sel.String()}); len(l.Items) != 1 {
		t.Errorf("the selector does not match the pod: %d pods", len(l.Items))
	}
}

func TestCreateImageMissingRemovesThePod(t *testing.T) {
	ctx := context.Background()
	b, cs := newBackend(t, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present with pull policy of Never"},
		}}}
	})
	spec := baseSpec(t)
	spec.Image = "agent/missing:1"
	_, err := b.Create(ctx, spec)
	var ime *sandbox.ImageMissingError
	if !errors.As(err, &ime) || ime.Image != "agent/missing:1" {
		t.Fatalf("Create = %v, want *ImageMissingError", err)
	}
	if l, _ := cs.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("%d pods left after a failed create", len(l.Items))
	}
}

func TestCreateTimesOutAndRemovesThePod(t *testing.T) {
	ctx := context.Background()
	b, cs := newBackend(t, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes have the runtime class"}}
	})
	b.opts.StartTimeout = 50 * time.Millisecond
	if _, err := b.Create(ctx, baseSpec(t)); err == nil {
		t.Fatal("a pod that never ran was returned")
	}
	if l, _ := cs.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("%d pods left after a failed create", len(l.Items))
	}
}

// Isolation runsc picks gVisor's RuntimeClass through the "runsc" entry.
func TestCreateIsolationRunsc(t *testing.T) {
	ctx := context.Background()
	b, cs := newBackend(t, running)
	b.opts.RuntimeClasses = map[string]string{"": "", "runsc": "gvisor"}
	spec := baseSpec(t)
	spec.Isolation = sandbox.IsolationRunsc
	sb, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods("agents").Get(ctx, sb.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc := pod.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("runtime class %v, want gvisor", rc)
	}
	// Control: runc isolation takes the default entry, no RuntimeClass.
	sb, err = b.Create(ctx, baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	pod, _ = cs.CoreV1().Pods("agents").Get(ctx, sb.ID, metav1.GetOptions{})
	if rc := pod.Spec.RuntimeClassName; rc != nil && *rc != "" {
		t.Errorf("runc isolation got runtime class %q", *rc)
	}
}

func TestCreateRefusals(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, running)
	spec := baseSpec(t)
	spec.Runtime = "runc-unknown"
	if _, err := b.Create(ctx, spec); err == nil {
		t.Error("an unknown runtime was accepted")
	}
	b.opts.Delivery = nil
	if _, err := b.Create(ctx, baseSpec(t)); err == nil {
		t.Error("a pod without workspace delivery was created")
	}
}

func TestCheckRunningAndFreeze(t *testing.T) {
	ctx := context.Background()
	oom := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"},
		}}}
	}
	b, cs := newBackend(t, running)
	sb, err := b.Create(ctx, baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	// A running pod cannot be frozen, and says so in the sandbox
	// package's terms.
	if err := b.Freeze(ctx, sb.ID); !errors.Is(err, sandbox.ErrCannotFreeze) {
		t.Errorf("Freeze(running) = %v, want ErrCannotFreeze", err)
	}
	if err := b.Thaw(ctx, sb.ID); err != nil {
		t.Errorf("Thaw = %v", err)
	}

	pod, _ := cs.CoreV1().Pods("agents").Get(ctx, sb.ID, metav1.GetOptions{})
	oom(pod)
	if _, err := cs.CoreV1().Pods("agents").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = b.CheckRunning(ctx, sb.ID)
	if !errors.Is(err, sandbox.ErrNotRunning) {
		t.Fatalf("CheckRunning(OOM-killed) = %v, want ErrNotRunning", err)
	}
	t.Log(err)
	// A stopped pod has no process that could run: frozen already.
	if err := b.Freeze(ctx, sb.ID); err != nil {
		t.Errorf("Freeze(stopped) = %v", err)
	}
	if got, _ := b.List(ctx, sandbox.ListOptions{Running: true}); len(got) != 0 {
		t.Errorf("a stopped pod listed as running: %v", ids(got))
	}
	_ = b.Remove(ctx, sb.ID)
	if err := b.Freeze(ctx, sb.ID); err != nil {
		t.Errorf("Freeze(gone) = %v", err)
	}
}

// A pending pod is not frozen: its container may start at any moment
// (its workspace delivery may be running already).
func TestFreezeRefusesAPendingPod(t *testing.T) {
	ctx := context.Background()
	b, cs := newBackend(t, running)
	sb, err := b.Create(ctx, baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := cs.CoreV1().Pods("agents").Get(ctx, sb.ID, metav1.GetOptions{})
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	if _, err := cs.CoreV1().Pods("agents").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Freeze(ctx, sb.ID); !errors.Is(err, sandbox.ErrCannotFreeze) {
		t.Errorf("Freeze(pending) = %v, want ErrCannotFreeze", err)
	}
}

func TestExecRefusesWhatPodsExecCannotDo(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, running)
	spec := baseSpec(t)
	spec.User = "1000:1000"
	sb, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]sandbox.ExecOptions{
		"root":        {Cmd: []string{"id"}, User: "0"},
		"other user":  {Cmd: []string{"id"}, User: "1000:0"},
		"environment": {Cmd: []string{"env"}, Env: []string{"A=1"}},
		"directory":   {Cmd: []string{"pwd"}, WorkingDir: "/tmp"},
	} {
		if _, err := b.Exec(ctx, sb.ID, opts); err == nil {
			t.Errorf("%s: exec accepted", name)
		}
	}
	// What pods/exec can do gets as far as the missing REST config.
	if _, err := b.Exec(ctx, sb.ID, sandbox.ExecOptions{Cmd: []string{"id"}, User: "1000:1000", WorkingDir: "/workspace"}); err == nil || errors.Is(err, sandbox.ErrNotRunning) {
		t.Errorf("exec without a REST config = %v", err)
	}
	if _, err := b.OpenStream(ctx, sb.ID, "0", []string{sandbox.ToolboxPath, "serve"}, nil); err == nil {
		t.Error("a root toolbox session was opened")
	}
	if _, err := b.Exec(ctx, "gone", sandbox.ExecOptions{Cmd: []string{"id"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("exec in a missing pod = %v, want ErrNotFound", err)
	}
}

func TestImagePresent(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Images: []corev1.ContainerImage{
		{Names: []string{"docker.io/agent/sandbox@sha256:00", "docker.io/agent/sandbox:latest"}},
	}}}
	b, _ := newBackend(t, running, node)
	if err := b.ImagePresent(ctx, "agent/sandbox:latest"); err != nil {
		t.Errorf("present image: %v", err)
	}
	var ime *sandbox.ImageMissingError
	if err := b.ImagePresent(ctx, "agent/other:latest"); !errors.As(err, &ime) {
		t.Errorf("missing image: %v", err)
	}
}

func ids(sbs []*sandbox.Sandbox) []string {
	out := make([]string, 0, len(sbs))
	for _, s := range sbs {
		out = append(out, s.ID)
	}
	return out
}

// A create the client gave up on (its context ended mid-request) may still
// have made the pod: Create removes it by name. Control: without the
// cancellation the same reactor leaves a running sandbox.
func TestCreateAbandonedRemovesThePod(t *testing.T) {
	for _, abandon := range []bool{true, false} {
		b, cs := newBackend(t, running)
		ctx, cancel := context.WithCancel(context.Background())
		cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
			running(p)
			if err := cs.Tracker().Create(corev1.SchemeGroupVersion.WithResource("pods"), p, "agents"); err != nil {
				return true, nil, err
			}
			if abandon {
				cancel()
				return true, nil, context.Canceled
			}
			return true, p, nil
		})
		_, err := b.Create(ctx, baseSpec(t))
		cancel()
		l, _ := cs.CoreV1().Pods("agents").List(context.Background(), metav1.ListOptions{})
		switch {
		case abandon && (err == nil || len(l.Items) != 0):
			t.Errorf("abandoned create: err %v, %d pods left", err, len(l.Items))
		case !abandon && (err != nil || len(l.Items) != 1):
			t.Errorf("control: err %v, %d pods", err, len(l.Items))
		}
	}
}
