package kubernetes

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

func claim(spec sandbox.Spec) (string, string, error) { return "ws-claim", "task-1", nil }

// testPod builds the pod of spec the way Create does, with the project's
// seccomp profile installed as "agent/strict.json".
func testPod(t *testing.T, spec sandbox.Spec, user sandbox.UserChoice) (*corev1.Pod, error) {
	t.Helper()
	s, err := defaults(spec)
	if err != nil {
		return nil, err
	}
	ws, err := PVC{Claim: claim}.Workspace(s, user)
	if err != nil {
		t.Fatal(err)
	}
	return Pod(s, PodConfig{
		Namespace: "agents", Name: "agent-sandbox-1", User: user, RuntimeClass: "gvisor",
		ToolboxImage: "agent/toolbox:1", SeccompLocalhost: "agent/strict.json", Workspace: ws,
	})
}

func baseSpec(t *testing.T) sandbox.Spec {
	return sandbox.Spec{Workspace: t.TempDir(), Task: "t-1", StateID: "s-1", Env: []string{"GOFLAGS=-mod=mod"}}
}

func TestPodIsHardened(t *testing.T) {
	pod, err := testPod(t, baseSpec(t), sandbox.UserChoice{UID: 1000, GID: 1001})
	if err != nil {
		t.Fatal(err)
	}
	ps := pod.Spec
	if ps.RuntimeClassName == nil || *ps.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName = %v, want gvisor", ps.RuntimeClassName)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		t.Error("service links are on")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC || ps.ShareProcessNamespace == nil || *ps.ShareProcessNamespace {
		t.Error("the pod shares a namespace")
	}
	if ps.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy = %s", ps.RestartPolicy)
	}
	psc := ps.SecurityContext
	if psc == nil || !isTrue(psc.RunAsNonRoot) || deref(psc.RunAsUser) != 1000 || deref(psc.RunAsGroup) != 1001 || deref(psc.FSGroup) != 1001 {
		t.Errorf("pod securityContext = %+v", psc)
	}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path", v.Name)
		}
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("%d containers", len(ps.Containers))
	}
	c := ps.Containers[0]
	if c.ImagePullPolicy != corev1.PullNever || c.Image != sandbox.DefaultImage {
		t.Errorf("image %s, pull policy %s", c.Image, c.ImagePullPolicy)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("capabilities = %+v, want drop ALL and nothing added", sc.Capabilities)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation allowed (no_new_privs off)")
	case sc.Privileged == nil || *sc.Privileged:
		t.Error("privileged")
	case !isTrue(sc.ReadOnlyRootFilesystem):
		t.Error("root filesystem writable")
	case !isTrue(sc.RunAsNonRoot) || deref(sc.RunAsUser) != 1000 || deref(sc.RunAsGroup) != 1001:
		t.Errorf("runs as %v:%v", sc.RunAsUser, sc.RunAsGroup)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || sc.SeccompProfile.LocalhostProfile == nil || *sc.SeccompProfile.LocalhostProfile != "agent/strict.json":
		t.Errorf("seccomp = %+v, want the project's profile", sc.SeccompProfile)
	}
	if got := strings.Join(append(c.Command, c.Args...), " "); got != sandbox.ToolboxPath+" idle" {
		t.Errorf("command = %q", got)
	}
	if c.WorkingDir != toolbox.WorkspaceRoot {
		t.Errorf("workingDir = %s", c.WorkingDir)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["HOME"] != sandbox.HomeDir || env["GOFLAGS"] != "-mod=mod" {
		t.Errorf("env = %v", env)
	}

	// Limits: the defaults of policy, requests equal to limits.
	d := policy.DefaultLimits()
	lim := c.Resources.Limits
	if lim.Memory().Value() != d.MemoryBytes || lim.Cpu().MilliValue() != d.NanoCPUs/1_000_000 {
		t.Errorf("limits = %v", lim)
	}
	for k, v := range lim {
		if r := c.Resources.Requests[k]; r.Cmp(v) != 0 {
			t.Errorf("request %s = %s, limit %s: not Guaranteed", k, r.String(), v.String())
		}
	}

	// Mounts: the toolbox read-only from an image volume never pulled,
	// /tmp and $HOME in memory with the tmpfs limit, the workspace.
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	tb := mounts[sandbox.ToolboxPath]
	if !tb.ReadOnly || vols[tb.Name].Image == nil || vols[tb.Name].Image.Reference != "agent/toolbox:1" || vols[tb.Name].Image.PullPolicy != corev1.PullNever {
		t.Errorf("toolbox mount %+v from %+v", tb, vols[tb.Name])
	}
	for _, dir := range []string{sandbox.TmpDir, sandbox.HomeDir} {
		ed := vols[mounts[dir].Name].EmptyDir
		if ed == nil || ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Value() != d.TmpfsBytes {
			t.Errorf("%s: %+v", dir, ed)
		}
	}
	ws := mounts[toolbox.WorkspaceRoot]
	if pvc := vols[ws.Name].PersistentVolumeClaim; pvc == nil || pvc.ClaimName != "ws-claim" || ws.SubPath != "task-1" || ws.ReadOnly {
		t.Errorf("workspace mount %+v from %+v", ws, vols[ws.Name])
	}
}

func TestPodLabelsAreTheSandboxLabels(t *testing.T) {
	spec := baseSpec(t)
	spec.Labels = map[string]string{sandbox.LabelUse: "sub-agent", sandbox.LabelManaged: "no"}
	user := sandbox.UserChoice{UID: 1000, GID: 1000}
	pod, err := testPod(t, spec, user)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := defaults(spec)
	want := s.SandboxLabels(user)
	if got := sandboxLabels(pod); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("labels read back = %v, want %v", got, want)
	}
	if want[sandbox.LabelManaged] != sandbox.ManagedValue {
		t.Fatal("Spec.Labels overrode the managed label")
	}
	for k, v := range pod.Labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q is not a Kubernetes label value: %v", k, v, errs)
		}
		if v != LabelValue(want[k]) {
			t.Errorf("label %s=%q, want %q", k, v, LabelValue(want[k]))
		}
	}
	// The workspace path and uid:gid cannot be label values as they are.
	if pod.Labels[sandbox.LabelWorkspace] == s.Workspace || pod.Labels[sandbox.LabelUser] == "1000:1000" {
		t.Error("a label value that Kubernetes rejects was stored as is")
	}
	if pod.Labels[sandbox.LabelTask] != "t-1" || pod.Labels[sandbox.LabelKind] != sandbox.KindSandbox {
		t.Errorf("valid label values were changed: %v", pod.Labels)
	}
}

func TestLabelValue(t *testing.T) {
	for _, v := range []string{"", "t-1", "true", "a.b_c-d"} {
		if LabelValue(v) != v {
			t.Errorf("LabelValue(%q) = %q, want it unchanged", v, LabelValue(v))
		}
	}
	for _, v := range []string{"/home/me/repo", "1000:1000", strings.Repeat("a", 64), "-x"} {
		got := LabelValue(v)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 || !strings.HasPrefix(got, "sha256-") {
			t.Errorf("LabelValue(%q) = %q: %v", v, got, errs)
		}
	}
	if LabelValue("/a") == LabelValue("/b") {
		t.Error("two paths encode the same")
	}
}

func TestPodSeccomp(t *testing.T) {
	spec := baseSpec(t)
	spec.EngineSeccomp = true
	pod, err := testPod(t, spec, sandbox.UserChoice{UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if sp := pod.Spec.Containers[0].SecurityContext.SeccompProfile; sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("EngineSeccomp: seccomp %+v, want RuntimeDefault (never Unconfined)", sp)
	}

	// Without the project's profile on the nodes the pod is refused
	// rather than run with a weaker one.
	s, _ := defaults(baseSpec(t))
	ws, _ := PVC{Claim: claim}.Workspace(s, sandbox.UserChoice{UID: 1, GID: 1})
	if _, err := Pod(s, PodConfig{Name: "x", User: sandbox.UserChoice{UID: 1, GID: 1}, ToolboxImage: "tb", Workspace: ws}); err == nil {
		t.Error("a pod without the project's seccomp profile was built")
	}

	b, err := StrictSeccompJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back specs.LinuxSeccomp
	if err := json.Unmarshal(b, &back); err != nil || back.DefaultAction == "" || len(back.Syscalls) == 0 {
		t.Errorf("StrictSeccompJSON does not read back as a profile: %v", err)
	}
}

func TestPodRefusesWhatAPodCannotDo(t *testing.T) {
	dir := t.TempDir()
	user := sandbox.UserChoice{UID: 1000, GID: 1000}
	for name, mod := range map[string]func(*sandbox.Spec){
		"host mount":     func(s *sandbox.Spec) { s.Mounts = []sandbox.Mount{{Source: dir, Target: "/cache/go"}} },
		"egress":         func(s *sandbox.Spec) { s.EgressDir = dir },
		"inline seccomp": func(s *sandbox.Spec) { s.Seccomp = policy.StrictSeccomp() },
		"all GPUs": func(s *sandbox.Spec) {
			s.DeviceRequests = []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}}}
		},
		"GPU by id": func(s *sandbox.Spec) {
			s.DeviceRequests = []container.DeviceRequest{{DeviceIDs: []string{"0"}, Capabilities: [][]string{{"gpu"}}}}
		},
		"relative shell":  func(s *sandbox.Spec) { s.Shell = "bash" },
		"bad environment": func(s *sandbox.Spec) { s.Env = []string{"NOVALUE"} },
		"bad label key":   func(s *sandbox.Spec) { s.Labels = map[string]string{"a b": "c"} },
	} {
		spec := baseSpec(t)
		mod(&spec)
		if _, err := testPod(t, spec, user); err == nil {
			t.Errorf("%s: pod built", name)
		}
	}
	if _, err := testPod(t, baseSpec(t), sandbox.UserChoice{}); err == nil {
		t.Error("a pod running as root was built")
	}
	for _, u := range []string{"0", "0:0", "x"} {
		spec := baseSpec(t)
		spec.User = u
		if _, err := chooseUser(spec, 1000, 1000); err == nil {
			t.Errorf("user %q accepted", u)
		}
	}
}

func TestChooseUser(t *testing.T) {
	spec := baseSpec(t)
	if u, _ := chooseUser(spec, 1000, 1001); u.UID != 1000 || u.GID != 1001 || u.Chown {
		t.Errorf("caller 1000:1001 -> %+v", u)
	}
	if u, _ := chooseUser(spec, 0, 0); u.UID != sandbox.NobodyUID || u.Chown {
		t.Errorf("root caller -> %+v, want the unprivileged uid and no chown", u)
	}
	spec.User = "2000:3000"
	if u, _ := chooseUser(spec, 0, 0); u.UID != 2000 || u.GID != 3000 {
		t.Errorf("explicit user -> %+v", u)
	}
}

func TestPodGPUs(t *testing.T) {
	spec := baseSpec(t)
	spec.DeviceRequests = []container.DeviceRequest{{Driver: "nvidia", Count: 2}}
	pod, err := testPod(t, spec, sandbox.UserChoice{UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if q := pod.Spec.Containers[0].Resources.Limits[GPUResource]; q.Value() != 2 {
		t.Errorf("%s = %s, want 2", GPUResource, q.String())
	}
	pod, _ = testPod(t, baseSpec(t), sandbox.UserChoice{UID: 1000, GID: 1000})
	if _, ok := pod.Spec.Containers[0].Resources.Limits[GPUResource]; ok {
		t.Error("a GPU was asked for without a request")
	}
}

// hardeningDelivery fills the workspace with an init container that asks
// for privileges.
type hardeningDelivery struct{}

func (hardeningDelivery) Workspace(spec sandbox.Spec, _ sandbox.UserChoice) (WorkspaceMount, error) {
	yes := true
	return WorkspaceMount{
		Volumes: []corev1.Volume{{Name: "ws", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Mounts:  []corev1.VolumeMount{{Name: "ws", MountPath: toolbox.WorkspaceRoot}},
		InitContainers: []corev1.Container{{
			Name: "clone", Image: "agent/git", ImagePullPolicy: corev1.PullAlways,
			SecurityContext: &corev1.SecurityContext{Privileged: &yes, Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}},
		}},
	}, nil
}

func TestDeliveryCannotWeakenThePod(t *testing.T) {
	s, _ := defaults(baseSpec(t))
	user := sandbox.UserChoice{UID: 1000, GID: 1000}
	ws, _ := hardeningDelivery{}.Workspace(s, user)
	pod, err := Pod(s, PodConfig{Name: "x", User: user, ToolboxImage: "tb", SeccompLocalhost: "p.json", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	ic := pod.Spec.InitContainers[0]
	if sc := ic.SecurityContext; isTrue(sc.Privileged) || len(sc.Capabilities.Add) > 0 || !isTrue(sc.ReadOnlyRootFilesystem) || ic.ImagePullPolicy != corev1.PullNever {
		t.Errorf("init container kept %+v, pull %s", sc, ic.ImagePullPolicy)
	}

	// A delivery that mounts nothing at /workspace is refused.
	if _, err := Pod(s, PodConfig{Name: "x", User: user, ToolboxImage: "tb", SeccompLocalhost: "p.json"}); err == nil {
		t.Error("a pod without a workspace was built")
	}
}

func TestDenyAllPolicy(t *testing.T) {
	np := DenyAllPolicy("agents")
	if len(np.Spec.Ingress) > 0 || len(np.Spec.Egress) > 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("policy allows something: %+v", np.Spec)
	}
	pod, _ := testPod(t, baseSpec(t), sandbox.UserChoice{UID: 1000, GID: 1000})
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("the policy does not select sandbox pods: %s=%s, pod has %q", k, v, pod.Labels[k])
		}
	}
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"agent/sandbox:latest":             "docker.io/agent/sandbox:latest",
		"agent/sandbox":                    "docker.io/agent/sandbox:latest",
		"busybox":                          "docker.io/library/busybox:latest",
		"localhost:5000/x/y":               "localhost:5000/x/y:latest",
		"registry.local/x:1":               "registry.local/x:1",
		"docker.io/agent/sandbox@sha256:0": "docker.io/agent/sandbox@sha256:0",
	} {
		if got := normalizeImage(in); got != want {
			t.Errorf("normalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShouldFallback(t *testing.T) {
	// The error client-go's WebSocket transport returns when the API
	// server refuses the upgrade.
	if !shouldFallback(fmt.Errorf("exec: %w", &streamhttp.UpgradeFailureError{Cause: errors.New("403")})) {
		t.Error("a refused WebSocket upgrade does not fall back to SPDY")
	}
	if shouldFallback(errors.New("connection reset")) {
		t.Error("any error falls back")
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

func deref(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}
