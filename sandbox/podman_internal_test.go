package sandbox

import (
	"testing"

	"github.com/docker/docker/api/types/container"
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
