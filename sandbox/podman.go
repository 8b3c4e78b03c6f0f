package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox/toolbox"
)

// podmanHost is the part of Podman's own info (GET /libpod/info) that its
// Docker-compatible info leaves out or gets wrong.
type podmanHost struct {
	CgroupVersion     string   `json:"cgroupVersion"` // "v1" or "v2"
	CgroupManager     string   `json:"cgroupManager"` // "systemd" or "cgroupfs"
	CgroupControllers []string `json:"cgroupControllers"`
	Security          struct {
		Rootless bool `json:"rootless"`
	} `json:"security"`
}

// podmanInfoer is implemented by test fakes; a real client is asked over
// its own HTTP connection.
type podmanInfoer interface {
	PodmanHost(ctx context.Context) (podmanHost, error)
}

// podmanHostInfo asks a Podman service for its libpod info.
func podmanHostInfo(ctx context.Context, api engine) (podmanHost, error) {
	var h podmanHost
	if p, ok := api.(podmanInfoer); ok {
		return p.PodmanHost(ctx)
	}
	c, ok := api.(*client.Client)
	if !ok {
		return h, errors.New("not a Podman client")
	}
	// The client's transport dials the engine's socket whatever the URL's
	// host; the path is Podman's native API, present since 4.0.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://podman/v4.0.0/libpod/info", nil)
	if err != nil {
		return h, err
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("libpod info: %s", resp.Status)
	}
	var body struct {
		Host podmanHost `json:"host"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return h, fmt.Errorf("libpod info: %w", err)
	}
	return body.Host, nil
}

// applyPodmanHost records what a Podman engine can enforce. A rootless
// Podman creates no cgroup of its own for a container on cgroup v1, and
// on v2 only with systemd as the cgroup manager: without one there is no
// freezer (pause fails), and without delegated memory and pids
// controllers the limits are accepted and ignored.
func (e *Engine) applyPodmanHost(h podmanHost) {
	if h.Security.Rootless {
		e.Rootless = true
	}
	if v := strings.TrimPrefix(h.CgroupVersion, "v"); v != "" {
		e.CgroupVersion = v
	}
	if !e.Rootless {
		return
	}
	v1 := e.CgroupVersion == "1"
	e.SignalFreeze = v1 || h.CgroupManager != "systemd"
	e.NoCgroupLimits = e.SignalFreeze ||
		!slices.Contains(h.CgroupControllers, "memory") || !slices.Contains(h.CgroupControllers, "pids")
}

// podmanHostConfig adapts a create request to Podman's Docker-compatible
// API: Podman 4.3 rejects tmpfs "uid="/"gid=" options, and its "U" option
// gives the mount to the container's user instead; it reads "seccomp=" as
// the path of a profile file, not the profile itself, so an inline profile
// is written to a file first (seccompDir).
//
// Rootless, the engine's user namespace maps container uid N to a
// subordinate id, so a workspace owned by the caller would be read-only to
// the sandbox user; "keep-id" maps the caller's uid to itself.
func podmanHostConfig(hc *container.HostConfig, rootless bool) error {
	if rootless && hc.UsernsMode == "" {
		hc.UsernsMode = "keep-id"
	}
	for target, opts := range hc.Tmpfs {
		var kept []string
		owned := false
		for _, o := range strings.Split(opts, ",") {
			if strings.HasPrefix(o, "uid=") || strings.HasPrefix(o, "gid=") {
				owned = true
				continue
			}
			kept = append(kept, o)
		}
		if owned {
			kept = append(kept, "U")
		}
		hc.Tmpfs[target] = strings.Join(kept, ",")
	}
	for i, o := range hc.SecurityOpt {
		profile, ok := strings.CutPrefix(o, "seccomp=")
		if !ok || !strings.HasPrefix(profile, "{") {
			continue
		}
		path, err := seccompFile([]byte(profile))
		if err != nil {
			return fmt.Errorf("seccomp profile for Podman: %w", err)
		}
		hc.SecurityOpt[i] = "seccomp=" + path
	}
	return nil
}

// seccompDir is where profiles handed to Podman by path are kept; a
// variable so that tests can move it.
var seccompDir = func() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "agent", "seccomp")
}

// seccompFile writes profile to a file named by its hash (so concurrent
// creates and later ones share it, and it never changes under a container
// being created) and returns its path. Podman reads it when the container
// is created, from the same host: a Podman reached over the network
// cannot be given a profile this way.
func seccompFile(profile []byte) (string, error) {
	sum := sha256.Sum256(profile)
	dir := seccompDir()
	path := filepath.Join(dir, "profile-"+hex.EncodeToString(sum[:12])+".json")
	if b, err := os.ReadFile(path); err == nil && string(b) == string(profile) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".profile-*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(profile)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return path, nil
}

// rlimitFallback stands in, as far as rlimits can, for the cgroup limits
// an engine with NoCgroupLimits ignores, and returns what the user must be
// told. Podman's Docker-compatible API drops HostConfig.Ulimits, so the
// toolbox sets the limit on itself (toolbox.RlimitsEnv) and every command
// it runs inherits it; a process started by a bare exec (agent sandbox
// exec, a shell) does not. RLIMIT_NPROC counts processes and threads per
// uid *per user namespace*: rootless Podman gives each keep-id container a
// namespace of its own, so the cap is per sandbox, like the pids cgroup
// (under Docker, with no user namespace, it would count the user's
// processes across every container and the host, which is why it is not
// used there). Memory has no rlimit that stands in: RLIMIT_DATA and
// RLIMIT_AS bound one process, not the sandbox, and break Go programs (the
// toolbox among them), whose runtime maps large regions up front. Nothing
// bounds the CPU share.
func rlimitFallback(cfg *container.Config, l policy.Limits) string {
	cfg.Env = append(cfg.Env, fmt.Sprintf("%s=nproc:%d", toolbox.RlimitsEnv, l.Pids))
	return fmt.Sprintf("the container engine cannot apply cgroup limits (%s): the sandbox's memory (%s) and CPU (%g) are NOT limited; "+
		"the agent's commands are capped at %d processes (RLIMIT_NPROC); see docs/engines.md",
		NoCgroupLimitsReason, formatBytes(l.MemoryBytes), float64(l.NanoCPUs)/1e9, l.Pids)
}

// NoCgroupLimitsReason names the usual cause of Engine.NoCgroupLimits.
const NoCgroupLimitsReason = "rootless Podman without a delegated cgroup v2"

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}

func joinNotice(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
