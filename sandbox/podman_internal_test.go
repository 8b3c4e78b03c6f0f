package sandbox

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox/toolbox"
)

// Podman 4.3 rejects tmpfs uid=/gid=; "U" hands the mount to the container
// user, and keep-id maps the caller's uid to itself so that the workspace
// stays writable under a rootless user namespace.
func TestPodmanHostConfig(t *testing.T) {
	hc := &container.HostConfig{Tmpfs: map[string]string{
		HomeDir: "rw,nosuid,nodev,size=64m,mode=0700,uid=1000,gid=1000",
		"/tmp":  "rw,nosuid,nodev,size=64m",
	}}
	podmanHostConfig(hc, true)
	if got := hc.Tmpfs[HomeDir]; got != "rw,nosuid,nodev,size=64m,mode=0700,U" {
		t.Errorf("home tmpfs: %q", got)
	}
	if got := hc.Tmpfs["/tmp"]; got != "rw,nosuid,nodev,size=64m" {
		t.Errorf("/tmp changed: %q", got)
	}
	if hc.UsernsMode != "keep-id" {
		t.Errorf("userns %q", hc.UsernsMode)
	}
	rootful := &container.HostConfig{}
	podmanHostConfig(rootful, false)
	if rootful.UsernsMode != "" {
		t.Errorf("rootful podman: userns %q (keep-id is rootless only)", rootful.UsernsMode)
	}
}

// Podman reads "seccomp=" as a file path: an inline profile is written to
// a file (named by its content) and the option names that file.
func TestPodmanSeccompProfileByPath(t *testing.T) {
	dir := t.TempDir()
	old := seccompDir
	seccompDir = func() string { return dir }
	t.Cleanup(func() { seccompDir = old })
	profile := `{"defaultAction":"SCMP_ACT_ERRNO"}`
	hc := &container.HostConfig{SecurityOpt: []string{"no-new-privileges:true", "seccomp=" + profile}}
	if err := podmanHostConfig(hc, true); err != nil {
		t.Fatal(err)
	}
	path, ok := strings.CutPrefix(hc.SecurityOpt[1], "seccomp=")
	if !ok || !strings.HasPrefix(path, dir+"/") {
		t.Fatalf("security options %v", hc.SecurityOpt)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != profile {
		t.Fatalf("profile file: %q %v", b, err)
	}
	if hc.SecurityOpt[0] != "no-new-privileges:true" {
		t.Errorf("other options changed: %v", hc.SecurityOpt)
	}
}

// What a Podman engine can enforce comes from its own info: rootless on
// cgroup v1 has neither a freezer nor limits; rootless on v2 with systemd
// and delegated controllers has both; rootful always has both.
func TestApplyPodmanHost(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		h                    podmanHost
		rootless, sig, nolim bool
	}{
		{"rootless v1", podmanHost{CgroupVersion: "v1", CgroupManager: "cgroupfs"}, true, true, true},
		{"rootless v2 delegated", podmanHost{CgroupVersion: "v2", CgroupManager: "systemd", CgroupControllers: []string{"cpu", "memory", "pids"}}, true, false, false},
		{"rootless v2 undelegated", podmanHost{CgroupVersion: "v2", CgroupManager: "systemd", CgroupControllers: []string{"cpu"}}, true, false, true},
		{"rootless v2 cgroupfs", podmanHost{CgroupVersion: "v2", CgroupManager: "cgroupfs", CgroupControllers: []string{"memory", "pids"}}, true, true, true},
		{"rootful v1", podmanHost{CgroupVersion: "v1", CgroupManager: "cgroupfs"}, false, false, false},
	} {
		tc.h.Security.Rootless = tc.rootless
		e := &Engine{Podman: true}
		e.applyPodmanHost(tc.h)
		if e.Rootless != tc.rootless || e.SignalFreeze != tc.sig || e.NoCgroupLimits != tc.nolim {
			t.Errorf("%s: rootless %v signal freeze %v no limits %v", tc.name, e.Rootless, e.SignalFreeze, e.NoCgroupLimits)
		}
	}
}

// Without cgroup limits, the rlimits that can stand in are set and the
// notice says plainly what is not limited.
func TestRlimitFallback(t *testing.T) {
	cfg := &container.Config{}
	n := rlimitFallback(cfg, policy.Limits{MemoryBytes: 1 << 30, NanoCPUs: 2e9, Pids: 100})
	if !slices.Contains(cfg.Env, toolbox.RlimitsEnv+"=nproc:100") {
		t.Errorf("env %v", cfg.Env)
	}
	for _, want := range []string{"NOT limited", "memory (1GiB)", "CPU (2)", "capped at 100"} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q does not say %q", n, want)
		}
	}
}
