package sandbox

import (
	"fmt"
	"slices"
	"strings"
)

// Isolation is the kind of boundary between a sandbox's processes and the
// host kernel.
type Isolation string

const (
	// IsolationRunc runs the sandbox as ordinary Linux processes in
	// namespaces and cgroups (runc, or any runtime of that kind), confined
	// by capabilities, no-new-privileges and the seccomp profile: every
	// system call the profile allows reaches the host kernel.
	IsolationRunc Isolation = "runc"
	// IsolationRunsc runs the sandbox under gVisor (runsc): its system
	// calls are served by gVisor's user-space kernel, which itself makes a
	// small, filtered set of host calls, so a host kernel bug reachable
	// from a system call is much harder to use. It costs start-up time and
	// slower system calls and file access.
	IsolationRunsc Isolation = "runsc"
)

// Isolations are the values ParseIsolation accepts.
var Isolations = []Isolation{IsolationRunc, IsolationRunsc}

// ParseIsolation checks an isolation name; "" is IsolationRunc.
func ParseIsolation(s string) (Isolation, error) {
	switch Isolation(s) {
	case "", IsolationRunc:
		return IsolationRunc, nil
	case IsolationRunsc:
		return IsolationRunsc, nil
	}
	return "", fmt.Errorf("isolation %q: want runc (namespaces, seccomp: the default) or runsc (gVisor)", s)
}

// gVisor's default (ptrace) platform runs every sandbox process with host
// threads of its own, about 8 to 10 of them measured here, plus a few dozen
// for gVisor itself; the pids cgroup counts those host threads. A sandbox
// under runsc therefore gets a pids cgroup this many times its process
// limit (plus runscHostThreadsBase), and its own processes are bounded
// inside gVisor's kernel by RLIMIT_NPROC, which there counts this sandbox's
// processes only (the sandbox has a kernel of its own). With the plain
// limit, a few dozen processes would exhaust the cgroup and end the whole
// sandbox instead of failing one fork.
const (
	runscHostThreadsPerProcess = 16
	runscHostThreadsBase       = 256
)

// PidsCgroupLimit is the pids cgroup limit of a sandbox with isolation i
// whose processes are limited to pids.
func PidsCgroupLimit(i Isolation, pids int64) int64 {
	if i == IsolationRunsc {
		return pids*runscHostThreadsPerProcess + runscHostThreadsBase
	}
	return pids
}

// DefaultRunscRuntime is the engine runtime name a runsc sandbox asks for
// when Spec.Runtime names none.
const DefaultRunscRuntime = "runsc"

// RuntimeName is the runtime a sandbox of s asks for: Spec.Runtime, or
// DefaultRunscRuntime for a runsc sandbox; "" is the backend's default.
func (s Spec) RuntimeName() string {
	if s.Runtime == "" && s.Isolation == IsolationRunsc {
		return DefaultRunscRuntime
	}
	return s.Runtime
}

// resolveRuntime is the runtime a create request for isolation i names
// (runtime is Spec.Runtime), and whether the engine can give i at all. A
// Docker engine honours the runtime a request names, so it offers runsc
// when a runtime of that name is registered. Podman's Docker-compatible API
// ignores the name and runs every container with the service's default
// runtime, so a Podman service offers the one isolation its default gives.
func (e *Engine) resolveRuntime(i Isolation, runtime string) (string, bool) {
	if runtime == "" && i == IsolationRunsc {
		runtime = DefaultRunscRuntime
	}
	gvisorDefault := e.DefaultRuntime == DefaultRunscRuntime
	if e.Podman {
		if i == IsolationRunsc {
			return "", e.DefaultRuntime == runtime
		}
		return "", !gvisorDefault && (runtime == "" || runtime == e.DefaultRuntime)
	}
	if runtime == "" && gvisorDefault {
		// The daemon's default is gVisor: runc has to be named.
		runtime = "runc"
	}
	return runtime, runtime == "" || slices.Contains(e.Runtimes, runtime)
}

// Offers reports whether e can run sandboxes with isolation i (runtime is
// Spec.Runtime, "" for the default name).
func (e *Engine) Offers(i Isolation, runtime string) bool {
	_, ok := e.resolveRuntime(i, runtime)
	return ok
}

// OfferedIsolations lists the isolations e offers under their default
// runtime names (for doctor).
func (e *Engine) OfferedIsolations() []Isolation {
	var out []Isolation
	for _, i := range Isolations {
		if e.Offers(i, "") {
			out = append(out, i)
		}
	}
	return out
}

// CheckIsolation returns an *IsolationError when e cannot run sandboxes
// with isolation i (runtime is Spec.Runtime), so a caller can fail before
// it makes anything.
func (e *Engine) CheckIsolation(i Isolation, runtime string) error {
	_, err := e.checkIsolation(Spec{Isolation: i, Runtime: runtime})
	return err
}

// checkIsolation returns the runtime a create request for s names, or an
// *IsolationError when the engine cannot give s its isolation.
func (e *Engine) checkIsolation(s Spec) (string, error) {
	rt, ok := e.resolveRuntime(s.Isolation, s.Runtime)
	if !ok {
		return "", &IsolationError{Isolation: s.Isolation, Runtime: s.RuntimeName(), Host: e.Host, Podman: e.Podman,
			Default: e.DefaultRuntime, Have: slices.Sorted(slices.Values(e.Runtimes))}
	}
	return rt, nil
}

// IsolationError says that the engine cannot run a sandbox with the
// isolation asked for, and how to make it able to.
type IsolationError struct {
	Isolation Isolation
	// Runtime is the engine runtime that was looked for ("" the default).
	Runtime string
	Host    string
	Podman  bool
	// Default is the engine's default runtime; Have its registered ones.
	Default string
	Have    []string
}

func (e *IsolationError) Error() string {
	rt := e.Runtime
	if rt == "" {
		rt = "(default)"
	}
	var b strings.Builder
	switch {
	case e.Podman && e.Isolation == IsolationRunsc:
		fmt.Fprintf(&b, "isolation runsc (gVisor) asked for, but the Podman service at %s runs every container with its default runtime %q (its Docker-compatible API ignores the runtime a request names): ", e.Host, e.Default)
		b.WriteString(`start a Podman service for gVisor sandboxes whose containers.conf (CONTAINERS_CONF) has [engine] runtime = "runsc" and [engine.runtimes] runsc = ["/usr/local/bin/runsc-nonet"], a two-line script running ` +
			"`exec /usr/bin/runsc --network=none --host-uds=open \"$@\"`" + `, and point DOCKER_HOST at it (README: Isolation)`)
	case e.Podman:
		fmt.Fprintf(&b, "isolation %s asked for, but the Podman service at %s runs every container with its default runtime %q (its Docker-compatible API ignores the runtime a request names): pass --isolation runsc, or point DOCKER_HOST at a service whose default runtime is runc or crun", e.Isolation, e.Host, e.Default)
	case e.Isolation == IsolationRunsc:
		fmt.Fprintf(&b, "isolation runsc (gVisor) asked for, but the Docker engine at %s has no runtime %s (it has %s): install gVisor's runsc and register it in /etc/docker/daemon.json, ", e.Host, rt, strings.Join(e.Have, ", "))
		b.WriteString(`"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--host-uds=open"]}}, then restart Docker (README: Isolation); or use --isolation runc`)
	default:
		fmt.Fprintf(&b, "runtime %s is not registered with the Docker engine at %s (it has %s): add it to \"runtimes\" in /etc/docker/daemon.json and restart the engine, or unset sandbox.runtime", rt, e.Host, strings.Join(e.Have, ", "))
	}
	return b.String()
}
