package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox/toolbox"
)

// Paths inside every sandbox.
const (
	// ToolboxPath is where the toolbox binary is bind-mounted (read-only).
	ToolboxPath = "/.agent/toolbox"
	// HomeDir is the sandbox user's home, a size-limited tmpfs (the root
	// filesystem is read-only, and tools expect a writable $HOME).
	HomeDir = "/home/agent"
	// TmpDir is a size-limited tmpfs.
	TmpDir = "/tmp"
)

// DefaultImage is the image a Spec without one uses.
const DefaultImage = "agent/sandbox:latest"

// NobodyUID is the unprivileged uid (and gid) a sandbox runs as when the
// caller is root and the workspace belongs to root: root in the sandbox is
// never the default. 65532 is the "nonroot" id of distroless images and is
// unlikely to own anything on the host.
const NobodyUID = 65532

// Spec describes one sandbox container. Zero values are documented per field.
type Spec struct {
	// Workspace is the host directory bind-mounted read-write at
	// /workspace. Required; made absolute.
	Workspace string
	// Image is the sandbox image; "" means DefaultImage. It is never pulled.
	Image string
	// Toolbox is the host path of the static agent-toolbox binary
	// (see FindToolbox). Required.
	Toolbox string
	// Limits are the resource limits; zero fields take the value of
	// policy.DefaultLimits.
	Limits policy.Limits
	// User is "uid:gid" to run as; "" chooses one (see ChooseUser). "0" or
	// "0:..." is accepted only when set explicitly here.
	User string
	// RefuseChown makes Create fail, instead of handing the workspace to
	// the unprivileged sandbox uid, when ChooseUser says it must (the
	// caller is root and root owns the workspace): for a directory the
	// user named, whose owner must not change without being asked.
	RefuseChown bool
	// Isolation is IsolationRunc ("" means it) or IsolationRunsc (gVisor).
	// Create fails with an *IsolationError when the engine cannot give it.
	Isolation Isolation
	// Runtime is the engine's name of the OCI runtime that provides the
	// isolation: "" means the engine default for runc and
	// DefaultRunscRuntime for runsc. Set it only for a runtime registered
	// under another name (e.g. "runsc-kvm", or "crun" for runc isolation).
	Runtime string
	// Seccomp, when non-nil, is the sandbox's seccomp profile. nil means
	// the project's profile, policy.StrictSeccomp (no io_uring, ptrace,
	// process_vm_*, user namespaces, or socket families beyond unix, inet,
	// inet6 and netlink), unless EngineSeccomp is set.
	Seccomp *specs.LinuxSeccomp
	// EngineSeccomp keeps the engine's default seccomp profile instead of
	// the project's when Seccomp is nil: the opt-out for a toolchain that
	// needs a system call the project's profile refuses. Seccomp itself is
	// never turned off.
	EngineSeccomp bool
	// Task and StateID set LabelTask and LabelState when not empty.
	Task    string
	StateID string
	// Labels are added to the container's labels; they cannot override the
	// labels this package sets.
	Labels map[string]string
	// Env is extra "KEY=value" environment for the main process and every
	// exec.
	Env []string
	// Name is the container name; "" generates "agent-sandbox-<random>".
	Name string
	// Shell runs the bash tool's commands (as SHELL -c COMMAND). "" means
	// /bin/bash when the image has it (models write bash), else /bin/sh.
	Shell string
	// WorkspaceReadOnly mounts the workspace read-only (read-only
	// sub-agents): nothing in the sandbox can change the files.
	WorkspaceReadOnly bool
	// History is a host directory holding a bare repository of the task's
	// history (worktree's ExportHistory), mounted read-only at HistoryPath
	// for the git tools; "" mounts nothing and those tools say so.
	History string
	// EgressDir is the host directory holding the task's egress proxy
	// socket (egress.Proxy.Dir). "" means no egress at all: the container
	// has only a loopback interface. When set, the network mode stays none;
	// the socket is mounted read-only and a forwarder on the container's
	// loopback is the only way out, through the policy-enforcing proxy.
	EgressDir string
	// Mounts are extra host directories (a repository's dependency caches)
	// bind-mounted at absolute targets under CacheRoot. None by default.
	Mounts []Mount
	// DeviceRequests give the sandbox GPUs (agent task --gpus); none by
	// default. The orchestrator builds them like the model server's.
	DeviceRequests []container.DeviceRequest
}

// CacheRoot is the only place extra mounts may appear in a sandbox: a
// target anywhere else could shadow the workspace, the toolbox, the egress
// socket or a system directory.
const CacheRoot = "/cache"

// Mount is one extra bind mount of a host directory.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

func (m Mount) check() error {
	if !filepath.IsAbs(m.Source) {
		return fmt.Errorf("mount source %q must be an absolute host path", m.Source)
	}
	if fi, err := os.Lstat(m.Source); err != nil || !fi.IsDir() {
		return fmt.Errorf("mount source %s must be an existing directory (not a symlink)", m.Source)
	}
	t := path.Clean(m.Target)
	if t != m.Target || !strings.HasPrefix(t, CacheRoot+"/") {
		return fmt.Errorf("mount target %q must be a clean path under %s", m.Target, CacheRoot)
	}
	return nil
}

// withDefaults fills zero fields and validates what can be checked without
// the engine.
func (s Spec) withDefaults() (Spec, error) {
	if s.Workspace == "" {
		return s, errors.New("no workspace given: pass the directory to mount at /workspace")
	}
	ws, err := filepath.Abs(s.Workspace)
	if err != nil {
		return s, fmt.Errorf("workspace %s: %w", s.Workspace, err)
	}
	// Resolve symlinks so that the label and the bind source name the real
	// directory, and so the checks below cannot be dodged through a link.
	if real, err := filepath.EvalSymlinks(ws); err == nil {
		ws = real
	}
	fi, err := os.Stat(ws)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, fmt.Errorf("workspace %s does not exist: create it or pass an existing directory", ws)
	case err != nil:
		return s, fmt.Errorf("workspace %s: %w", ws, err)
	case !fi.IsDir():
		return s, fmt.Errorf("workspace %s is not a directory", ws)
	}
	if ws == "/" {
		return s, errors.New("refusing to mount / as the workspace: pass a project directory")
	}
	s.Workspace = ws
	iso, err := ParseIsolation(string(s.Isolation))
	if err != nil {
		return s, err
	}
	s.Isolation = iso
	if s.Image == "" {
		s.Image = DefaultImage
	}
	if s.Toolbox == "" {
		return s, errors.New("no toolbox binary given: see FindToolbox")
	}
	s.Limits = s.Limits.OrDefaults()
	if s.Shell != "" && !strings.HasPrefix(s.Shell, "/") {
		return s, fmt.Errorf("shell %q must be an absolute path inside the image, e.g. /bin/bash", s.Shell)
	}
	if s.User != "" {
		if _, _, err := parseUser(s.User); err != nil {
			return s, err
		}
	}
	for _, m := range s.Mounts {
		if err := m.check(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// refuseSocketParent refuses a workspace that contains the engine's unix
// socket: bind-mounting it would hand the sandbox the whole host.
func refuseSocketParent(ws, daemonHost string) error {
	sock, ok := strings.CutPrefix(daemonHost, "unix://")
	if !ok {
		return nil
	}
	if real, err := filepath.EvalSymlinks(sock); err == nil {
		sock = real
	}
	if rel, err := filepath.Rel(ws, sock); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("refusing workspace %s: it contains the Docker socket %s, which would give the sandbox control of the host", ws, sock)
	}
	return nil
}

func parseUser(u string) (uid, gid int, err error) {
	us, gs, hasGID := strings.Cut(u, ":")
	uid, err = strconv.Atoi(us)
	if err == nil && hasGID {
		gid, err = strconv.Atoi(gs)
	} else {
		gid = uid
	}
	if err != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("user %q must be numeric uid or uid:gid", u)
	}
	return uid, gid, nil
}

// UserChoice is the identity a sandbox runs as and why.
type UserChoice struct {
	UID, GID int
	// Chown is set when the workspace must be handed to UID:GID so that the
	// sandbox can write it (the caller is root and root owns the workspace).
	Chown bool
}

// String is "uid:gid".
func (u UserChoice) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// ChooseUser picks the sandbox identity: the caller's uid:gid, so that files
// come back owned by the user; when the caller is root, the workspace owner
// if that is not root; otherwise NobodyUID, with the workspace handed over to
// it. Root inside the sandbox is never chosen.
func ChooseUser(callerUID, callerGID, ownerUID, ownerGID int) UserChoice {
	switch {
	case callerUID != 0:
		return UserChoice{UID: callerUID, GID: callerGID}
	case ownerUID != 0:
		return UserChoice{UID: ownerUID, GID: ownerGID}
	default:
		return UserChoice{UID: NobodyUID, GID: NobodyUID, Chown: true}
	}
}

// SandboxLabels are the labels every backend puts on a sandbox made from s
// running as user: s.Labels, then the project's own keys, which s.Labels
// cannot override (List, Get and gc find sandboxes by them).
func (s Spec) SandboxLabels(user UserChoice) map[string]string {
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	if s.Task != "" {
		labels[LabelTask] = s.Task
	}
	if s.StateID != "" {
		labels[LabelState] = s.StateID
	}
	labels[LabelManaged] = ManagedValue
	labels[LabelKind] = KindSandbox
	labels[LabelWorkspace] = s.Workspace
	labels[LabelUser] = user.String()
	if s.Shell != "" {
		labels[LabelShell] = s.Shell
	}
	if s.Isolation != "" {
		labels[LabelIsolation] = string(s.Isolation)
	}
	return labels
}

// containerConfig turns a defaulted Spec into the engine's create request.
// It is pure so that every hardening decision is unit-tested.
func containerConfig(s Spec, user UserChoice) (*container.Config, *container.HostConfig, error) {
	labels := s.SandboxLabels(user)

	env := append([]string{"HOME=" + HomeDir, "USER=agent"}, s.Env...)
	cfg := &container.Config{
		Image:      s.Image,
		User:       user.String(),
		Env:        env,
		WorkingDir: toolbox.WorkspaceRoot,
		// The toolbox idles as the main process (the container's init,
		// not dumpable), so any image works unchanged, with or without a
		// shell.
		Entrypoint:      []string{ToolboxPath},
		Cmd:             []string{"idle"},
		Labels:          labels,
		Hostname:        "sandbox",
		NetworkDisabled: true,
	}

	secOpts := []string{"no-new-privileges:true"}
	if s.Seccomp == nil && !s.EngineSeccomp {
		s.Seccomp = policy.StrictSeccomp()
	}
	if s.Seccomp != nil {
		// Docker's seccomp profile JSON is a superset of the OCI
		// LinuxSeccomp structure; the engine accepts it inline.
		b, err := json.Marshal(s.Seccomp)
		if err != nil {
			return nil, nil, fmt.Errorf("seccomp profile: %w", err)
		}
		secOpts = append(secOpts, "seccomp="+string(b))
	}
	// exec: the engine mounts a tmpfs noexec unless told otherwise, and
	// toolchains run what they build there (`go test` runs its test binary
	// from $TMPDIR). It takes nothing away: the workspace is writable and
	// executable anyway; nosuid and no-new-privileges still hold.
	tmpfsOpts := fmt.Sprintf("rw,exec,nosuid,nodev,size=%d", s.Limits.TmpfsBytes)
	pids := PidsCgroupLimit(s.Isolation, s.Limits.Pids)
	// The toolbox is the container's init (it reaps orphans and ends on
	// SIGTERM, so stop is fast), never the engine's docker-init: that one
	// runs as the sandbox user, is dumpable, and a command that took it over
	// with ptrace or /proc/1/mem would run code that no kill reaches. Set
	// explicitly, because a daemon may default "init" to true.
	initOff := false
	hc := &container.HostConfig{
		// Everything the agent can do goes through exec; no capability is
		// needed for that, so none is kept (not even CHOWN or SETUID).
		CapDrop:        []string{"ALL"},
		SecurityOpt:    secOpts,
		Privileged:     false,
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			TmpDir:  tmpfsOpts + ",mode=1777",
			HomeDir: fmt.Sprintf("%s,mode=0700,uid=%d,gid=%d", tmpfsOpts, user.UID, user.GID),
		},
		Resources: container.Resources{
			Memory: s.Limits.MemoryBytes,
			// Swap equal to memory means no swap: a memory bomb is
			// OOM-killed instead of thrashing the host.
			MemorySwap: s.Limits.MemoryBytes,
			NanoCPUs:   s.Limits.NanoCPUs,
			// The pids cgroup, not ulimit nproc, which counts per host uid
			// across containers.
			PidsLimit: &pids,
		},
		Init:        &initOff,
		NetworkMode: "none",
		// Private namespaces, stated explicitly because some daemon defaults
		// (cgroup v1 hosts, "shareable" ipc) differ.
		IpcMode:      container.IPCModePrivate,
		CgroupnsMode: container.CgroupnsModePrivate,
		Runtime:      s.RuntimeName(),
		// Only the workspace and the toolbox binary come from the host.
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: s.Workspace, Target: toolbox.WorkspaceRoot, ReadOnly: s.WorkspaceReadOnly},
			{Type: mount.TypeBind, Source: s.Toolbox, Target: ToolboxPath, ReadOnly: true},
		},
		LogConfig: container.LogConfig{Type: "none"},
	}
	if s.Isolation == IsolationRunsc {
		// gVisor's own process limit (see PidsCgroupLimit).
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "nproc", Soft: s.Limits.Pids, Hard: s.Limits.Pids})
	}
	for _, m := range s.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	hc.DeviceRequests = s.DeviceRequests
	if s.History != "" {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: s.History, Target: toolbox.HistoryPath, ReadOnly: true})
	}
	if s.EgressDir != "" {
		if err := ApplyEgress(cfg, hc, s.EgressDir); err != nil {
			return nil, nil, err
		}
	}
	return cfg, hc, nil
}
