package kubernetes

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// ContainerName is the name of the one container of a sandbox pod.
const ContainerName = "sandbox"

// LabelsAnnotation holds the sandbox's labels exactly as sandbox.Spec
// gave them (JSON): a Kubernetes label value is at most 63 characters
// from a small alphabet, so a host path (LabelWorkspace) or "uid:gid"
// (LabelUser) is stored in the pod's labels as a hash (see LabelValue) and
// read back from here.
const LabelsAnnotation = policy.LabelPrefix + "labels"

// NetworkPolicyName is the NetworkPolicy that denies every sandbox pod of
// a namespace all ingress and egress.
const NetworkPolicyName = "agent-sandbox-deny-all"

// GPUResource is the extended resource a sandbox's GPUs are asked for
// with (the NVIDIA device plugin's).
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// Volume names inside a sandbox pod.
const (
	volumeToolbox = "toolbox"
	volumeTmp     = "tmp"
	volumeHome    = "home"
)

// ToolboxImageFile is where a toolbox image (Options.ToolboxImage) holds
// the static agent-toolbox binary.
const ToolboxImageFile = "agent-toolbox"

// PodConfig is what the pod of a sandbox is built from besides its Spec:
// the backend's settings resolved for one create.
type PodConfig struct {
	// Namespace of the pod.
	Namespace string
	// Name of the pod; must be a DNS-1123 subdomain.
	Name string
	// User is the uid:gid every process of the pod runs as (never root).
	User sandbox.UserChoice
	// RuntimeClass is the pod's runtimeClassName ("" for the cluster's
	// default runtime).
	RuntimeClass string
	// ToolboxImage is an image holding the static agent-toolbox at
	// /agent-toolbox, mounted read-only at sandbox.ToolboxPath through an
	// image volume, so that the sandbox image itself stays arbitrary.
	ToolboxImage string
	// SeccompLocalhost, when set, is the node-local seccomp profile
	// (relative to the kubelet's seccomp directory) holding the project's
	// profile (see StrictSeccompJSON); "" is only accepted with
	// Spec.EngineSeccomp, which uses the runtime's default profile.
	SeccompLocalhost string
	// Workspace mounts the task's files at /workspace (see Delivery).
	Workspace WorkspaceMount
}

// WorkspaceMount is what a Delivery adds to a sandbox pod: the volumes
// holding the workspace (and, optionally, the task's history), their
// mounts in the sandbox container, and init containers that fill them
// before the sandbox starts.
type WorkspaceMount struct {
	Volumes        []corev1.Volume
	Mounts         []corev1.VolumeMount
	InitContainers []corev1.Container
}

// defaults fills the zero fields of s as sandbox.Engine does and refuses
// what a pod cannot do, before anything is sent to the cluster.
func defaults(s sandbox.Spec) (sandbox.Spec, error) {
	if s.Workspace == "" {
		return s, errors.New("no workspace given: pass the directory the task works on")
	}
	ws, err := filepath.Abs(s.Workspace)
	if err != nil {
		return s, fmt.Errorf("workspace %s: %w", s.Workspace, err)
	}
	// The same resolution as the Docker engine's, so that the workspace
	// label (which the orchestrator lists sandboxes by) names the same
	// directory whichever backend made the sandbox.
	if real, err := filepath.EvalSymlinks(ws); err == nil {
		ws = real
	}
	s.Workspace = ws
	if s.Image == "" {
		s.Image = sandbox.DefaultImage
	}
	s.Limits = s.Limits.OrDefaults()
	if s.Shell != "" && !strings.HasPrefix(s.Shell, "/") {
		return s, fmt.Errorf("shell %q must be an absolute path inside the image, e.g. /bin/bash", s.Shell)
	}
	if len(s.Mounts) > 0 {
		return s, fmt.Errorf("the Kubernetes backend cannot mount host directories (%s): a pod runs on a cluster node, not on this machine; drop the cache mounts from the configuration", s.Mounts[0].Source)
	}
	if s.EgressDir != "" {
		return s, errors.New("the Kubernetes backend has no egress path yet: its sandboxes run under a deny-all NetworkPolicy; set sandbox.egress to none")
	}
	if s.Seccomp != nil {
		return s, errors.New("a pod cannot carry an inline seccomp profile: install it on the nodes and name it in Options.SeccompLocalhost")
	}
	return s, nil
}

// chooseUser is the identity the pod runs as: Spec.User when given (never
// root: a pod runs with runAsNonRoot), else the caller's uid:gid, else
// sandbox.NobodyUID when the caller is root. There is no host workspace to
// hand over: the files are delivered into the pod (see Delivery), owned
// through the pod's fsGroup.
func chooseUser(s sandbox.Spec, callerUID, callerGID int) (sandbox.UserChoice, error) {
	if s.User == "" {
		u := sandbox.ChooseUser(callerUID, callerGID, callerUID, callerGID)
		u.Chown = false
		return u, nil
	}
	us, gs, hasGID := strings.Cut(s.User, ":")
	uid, err := strconv.Atoi(us)
	gid := uid
	if err == nil && hasGID {
		gid, err = strconv.Atoi(gs)
	}
	if err != nil || uid < 0 || gid < 0 {
		return sandbox.UserChoice{}, fmt.Errorf("user %q must be numeric uid or uid:gid", s.User)
	}
	if uid == 0 {
		return sandbox.UserChoice{}, errors.New("a sandbox pod never runs as root (runAsNonRoot): give an unprivileged uid:gid")
	}
	return sandbox.UserChoice{UID: uid, GID: gid}, nil
}

// LabelValue is v as a Kubernetes label value: v itself when it is one,
// else "sha256-" and the first 56 hex digits of its SHA-256 (63
// characters). Selectors compare encoded values; List then compares the
// exact values kept in LabelsAnnotation, so a collision cannot make a
// sandbox match a filter it does not.
func LabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256-" + hex.EncodeToString(sum[:])[:56]
}

// podLabels encodes a sandbox's labels for the pod's metadata: labels with
// every value made valid, and the exact map as LabelsAnnotation.
func podLabels(l map[string]string) (labels, annotations map[string]string, err error) {
	labels = make(map[string]string, len(l))
	for k, v := range l {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, nil, fmt.Errorf("label key %q cannot be a Kubernetes label: %s", k, strings.Join(errs, "; "))
		}
		labels[k] = LabelValue(v)
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, nil, err
	}
	return labels, map[string]string{LabelsAnnotation: string(b)}, nil
}

// sandboxLabels reads a pod's labels back as the sandbox's: the exact map
// in LabelsAnnotation, or the pod's labels when that is missing or
// unreadable (a pod edited by hand).
func sandboxLabels(p *corev1.Pod) map[string]string {
	if a, ok := p.Annotations[LabelsAnnotation]; ok {
		var l map[string]string
		if json.Unmarshal([]byte(a), &l) == nil && l != nil {
			return l
		}
	}
	out := make(map[string]string, len(p.Labels))
	for k, v := range p.Labels {
		out[k] = v
	}
	return out
}

// gpus turns the Docker-style GPU requests of a Spec into a count of
// GPUResource: a pod asks for a number of GPUs, never for "all" or for
// particular devices.
func gpus(s sandbox.Spec) (int64, error) {
	var n int64
	for _, r := range s.DeviceRequests {
		gpu := r.Driver == "nvidia"
		for _, caps := range r.Capabilities {
			if slices.Contains(caps, "gpu") {
				gpu = true
			}
		}
		switch {
		case !gpu:
			return 0, fmt.Errorf("device request %q is not a GPU request: a pod can only ask for %s", r.Driver, GPUResource)
		case len(r.DeviceIDs) > 0:
			return 0, errors.New("a pod cannot ask for particular GPUs: give a number of GPUs (--gpus N)")
		case r.Count <= 0:
			return 0, errors.New("a pod cannot ask for all of a node's GPUs: give a number of GPUs (--gpus N)")
		}
		n += int64(r.Count)
	}
	return n, nil
}

// parseEnv turns "KEY=value" entries into environment variables.
func parseEnv(env []string) ([]corev1.EnvVar, error) {
	out := make([]corev1.EnvVar, 0, len(env))
	for _, e := range env {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("environment entry %q must be KEY=value", e)
		}
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	return out, nil
}

// Pod builds the pod of a sandbox from a Spec already through defaults: the
// Kubernetes form of the Docker engine's hardened container. It is pure,
// so that every hardening decision is unit-tested.
//
//   - runtimeClassName (gVisor, Kata) as Spec.Runtime maps it;
//   - every process runs as c.User, never root, with no capability, no
//     privilege escalation (no_new_privs), a read-only root filesystem and
//     the project's seccomp profile (or the runtime's default when
//     Spec.EngineSeccomp);
//   - no service account token, no service links, no host namespace,
//     no host path; the image is never pulled (imagePullPolicy Never);
//   - memory and CPU limits equal to the requests (Guaranteed QoS), /tmp
//     and $HOME as memory-backed emptyDirs of Limits.TmpfsBytes each;
//   - the toolbox idles as the container's first process, from a
//     read-only image volume;
//   - the labels of Spec.SandboxLabels, so that List, gc and
//     `agent sandbox ls` find it as they find a container.
//
// The process limit (Limits.Pids) has no per-pod field: it is the
// kubelet's podPidsLimit on the nodes (see docs/kubernetes-backend.md).
func Pod(s sandbox.Spec, c PodConfig) (*corev1.Pod, error) {
	if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 {
		return nil, fmt.Errorf("pod name %q: %s", c.Name, strings.Join(errs, "; "))
	}
	if c.User.UID == 0 {
		return nil, errors.New("a sandbox pod never runs as root")
	}
	if c.ToolboxImage == "" {
		return nil, errors.New("no toolbox image: set Options.ToolboxImage to an image holding /" + ToolboxImageFile)
	}
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if !s.EngineSeccomp {
		if c.SeccompLocalhost == "" {
			return nil, errors.New("the project's seccomp profile is not installed on the nodes: install StrictSeccompJSON as a node-local profile and set Options.SeccompLocalhost, or keep the runtime's default profile (sandbox.seccomp: engine)")
		}
		profile := c.SeccompLocalhost
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &profile}
	}
	if !c.hasWorkspace() {
		return nil, fmt.Errorf("the workspace delivery mounts nothing at %s", toolbox.WorkspaceRoot)
	}

	labels, annotations, err := podLabels(s.SandboxLabels(c.User))
	if err != nil {
		return nil, err
	}
	extra, err := parseEnv(s.Env)
	if err != nil {
		return nil, err
	}
	env := append([]corev1.EnvVar{{Name: "HOME", Value: sandbox.HomeDir}, {Name: "USER", Value: "agent"}}, extra...)
	n, err := gpus(s)
	if err != nil {
		return nil, err
	}

	uid, gid := int64(c.User.UID), int64(c.User.GID)
	yes, no := true, false
	limits := corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(s.Limits.MemoryBytes, resource.BinarySI),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(s.Limits.NanoCPUs/1_000_000, resource.DecimalSI),
	}
	if n > 0 {
		limits[GPUResource] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	tmpfs := resource.NewQuantity(s.Limits.TmpfsBytes, resource.BinarySI)
	grace := int64(5)
	var runtimeClass *string
	if c.RuntimeClass != "" {
		rc := c.RuntimeClass
		runtimeClass = &rc
	}

	mounts := []corev1.VolumeMount{
		{Name: volumeToolbox, MountPath: sandbox.ToolboxPath, SubPath: ToolboxImageFile, ReadOnly: true},
		{Name: volumeTmp, MountPath: sandbox.TmpDir},
		{Name: volumeHome, MountPath: sandbox.HomeDir},
	}
	mounts = append(mounts, c.Workspace.Mounts...)
	volumes := []corev1.Volume{
		{Name: volumeToolbox, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
			Reference: c.ToolboxImage, PullPolicy: corev1.PullNever,
		}}},
		{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpfs}}},
		{Name: volumeHome, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpfs}}},
	}
	volumes = append(volumes, c.Workspace.Volumes...)

	containerSC := &corev1.SecurityContext{
		// Everything the agent does goes through exec; no capability is
		// needed for that, so none is kept.
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		Privileged:               &no,
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		RunAsNonRoot:             &yes,
		RunAsUser:                &uid,
		RunAsGroup:               &gid,
		SeccompProfile:           seccomp,
	}
	init := make([]corev1.Container, 0, len(c.Workspace.InitContainers))
	for _, ic := range c.Workspace.InitContainers {
		// Init containers run with the same hardening: a delivery cannot
		// weaken the pod.
		ic.SecurityContext = containerSC.DeepCopy()
		ic.ImagePullPolicy = corev1.PullNever
		init = append(init, ic)
	}

	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        c.Name,
			Namespace:   c.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RuntimeClassName:              runtimeClass,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			ShareProcessNamespace:         &no,
			Hostname:                      "sandbox",
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &gid,
				FSGroup:        &gid,
				SeccompProfile: seccomp,
			},
			InitContainers: init,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           s.Image,
				ImagePullPolicy: corev1.PullNever,
				// The toolbox idles as the first process, so any image
				// works unchanged, with or without a shell.
				Command:         []string{sandbox.ToolboxPath},
				Args:            []string{"idle"},
				WorkingDir:      toolbox.WorkspaceRoot,
				Env:             env,
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: limits.DeepCopy()},
				SecurityContext: containerSC,
				VolumeMounts:    mounts,
			}},
			Volumes: volumes,
		},
	}, nil
}

func (c PodConfig) hasWorkspace() bool {
	for _, m := range c.Workspace.Mounts {
		if m.MountPath == toolbox.WorkspaceRoot {
			return true
		}
	}
	return false
}

// DenyAllPolicy is the NetworkPolicy that gives every sandbox pod of a
// namespace no traffic at all, in or out (no rule is an allow rule): the
// pod form of the Docker sandbox's network mode none. It needs a network
// plugin that enforces NetworkPolicy.
func DenyAllPolicy(namespace string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      NetworkPolicyName,
			Namespace: namespace,
			Labels:    map[string]string{sandbox.LabelManaged: sandbox.ManagedValue},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				sandbox.LabelManaged: sandbox.ManagedValue,
				sandbox.LabelKind:    sandbox.KindSandbox,
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// StrictSeccompJSON is the project's seccomp profile (policy.StrictSeccomp)
// in the JSON form a kubelet reads from its seccomp directory: install it
// on every node and name it in Options.SeccompLocalhost.
func StrictSeccompJSON() ([]byte, error) {
	return json.MarshalIndent(policy.StrictSeccomp(), "", "  ")
}

// randomName is a fresh pod name.
func randomName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "agent-sandbox-" + hex.EncodeToString(b)
}

// callerIDs are the uid and gid of this process.
func callerIDs() (int, int) { return os.Getuid(), os.Getgid() }
