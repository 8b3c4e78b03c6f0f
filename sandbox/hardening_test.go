package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

const statusScript = `grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; echo "uid=$(id -u)"; ` +
	`if touch /rootfs-probe 2>/dev/null; then echo root=writable; else echo root=readonly; fi; ` +
	`echo "ifaces=$(ls /sys/class/net | tr '\n' ' ')"; ` +
	`echo "dmesg=$(dmesg 2>/dev/null | head -n 1)"; grep MemTotal: /proc/meminfo`

func field(t *testing.T, out, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `[:=]\s*(.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s in output:\n%s", key, out)
	}
	return strings.TrimSpace(m[1])
}

// The hardening seen from inside the sandbox, with a control container
// (same image, no hardening) where every check comes out the other way.
func TestHardeningFromInside(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		ws := t.TempDir()
		var st syscall.Stat_t
		if err := syscall.Stat(ws, &st); err != nil {
			t.Fatal(err)
		}
		want := sandbox.ChooseUser(os.Geteuid(), os.Getegid(), int(st.Uid), int(st.Gid))
		sb := m.New(t, sandbox.Spec{Workspace: ws})

		r := sh(t, sb, statusScript)
		if r.IsError {
			t.Fatalf("probe failed: %s", r.Output)
		}
		out := r.Output
		iso := sandboxtest.Isolation(t)
		if got := field(t, out, "CapEff"); got != "0000000000000000" {
			t.Errorf("CapEff %s, want 0000000000000000", got)
		}
		gvisor := strings.Contains(field(t, out, "dmesg"), "Starting gVisor")
		switch iso {
		case sandbox.IsolationRunsc:
			// gVisor's kernel serves the sandbox's system calls: it neither
			// shows NoNewPrivs nor runs the seccomp profile on exec'd
			// processes (Seccomp: 0); what it enforces instead is seen here:
			// its own kernel log, and the memory limit as the machine's
			// whole memory.
			if !gvisor {
				t.Errorf("isolation runsc, but the sandbox does not run under gVisor:\n%s", out)
			}
			want := policy.DefaultLimits().MemoryBytes >> 10
			if got := field(t, out, "MemTotal"); got != fmt.Sprintf("%d kB", want) {
				t.Errorf("MemTotal %s under gVisor, want the memory limit %d kB", got, want)
			}
		default:
			if gvisor {
				t.Errorf("isolation runc, but the sandbox runs under gVisor:\n%s", out)
			}
			if got := field(t, out, "NoNewPrivs"); got != "1" {
				t.Errorf("NoNewPrivs %s, want 1", got)
			}
			if got := field(t, out, "Seccomp"); got != "2" {
				t.Errorf("Seccomp %s, want 2 (filter)", got)
			}
		}
		if got := field(t, out, "uid"); got != fmt.Sprint(want.UID) || got == "0" {
			t.Errorf("uid %s, want %d (never 0)", got, want.UID)
		}
		if got := field(t, out, "root"); got != "readonly" {
			t.Errorf("root filesystem is %s", got)
		}
		if got := field(t, out, "ifaces"); got != "lo" {
			t.Errorf("network interfaces %q, want only lo", got)
		}
		// The workspace, /tmp and $HOME stay writable for the sandbox user.
		if r := sh(t, sb, `touch /workspace/w /tmp/t "$HOME/h" && echo ok`); r.IsError || !strings.Contains(r.Output, "ok") {
			t.Errorf("writable places: %s", r.Output)
		}
		// Files the sandbox writes come back owned by the chosen user on the
		// host (under rootless Podman through the keep-id user namespace,
		// which maps the user's uid to itself).
		var wst syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ws, "w"), &wst); err != nil || int(wst.Uid) != want.UID || int(wst.Gid) != want.GID {
			t.Errorf("a file the sandbox wrote is owned by %d:%d on the host (%v), want %s", wst.Uid, wst.Gid, err, want)
		}

		// Control: the same probe in a plain container of the same image.
		c := sandboxtest.Client(t)
		out, code := sandboxtest.RunControl(t, c, &container.Config{}, &container.HostConfig{}, statusScript)
		if code != 0 {
			t.Fatalf("control probe exited %d: %s", code, out)
		}
		if field(t, out, "CapEff") == "0000000000000000" || field(t, out, "uid") != "0" || field(t, out, "root") != "writable" {
			t.Errorf("control container unexpectedly hardened, so the checks above prove nothing:\n%s", out)
		}
		// Under gVisor every container of the engine (this control too) runs
		// with --network=none and shows no NoNewPrivs line; under runc the
		// control has both.
		if iso != sandbox.IsolationRunsc && (field(t, out, "NoNewPrivs") != "0" || !strings.Contains(field(t, out, "ifaces"), "eth0")) {
			t.Errorf("control container unexpectedly hardened, so the checks above prove nothing:\n%s", out)
		}
		// A control for the memory check: without a limit gVisor reports more.
		if iso == sandbox.IsolationRunsc && field(t, out, "MemTotal") == fmt.Sprintf("%d kB", policy.DefaultLimits().MemoryBytes>>10) {
			t.Errorf("control container shows the sandbox's memory limit too, so the check proves nothing:\n%s", out)
		}
	})
}

// The hardening seen from outside, through the engine's inspect.
func TestHardeningFromInspect(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		limits := policy.Limits{MemoryBytes: 256 << 20, NanoCPUs: 500_000_000, Pids: 100, TmpfsBytes: 32 << 20}
		sb := m.New(t, sandbox.Spec{Limits: limits, Task: "task-1", StateID: "state-1"})
		c := sandboxtest.Client(t)
		ins, err := c.ContainerInspect(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		hc := ins.HostConfig
		pooled := m.Mode == sandboxtest.Pooled
		lookup := m.Lookup()
		// Docker reports the request ("ALL"); Podman the capabilities it
		// dropped, which must then be every one of the default set (what
		// remains effective is checked from inside: CapEff 0).
		if !slices.Equal(hc.CapDrop, []string{"ALL"}) && !(e.Podman && droppedDefaults(hc.CapDrop)) || len(hc.CapAdd) != 0 || hc.Privileged {
			t.Errorf("caps drop %v add %v privileged %v", hc.CapDrop, hc.CapAdd, hc.Privileged)
		}
		// Podman spells the option without ":true" and reports the profile
		// file it was given.
		nnp := slices.Contains(hc.SecurityOpt, "no-new-privileges:true") || e.Podman && slices.Contains(hc.SecurityOpt, "no-new-privileges")
		if !nnp || slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.Contains(s, "unconfined") }) {
			t.Errorf("security options %v", hc.SecurityOpt)
		}
		// Init false; Podman reports an init it does not add as absent.
		if !hc.ReadonlyRootfs || hc.NetworkMode != "none" || (hc.Init == nil && !e.Podman) || (hc.Init != nil && *hc.Init) {
			t.Errorf("readonly %v network %q init %v", hc.ReadonlyRootfs, hc.NetworkMode, hc.Init)
		}
		if hc.PidMode.IsHost() || hc.IpcMode.IsHost() || hc.UTSMode.IsHost() || hc.UsernsMode.IsHost() || hc.CgroupnsMode.IsHost() {
			t.Errorf("host namespace: pid %q ipc %q uts %q userns %q cgroupns %q", hc.PidMode, hc.IpcMode, hc.UTSMode, hc.UsernsMode, hc.CgroupnsMode)
		}
		if e.NoCgroupLimits {
			// No cgroup of its own: the engine drops the limits (and says so
			// by reporting none); the toolbox's commands run under the
			// rlimits standing in.
			r := sh(t, sb, "ulimit -u")
			want := fmt.Sprintf("%d\n", limits.Pids)
			if r.Output != want {
				t.Errorf("no cgroup limits, and the rlimits standing in are %q, want %q", r.Output, want)
			}
			if !strings.Contains(sb.Notice, "NOT limited") {
				t.Errorf("sandbox notice does not say what is not limited: %q", sb.Notice)
			}
			t.Logf("NOT enforced on this engine (%s): memory %d, CPU %d; enforced for the toolbox's commands: RLIMIT_NPROC %d",
				sandbox.NoCgroupLimitsReason, limits.MemoryBytes, limits.NanoCPUs, limits.Pids)
		} else if hc.Memory != limits.MemoryBytes || hc.MemorySwap != limits.MemoryBytes || hc.NanoCPUs != limits.NanoCPUs || hc.PidsLimit == nil || *hc.PidsLimit != sandbox.PidsCgroupLimit(sandboxtest.Isolation(t), limits.Pids) {
			t.Errorf("limits memory %d swap %d cpus %d pids %v", hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit)
		}
		if ins.Config.User == "" || strings.HasPrefix(ins.Config.User, "0") {
			t.Errorf("user %q", ins.Config.User)
		}
		if len(ins.Mounts) != 2 {
			t.Errorf("mounts %+v, want the workspace and the toolbox only", ins.Mounts)
		}
		for _, m := range ins.Mounts {
			switch m.Destination {
			case "/workspace":
				// A pooled sandbox's mount source is its slot, renamed
				// onto the workspace at the claim (checked below).
				if !m.RW || (!pooled && m.Source != sb.Workspace) {
					t.Errorf("workspace mount %+v", m)
				}
			case sandbox.ToolboxPath:
				if m.RW {
					t.Errorf("toolbox mounted read-write: %+v", m)
				}
			default:
				t.Errorf("unexpected mount %+v", m)
			}
			if strings.Contains(m.Source, "docker.sock") {
				t.Errorf("docker socket mounted: %+v", m)
			}
		}
		// What the sandbox writes at /workspace is in its workspace.
		if r := sh(t, sb, "echo seen > /workspace/mount-probe"); r.IsError {
			t.Fatalf("writing the workspace: %s", r.Output)
		}
		if b, err := os.ReadFile(filepath.Join(sb.Workspace, "mount-probe")); err != nil || string(b) != "seen\n" {
			t.Errorf("the workspace mount is not %s: %q %v", sb.Workspace, b, err)
		}
		// The labels lookups (gc, freeze, ls) see: the container's own,
		// or for a pooled one those its claim journalled.
		labels := ins.Config.Labels
		if pooled {
			found, err := lookup.Get(context.Background(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			labels = found.Labels
		}
		for k, v := range map[string]string{sandbox.LabelManaged: "true", sandbox.LabelKind: "sandbox", sandbox.LabelWorkspace: sb.Workspace, sandbox.LabelTask: "task-1", sandbox.LabelState: "state-1"} {
			if labels[k] != v {
				t.Errorf("label %s=%q, want %q", k, labels[k], v)
			}
		}
	})
}

// droppedDefaults reports whether caps names every capability of the
// engines' default set (Docker's and Podman's: the 14 below).
func droppedDefaults(caps []string) bool {
	for _, c := range []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
		"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"} {
		if !slices.Contains(caps, c) && !slices.Contains(caps, "CAP_"+c) {
			return false
		}
	}
	return true
}

// A profile given in Spec.Seccomp replaces the engine default and is
// enforced; the control is the same command in a sandbox with the default.
func TestCustomSeccompProfileApplied(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		skipSeccompUnderGVisor(t)
		eperm := uint(1)
		profile := &specs.LinuxSeccomp{
			DefaultAction: specs.ActAllow,
			Syscalls: []specs.LinuxSyscall{{
				Names: []string{"mkdir", "mkdirat"}, Action: specs.ActErrno, ErrnoRet: &eperm,
			}},
		}
		const probe = "mkdir /tmp/d && echo MADE"
		strict := m.New(t, sandbox.Spec{Seccomp: profile})
		if r := sh(t, strict, probe); strings.Contains(r.Output, "MADE") {
			t.Errorf("mkdir allowed under a profile that denies it: %+v", r)
		}
		if r := sh(t, strict, "grep Seccomp: /proc/self/status"); !strings.Contains(r.Output, "2") {
			t.Errorf("seccomp off under a custom profile: %q", r.Output)
		}
		plain := m.New(t, sandbox.Spec{EngineSeccomp: true})
		if r := sh(t, plain, probe); !strings.Contains(r.Output, "MADE") {
			t.Errorf("control: mkdir in a default sandbox: %+v", r)
		}
	})
}

// skipSeccompUnderGVisor skips a test of the seccomp profile under runsc:
// gVisor serves system calls itself and does not apply the OCI profile to
// processes started by exec (every tool call), even with --oci-seccomp,
// which covers the container's first process only.
func skipSeccompUnderGVisor(t *testing.T) {
	t.Helper()
	if sandboxtest.Isolation(t) == sandbox.IsolationRunsc {
		t.Skip("gVisor does not apply the seccomp profile to exec'd processes; its own kernel is the system call boundary")
	}
}

const syscallProbe = `package main

import (
	"fmt"
	"syscall"
	"unsafe"
)

func main() {
	// PTRACE_CONT on itself: the kernel answers ESRCH (it is not traced),
	// a filter EPERM. (PTRACE_TRACEME would make this Go program a tracee
	// of the shell: its first runtime signal — a preemption under load —
	// would stop it for good, and the probe would hang.)
	_, _, e := syscall.RawSyscall6(syscall.SYS_PTRACE, syscall.PTRACE_CONT, uintptr(syscall.Getpid()), 0, 0, 0, 0)
	fmt.Printf("ptrace=%d\n", int(e))
	var params [128]byte
	_, _, e = syscall.RawSyscall(425, 1, uintptr(unsafe.Pointer(&params[0])), 0) // io_uring_setup
	fmt.Printf("io_uring_setup=%d\n", int(e))
	_, _, e = syscall.RawSyscall(syscall.SYS_UNSHARE, syscall.CLONE_NEWUSER, 0, 0)
	fmt.Printf("unshare=%d\n", int(e))
	for _, f := range []struct {
		name string
		family int
	}{{"vsock", 40}, {"packet", 17}, {"alg", 38}, {"unix", 1}, {"inet", 2}, {"inet6", 10}, {"netlink", 16}} {
		typ := syscall.SOCK_STREAM
		if f.family == 16 || f.family == 17 {
			typ = syscall.SOCK_RAW
		}
		if f.family == 38 {
			typ = syscall.SOCK_SEQPACKET
		}
		fd, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(f.family), uintptr(typ), 0)
		if e == 0 {
			syscall.Close(int(fd))
		}
		fmt.Printf("socket_%s=%d\n", f.name, int(e))
	}
	var local [8]byte
	iov := [2]uintptr{uintptr(unsafe.Pointer(&local[0])), 8}
	riov := [2]uintptr{uintptr(unsafe.Pointer(&params[0])), 8}
	_, _, e = syscall.RawSyscall6(310, uintptr(syscall.Getpid()), uintptr(unsafe.Pointer(&iov)), 1, uintptr(unsafe.Pointer(&riov)), 1, 0) // process_vm_readv
	fmt.Printf("process_vm_readv=%d\n", int(e))
}
`

// The project's profile is the default: with no profile named, a sandbox
// refuses ptrace, io_uring, process_vm_readv, user namespaces and socket
// families other than unix, inet, inet6 and netlink (AF_VSOCK, AF_PACKET,
// AF_ALG), while ordinary work — the toolbox, a shell, git with glibc —
// still runs. The control is the same probe under the engine's profile
// (sandbox.seccomp: default), where the same calls succeed.
func TestStrictSeccompProfile(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		skipSeccompUnderGVisor(t)
		ws := t.TempDir()
		strict := m.New(t, sandbox.Spec{Workspace: ws, Image: sandboxtest.SandboxImage})
		probe := buildProbe(t, ws, "sysprobe", syscallProbe)
		if err := os.Chmod(probe, 0o755); err != nil {
			t.Fatal(err)
		}

		if r := tool(t, strict, "write_file", map[string]any{"path": "f.txt", "content": "hi\n"}); r.IsError {
			t.Fatalf("write_file under the strict profile: %+v", r)
		}
		if r := tool(t, strict, "read_file", map[string]any{"path": "f.txt"}); r.IsError || !strings.Contains(r.Output, "hi") {
			t.Fatalf("read_file under the strict profile: %+v", r)
		}
		work := `set -e; cd /tmp; mkfifo p; ls / >/dev/null; grep -c hi /workspace/f.txt >/dev/null; ` +
			`find /usr/bin -name git >/dev/null; git init -q r; cd r; echo x > x; git add x; ` +
			`git -c user.email=a@b.c -c user.name=n commit -q -m m; git log --oneline | wc -l; sleep 0.1 & wait; echo WORK-OK`
		if r := sh(t, strict, work); !strings.Contains(r.Output, "WORK-OK") {
			t.Errorf("ordinary work under the strict profile failed: %+v", r)
		}
		const eperm, eafnosupport = "1", "97"
		r := sh(t, strict, "/workspace/sysprobe")
		for k, want := range map[string]string{
			"ptrace": eperm, "io_uring_setup": eperm, "unshare": eperm, "process_vm_readv": eperm,
			"socket_vsock": eafnosupport, "socket_packet": eafnosupport, "socket_alg": eafnosupport,
			"socket_unix": "0", "socket_inet": "0", "socket_inet6": "0", "socket_netlink": "0",
		} {
			if got := field(t, r.Output, k); got != want {
				t.Errorf("default (project) profile: %s = %s, want %s", k, got, want)
			}
		}

		plain := m.New(t, sandbox.Spec{Workspace: ws, EngineSeccomp: true})
		r = sh(t, plain, "/workspace/sysprobe")
		// (process_vm_readv is refused by this engine's profile too, and
		// io_uring_setup by Podman's.)
		// ptrace reaches the kernel, which answers ESRCH (3): the probe
		// is not traced by itself.
		controls := map[string]string{"ptrace": "3", "io_uring_setup": "0", "socket_vsock": "0"}
		if e.Podman {
			delete(controls, "io_uring_setup")
		}
		for k, want := range controls {
			if got := field(t, r.Output, k); got != want {
				t.Errorf("control: %s under the engine's profile should reach the kernel (errno %s), got errno %s", k, want, got)
			}
		}
		t.Logf("engine's profile: %s", strings.ReplaceAll(strings.TrimSpace(r.Output), "\n", " "))
	})
}
