package sandbox

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/localagent/agent/sandbox/egress"
)

// Egress inside a sandbox (see package sandbox/egress for the host side).
const (
	// EgressDir is where the host-side proxy's socket directory is mounted
	// (read-only: connecting to a unix socket needs no write access to the
	// mount, and the sandbox must not replace the socket).
	EgressDir = "/.agent/egress"
	// EgressListen is the container-loopback address the toolbox's idle
	// process relays to the proxy socket.
	EgressListen = "127.0.0.1:3128"
	// EgressProxyURL is what the proxy environment variables point at.
	EgressProxyURL = "http://" + EgressListen
)

// EgressSocket is the proxy socket's path inside the sandbox.
var EgressSocket = path.Join(EgressDir, egress.SocketName)

// EgressEnv is the environment that sends proxy-aware tools (curl, wget,
// git, pip, npm, go) through the forwarder. NO_PROXY is set empty so that
// no destination skips the proxy (a skipped one fails anyway: there is no
// route). Proxy-unaware tools, DNS lookups and raw sockets fail closed.
func EgressEnv() []string {
	env := make([]string, 0, len(proxyVars)+2)
	for _, k := range proxyVars {
		env = append(env, k+"="+EgressProxyURL)
	}
	return append(env, "NO_PROXY=", "no_proxy=")
}

var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}

// ApplyEgress wires a sandbox's create request to the host-side egress
// proxy whose socket directory is hostDir (egress.Proxy.Dir): it mounts the
// directory read-only at EgressDir, sets EgressEnv (replacing any proxy
// variables already there) and makes the toolbox's idle main process relay
// EgressListen to the socket. It is pure: it only edits cfg and hc.
//
// The network stays off: ApplyEgress refuses a host config whose
// NetworkMode is not "none", because a proxy beside a real network would be
// advice, not a boundary. cfg.NetworkDisabled is left as it is: measured on
// Engine 20.10, a container with it set still has an up loopback (127.0.0.1
// and ::1) for the forwarder, and nothing else.
func ApplyEgress(cfg *container.Config, hc *container.HostConfig, hostDir string) error {
	if cfg == nil || hc == nil {
		return errors.New("egress: no container config")
	}
	if hostDir == "" || !filepath.IsAbs(hostDir) {
		return fmt.Errorf("egress: proxy socket directory %q must be an absolute host path", hostDir)
	}
	if hc.NetworkMode != "none" {
		return fmt.Errorf("egress: refusing to wire the proxy into a container with network mode %q; sandboxes with egress keep network mode none", hc.NetworkMode)
	}
	if !slices.Equal(cfg.Entrypoint, []string{ToolboxPath}) || !slices.Equal(cfg.Cmd, []string{"idle"}) {
		return fmt.Errorf("egress: the main process must be %s idle (got %q %q)", ToolboxPath, cfg.Entrypoint, cfg.Cmd)
	}
	for _, m := range hc.Mounts {
		if m.Target == EgressDir {
			return fmt.Errorf("egress: %s is already mounted", EgressDir)
		}
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{
		// The directory, not the socket file: a proxy restarted by a
		// resumed orchestrator makes a new socket that a file bind would
		// not see.
		Type: mount.TypeBind, Source: filepath.Clean(hostDir), Target: EgressDir, ReadOnly: true,
	})
	env := slices.DeleteFunc(slices.Clone(cfg.Env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(proxyVars, k) || k == "NO_PROXY" || k == "no_proxy"
	})
	cfg.Env = append(env, EgressEnv()...)
	cfg.Cmd = []string{"idle", "-egress-listen", EgressListen, "-egress-socket", EgressSocket}
	return nil
}
