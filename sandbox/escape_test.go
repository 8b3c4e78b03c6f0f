package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

// A symlink in the workspace that points at a host path is followed inside
// the container: the tools see the container's file of that name, never the
// host's. Control: the host following the same link reads the host file.
func TestSymlinkToHostFileGivesContainerView(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		hostDir := t.TempDir()
		secret := filepath.Join(hostDir, "secret.txt")
		if err := os.WriteFile(secret, []byte("HOST-ONLY-SECRET\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ws := t.TempDir()
		for name, target := range map[string]string{"to-secret": secret, "to-hostname": "/etc/hostname"} {
			if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
				t.Fatal(err)
			}
		}
		sb := m.New(t, sandbox.Spec{Workspace: ws})

		r := tool(t, sb, toolbox.ToolReadFile, map[string]any{"path": "to-secret"})
		if strings.Contains(r.Output, "HOST-ONLY-SECRET") {
			t.Fatalf("read_file through a symlink reached the host file: %s", r.Output)
		}
		if !r.IsError {
			t.Errorf("read_file of a link to a path missing in the container did not fail: %s", r.Output)
		}
		r = tool(t, sb, toolbox.ToolReadFile, map[string]any{"path": "to-hostname"})
		if r.IsError || !strings.Contains(r.Output, "sandbox") {
			t.Errorf("read_file of a link to /etc/hostname: want the container's hostname, got %+v", r)
		}
		hostName, _ := os.ReadFile("/etc/hostname")
		if len(strings.TrimSpace(string(hostName))) > 0 && strings.Contains(r.Output, strings.TrimSpace(string(hostName))) && strings.TrimSpace(string(hostName)) != "sandbox" {
			t.Errorf("read_file returned the host's hostname: %s", r.Output)
		}
		// Control: the host following the link reads the secret, so the link
		// itself is a working attack.
		b, err := os.ReadFile(filepath.Join(ws, "to-secret"))
		if err != nil || !strings.Contains(string(b), "HOST-ONLY-SECRET") {
			t.Fatalf("control: host read through the link failed (%v), so the test proves nothing", err)
		}
	})
}

func TestDotDotPathRejected(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		sb := m.New(t, sandbox.Spec{})
		for _, tc := range []struct{ tool, path string }{
			{toolbox.ToolReadFile, "../etc/hostname"},
			{toolbox.ToolReadFile, "/etc/hostname"},
			{toolbox.ToolWriteFile, "../tmp/x"},
		} {
			r := tool(t, sb, tc.tool, map[string]any{"path": tc.path, "content": "x"})
			if !r.IsError || !strings.Contains(r.Output, "outside the workspace") {
				t.Errorf("%s %s: want a clear refusal, got %+v", tc.tool, tc.path, r)
			}
		}
		// Control: the path itself is reachable from /workspace, so only the
		// check stopped the tools.
		if r := sh(t, sb, "cat ../etc/hostname"); r.IsError || !strings.Contains(r.Output, "sandbox") {
			t.Errorf("control: cat ../etc/hostname in the sandbox: %+v", r)
		}
	})
}

// buildEUID builds a static program that prints its effective uid.
func buildEUID(t *testing.T, dir string) string {
	t.Helper()
	return buildProbe(t, dir, "euid", "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() { fmt.Printf(\"euid=%d\\n\", os.Geteuid()) }\n")
}

// buildProbe builds a static Go program from one source file into dir.
func buildProbe(t *testing.T, dir, name, prog string) string {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module "+name+"\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the %s probe: %v\n%s", name, err, b)
	}
	return out
}

// A setuid-root binary does not raise privileges in the sandbox
// (no-new-privileges); mount and mknod fail (no capabilities). The controls
// run the same attacks in containers without each defence.
func TestPrivilegeEscalationFails(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		if os.Geteuid() != 0 {
			t.Skip("making a setuid-root probe needs root on the host")
		}
		ws := t.TempDir()
		sb := m.New(t, sandbox.Spec{Workspace: ws})
		// Placed after Create, which hands the workspace to the sandbox user.
		probe := buildEUID(t, ws)
		if err := os.Chown(probe, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(probe, os.ModeSetuid|0o755); err != nil {
			t.Fatal(err)
		}

		r := sh(t, sb, "/workspace/euid")
		if strings.TrimSpace(r.Output) == "euid=0" || !strings.Contains(r.Output, "euid=") {
			t.Errorf("setuid probe in the sandbox: %q", r.Output)
		}
		r = sh(t, sb, "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo MOUNTED")
		if strings.Contains(r.Output, "MOUNTED") || exitCode(r) == 0 {
			t.Errorf("mount succeeded in the sandbox: %+v", r)
		}
		if sandboxtest.Isolation(t) == sandbox.IsolationRunsc {
			// gVisor lets anyone make a device node on its tmpfs, but a node
			// only ever reaches gVisor's own few virtual devices: 1:1, the
			// host's physical memory under Linux, is nothing there.
			r = sh(t, sb, "mknod /tmp/mem c 1 1 && echo MADE; head -c 1 /tmp/mem >/dev/null && echo READ")
			if strings.Contains(r.Output, "READ") {
				t.Errorf("a device node made under gVisor reads a device: %+v", r)
			}
			t.Logf("mknod under gVisor: %q", r.Output)
			// Controls: gVisor does not honour the setuid bit of a file from
			// a host bind mount, so the setuid attack fails there even
			// without no-new-privileges; the control below would prove
			// nothing (the runc run's does), and the mount and mknod
			// controls are engine-wide.
			return
		}
		r = sh(t, sb, "mknod /tmp/null c 1 3 && echo MADE")
		if strings.Contains(r.Output, "MADE") || exitCode(r) == 0 {
			t.Errorf("mknod succeeded in the sandbox: %+v", r)
		}

		// Controls.
		c := sandboxtest.Client(t)
		wsMount := []mount.Mount{{Type: mount.TypeBind, Source: ws, Target: "/workspace"}}
		out, _ := sandboxtest.RunControl(t, c, &container.Config{User: "65532:65532"},
			&container.HostConfig{CapDrop: []string{"ALL"}, Mounts: wsMount}, "/workspace/euid")
		if !strings.Contains(out, "euid=0") {
			t.Errorf("control: without no-new-privileges the setuid probe should run as root, got %q", out)
		}
		out, _ = sandboxtest.RunControl(t, c, &container.Config{}, &container.HostConfig{CapAdd: []string{"SYS_ADMIN"}},
			"mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo MOUNTED")
		if !strings.Contains(out, "MOUNTED") {
			t.Errorf("control: root with CAP_SYS_ADMIN should mount, got %q", out)
		}
		out, _ = sandboxtest.RunControl(t, c, &container.Config{}, &container.HostConfig{}, "mknod /tmp/null c 1 3 && echo MADE")
		if !strings.Contains(out, "MADE") {
			t.Errorf("control: root with the default capabilities should mknod, got %q", out)
		}
	})
}
