package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestResolveRuntime(t *testing.T) {
	docker := &Engine{Host: "unix:///run/docker.sock", DefaultRuntime: "runc", Runtimes: []string{"runc", "io.containerd.runc.v2"}}
	dockerGVisor := &Engine{Host: "unix:///run/docker.sock", DefaultRuntime: "runc", Runtimes: []string{"runc", "runsc"}}
	gvisorDefault := &Engine{Host: "unix:///run/docker.sock", DefaultRuntime: "runsc", Runtimes: []string{"runc", "runsc"}}
	podman := &Engine{Host: "unix:///run/podman.sock", Podman: true, DefaultRuntime: "runc", Runtimes: []string{"crun", "runc", "runsc"}}
	podmanGVisor := &Engine{Host: "unix:///run/podman.sock", Podman: true, DefaultRuntime: "runsc", Runtimes: []string{"crun", "runc", "runsc"}}
	for _, c := range []struct {
		name    string
		e       *Engine
		iso     Isolation
		runtime string
		want    string
		ok      bool
	}{
		{"docker runc", docker, IsolationRunc, "", "", true},
		{"docker runsc missing", docker, IsolationRunsc, "", "", false},
		{"docker runsc", dockerGVisor, IsolationRunsc, "", "runsc", true},
		{"docker runsc other name", dockerGVisor, IsolationRunsc, "runsc-kvm", "", false},
		{"docker raw runtime", dockerGVisor, IsolationRunc, "io.containerd.runc.v2", "", false},
		{"docker gvisor default, runc named", gvisorDefault, IsolationRunc, "", "runc", true},
		// Podman lists every runtime it knows of but runs its default.
		{"podman runsc listed, not default", podman, IsolationRunsc, "", "", false},
		{"podman runc", podman, IsolationRunc, "", "", true},
		{"podman runsc default", podmanGVisor, IsolationRunsc, "", "", true},
		{"podman runc on a gvisor service", podmanGVisor, IsolationRunc, "", "", false},
	} {
		got, ok := c.e.resolveRuntime(c.iso, c.runtime)
		if ok != c.ok || ok && got != c.want {
			t.Errorf("%s: got %q %v, want %q %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if got := podman.OfferedIsolations(); len(got) != 1 || got[0] != IsolationRunc {
		t.Errorf("podman offers %v", got)
	}
	if got := dockerGVisor.OfferedIsolations(); len(got) != 2 {
		t.Errorf("docker with runsc offers %v", got)
	}
}

func TestIsolationErrorAdvice(t *testing.T) {
	docker := &Engine{Host: "unix:///run/docker.sock", DefaultRuntime: "runc", Runtimes: []string{"runc"}}
	_, err := docker.checkIsolation(Spec{Isolation: IsolationRunsc})
	var ie *IsolationError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), `"runtimeArgs": ["--network=none", "--host-uds=open"]`) || !strings.Contains(err.Error(), "daemon.json") {
		t.Errorf("docker without runsc: %v", err)
	}
	podman := &Engine{Host: "unix:///run/podman.sock", Podman: true, DefaultRuntime: "crun"}
	if _, err := podman.checkIsolation(Spec{Isolation: IsolationRunsc}); err == nil || !strings.Contains(err.Error(), "containers.conf") {
		t.Errorf("podman without runsc as default: %v", err)
	}
	if _, err := ParseIsolation("kata"); err == nil {
		t.Error("isolation kata accepted")
	}
}

// Under runsc the request names gVisor's runtime, labels the isolation, and
// bounds processes inside gVisor (RLIMIT_NPROC) with a pids cgroup wide
// enough for gVisor's host threads; under runc the pids cgroup is the
// limit itself and no nproc rlimit is set (it would count the uid's
// processes across every container).
func TestContainerConfigIsolation(t *testing.T) {
	s := testSpec(t)
	_, hc, err := containerConfig(s, UserChoice{UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if hc.Runtime != "" || *hc.PidsLimit != s.Limits.Pids || len(hc.Ulimits) != 0 || s.SandboxLabels(UserChoice{})[LabelIsolation] != "runc" {
		t.Errorf("runc: runtime %q pids %d ulimits %v", hc.Runtime, *hc.PidsLimit, hc.Ulimits)
	}
	s.Isolation = IsolationRunsc
	_, hc, err = containerConfig(s, UserChoice{UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if hc.Runtime != "runsc" || *hc.PidsLimit != s.Limits.Pids*16+256 || s.SandboxLabels(UserChoice{})[LabelIsolation] != "runsc" {
		t.Errorf("runsc: runtime %q pids %d", hc.Runtime, *hc.PidsLimit)
	}
	if len(hc.Ulimits) != 1 || hc.Ulimits[0].Name != "nproc" || hc.Ulimits[0].Hard != s.Limits.Pids || hc.Ulimits[0].Soft != s.Limits.Pids {
		t.Errorf("runsc: ulimits %+v, want nproc = %d", hc.Ulimits, s.Limits.Pids)
	}
}
