package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/localagent/agent/policy"
)

func testSpec(t *testing.T) Spec {
	t.Helper()
	s, err := Spec{Workspace: t.TempDir(), Toolbox: "/opt/agent-toolbox", Task: "t1", StateID: "st1",
		Labels: map[string]string{"x": "y", LabelManaged: "false", LabelKind: "other"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every hardening decision of the container spec, checked field by field.
func TestContainerConfigHardening(t *testing.T) {
	s := testSpec(t)
	cfg, hc, err := containerConfig(s, UserChoice{UID: 1000, GID: 1001})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 {
		t.Errorf("capabilities: drop %v add %v", hc.CapDrop, hc.CapAdd)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("no no-new-privileges in %v", hc.SecurityOpt)
	}
	profile, _ := json.Marshal(policy.StrictSeccomp())
	if !slices.Contains(hc.SecurityOpt, "seccomp="+string(profile)) {
		t.Errorf("security options %v: want the project's seccomp profile by default", hc.SecurityOpt)
	}
	for _, o := range hc.SecurityOpt {
		if strings.Contains(o, "unconfined") {
			t.Errorf("security option %q turns seccomp off", o)
		}
	}
	if hc.Privileged || !hc.ReadonlyRootfs || hc.NetworkMode != "none" || !cfg.NetworkDisabled {
		t.Errorf("privileged=%v readonly=%v network=%q disabled=%v", hc.Privileged, hc.ReadonlyRootfs, hc.NetworkMode, cfg.NetworkDisabled)
	}
	if hc.Init == nil || *hc.Init {
		t.Error("the engine's docker-init is on (or left to the daemon's default): the toolbox must be the container's init")
	}
	if hc.PidMode != "" || hc.UTSMode != "" || hc.UsernsMode != "" || hc.IpcMode != "private" || hc.CgroupnsMode != "private" {
		t.Errorf("namespaces: pid=%q uts=%q userns=%q ipc=%q cgroupns=%q", hc.PidMode, hc.UTSMode, hc.UsernsMode, hc.IpcMode, hc.CgroupnsMode)
	}
	d := policy.DefaultLimits()
	if hc.Memory != d.MemoryBytes || hc.MemorySwap != d.MemoryBytes || hc.NanoCPUs != d.NanoCPUs || hc.PidsLimit == nil || *hc.PidsLimit != d.Pids {
		t.Errorf("limits: %+v", hc.Resources)
	}
	if cfg.User != "1000:1001" || cfg.WorkingDir != "/workspace" || !slices.Contains(cfg.Env, "HOME="+HomeDir) {
		t.Errorf("user %q workdir %q env %v", cfg.User, cfg.WorkingDir, cfg.Env)
	}
	if !slices.Equal(cfg.Entrypoint, []string{ToolboxPath}) || !slices.Equal(cfg.Cmd, []string{"idle"}) {
		t.Errorf("main process %v %v", cfg.Entrypoint, cfg.Cmd)
	}
	if len(hc.Binds) != 0 || len(hc.VolumesFrom) != 0 || len(hc.Devices) != 0 || len(hc.DeviceRequests) != 0 {
		t.Errorf("extra host access: binds %v volumes-from %v devices %v", hc.Binds, hc.VolumesFrom, hc.Devices)
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: s.Workspace, Target: "/workspace"},
		{Type: mount.TypeBind, Source: "/opt/agent-toolbox", Target: ToolboxPath, ReadOnly: true},
	}
	if !slices.Equal(hc.Mounts, want) {
		t.Errorf("mounts %+v, want %+v", hc.Mounts, want)
	}
	if tmp := hc.Tmpfs[TmpDir]; !strings.Contains(tmp, "size=") || !strings.Contains(tmp, "nosuid") || !strings.Contains(tmp, ",exec,") {
		t.Errorf("/tmp tmpfs options %q", tmp)
	}
	if home := hc.Tmpfs[HomeDir]; !strings.Contains(home, "uid=1000") || !strings.Contains(home, "gid=1001") || !strings.Contains(home, "size=") {
		t.Errorf("home tmpfs options %q", home)
	}
	wantLabels := map[string]string{
		LabelManaged: "true", LabelKind: "sandbox", LabelWorkspace: s.Workspace,
		LabelTask: "t1", LabelState: "st1", LabelUser: "1000:1001", "x": "y",
	}
	for k, v := range wantLabels {
		if cfg.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], v)
		}
	}
}

func TestContainerConfigSeccompProfile(t *testing.T) {
	s := testSpec(t)
	s.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}
	_, hc, err := containerConfig(s, UserChoice{UID: 1, GID: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, o := range hc.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") {
			got = o
		}
	}
	if !strings.Contains(got, `"defaultAction":"SCMP_ACT_ERRNO"`) || !strings.Contains(got, `"names":["read"]`) {
		t.Errorf("seccomp option %q", got)
	}
}

// The opt-out keeps the engine's own profile: no seccomp option at all,
// and never "unconfined".
func TestContainerConfigEngineSeccomp(t *testing.T) {
	s := testSpec(t)
	s.EngineSeccomp = true
	_, hc, err := containerConfig(s, UserChoice{UID: 1, GID: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range hc.SecurityOpt {
		if strings.HasPrefix(o, "seccomp") {
			t.Errorf("security option %q with EngineSeccomp", o)
		}
	}
}

func TestChooseUser(t *testing.T) {
	cases := []struct {
		caller, owner [2]int
		want          UserChoice
	}{
		{[2]int{1000, 1000}, [2]int{0, 0}, UserChoice{UID: 1000, GID: 1000}},
		{[2]int{1000, 100}, [2]int{1000, 100}, UserChoice{UID: 1000, GID: 100}},
		{[2]int{0, 0}, [2]int{1001, 1002}, UserChoice{UID: 1001, GID: 1002}},
		{[2]int{0, 0}, [2]int{0, 0}, UserChoice{UID: NobodyUID, GID: NobodyUID, Chown: true}},
	}
	for _, c := range cases {
		if got := ChooseUser(c.caller[0], c.caller[1], c.owner[0], c.owner[1]); got != c.want {
			t.Errorf("ChooseUser(caller %v, owner %v) = %+v, want %+v", c.caller, c.owner, got, c.want)
		}
	}
}

func TestSpecValidation(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Toolbox: "/x"}, "no workspace"},
		{Spec{Workspace: filepath.Join(dir, "missing"), Toolbox: "/x"}, "does not exist"},
		{Spec{Workspace: file, Toolbox: "/x"}, "not a directory"},
		{Spec{Workspace: "/", Toolbox: "/x"}, "refusing to mount /"},
		{Spec{Workspace: dir}, "no toolbox"},
		{Spec{Workspace: dir, Toolbox: "/x", User: "root"}, "numeric"},
	} {
		if _, err := c.spec.withDefaults(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.spec, err, c.want)
		}
	}
	sock := filepath.Join(dir, "run", "docker.sock")
	if err := refuseSocketParent(dir, "unix://"+sock); err == nil {
		t.Error("a workspace holding the docker socket was accepted")
	}
	if err := refuseSocketParent(filepath.Join(dir, "ws"), "unix://"+sock); err != nil {
		t.Error(err)
	}
}

func TestSeccompEnabled(t *testing.T) {
	for opts, want := range map[string]bool{
		"name=seccomp,profile=default":                 true,
		"name=apparmor|name=seccomp,profile=builtin":   true,
		"name=seccomp,profile=unconfined":              false,
		"name=apparmor|name=userns":                    false,
		"":                                             false,
		"name=seccomp,profile=/etc/docker/strict.json": true,
	} {
		if got := SeccompEnabled(strings.Split(opts, "|")); got != want {
			t.Errorf("SeccompEnabled(%q) = %v", opts, got)
		}
	}
}

func TestCheckToolbox(t *testing.T) {
	dir := t.TempDir()
	if err := CheckToolbox(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("missing: %v", err)
	}
	script := filepath.Join(dir, "script")
	_ = os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if err := CheckToolbox(script); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("script: %v", err)
	}
	// The test binary itself is dynamically linked or static depending on
	// the toolchain; /bin/sh on Debian is always dynamic.
	if err := CheckToolbox("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("/bin/sh: %v", err)
	}
	if _, err := os.Stat("/bin/busybox"); err == nil {
		if err := CheckToolbox("/bin/busybox"); err != nil {
			t.Errorf("static busybox refused: %v", err)
		}
	}
	t.Setenv(ToolboxEnv, filepath.Join(dir, "nope"))
	if _, err := FindToolbox(""); err == nil || !strings.Contains(err.Error(), ToolboxEnv) {
		t.Errorf("FindToolbox with a bad $%s: %v", ToolboxEnv, err)
	}
}

func TestChownAllowed(t *testing.T) {
	t.Setenv("HOME", "/home/someone")
	for ws, ok := range map[string]bool{
		"/": false, "/root": false, "/etc": false, "/home": false, "/home/someone": false,
		"/home/someone/project": true, "/srv/repos/app": true, t.TempDir(): true,
	} {
		if err := chownAllowed(ws); (err == nil) != ok {
			t.Errorf("chownAllowed(%s) = %v", ws, err)
		}
	}
}
