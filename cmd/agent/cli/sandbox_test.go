package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/localagent/agent/cmd/agent/cli"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

type result struct {
	code        int
	out, errOut string
}

// agentCLI runs the command line in-process with test streams.
func agentCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ios, in, out, errOut := cli.TestStreams()
	in.WriteString(stdin)
	code := cli.Main(args, ios)
	return result{code, out.String(), errOut.String()}
}

// sandboxEnv points the CLI at the test toolbox and the busybox image and
// away from the user's configuration; it returns this test's label.
func sandboxEnv(t *testing.T) string {
	t.Helper()
	sandboxtest.RequireDocker(t)
	t.Setenv("AGENT_TOOLBOX", sandboxtest.Toolbox(t))
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("AGENT_SANDBOX_IMAGE", sandboxtest.BusyboxImage)
	label := sandboxtest.TestLabel(t)
	c := sandboxtest.Client(t)
	t.Cleanup(func() {
		// Whatever a failing test left is removed, and reported.
		for _, ct := range sandboxtest.Containers(t, c, label) {
			t.Errorf("left behind: container %s", ct.ID)
			_ = c.ContainerRemove(context.Background(), ct.ID, container.RemoveOptions{Force: true})
		}
	})
	return label
}

func createSandbox(t *testing.T, label string, ws string, extra ...string) string {
	t.Helper()
	r := agentCLI(t, "", append([]string{"sandbox", "create", "--workspace", ws, "--label", sandbox.LabelTest + "=" + label, "--json"}, extra...)...)
	if r.code != 0 {
		t.Fatalf("create: exit %d: %s", r.code, r.errOut)
	}
	var got struct{ ID, Image, Workspace, User string }
	if err := json.Unmarshal([]byte(r.out), &got); err != nil || got.ID == "" || got.User == "" || got.Workspace == "" || got.Image != sandboxtest.BusyboxImage {
		t.Fatalf("create --json printed %q (%v)", r.out, err)
	}
	return got.ID
}

func TestSandboxCommands(t *testing.T) {
	label := sandboxEnv(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := createSandbox(t, label, ws, "--chown-workspace")

	r := agentCLI(t, "", "sandbox", "tool", id[:10], "read_file", `{"path":"a.txt"}`)
	var resp toolbox.Response
	if r.code != 0 || json.Unmarshal([]byte(r.out), &resp) != nil || !strings.Contains(resp.Output, "hello from the host") {
		t.Errorf("tool read_file: exit %d out %q err %q", r.code, r.out, r.errOut)
	}
	r = agentCLI(t, "", "sandbox", "tool", id, "bash", `{"command":"echo made > b.txt; exit 3"}`)
	if r.code != 1 || json.Unmarshal([]byte(r.out), &resp) != nil || resp.ExitCode == nil || *resp.ExitCode != 3 {
		t.Errorf("tool bash exit 3: exit %d out %q", r.code, r.out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "b.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("file written in the sandbox: %q %v", b, err)
	}

	r = agentCLI(t, "piped input\n", "sandbox", "exec", id, "--", "sh", "-c", "cat; echo to-stderr >&2; exit 5")
	if r.code != 5 || r.out != "piped input\n" || r.errOut != "to-stderr\n" {
		t.Errorf("exec: %+v", r)
	}
	r = agentCLI(t, "", "sandbox", "exec", id, "--", "id", "-u")
	if r.code != 0 || strings.TrimSpace(r.out) == "0" {
		t.Errorf("exec id -u: %+v", r)
	}

	r = agentCLI(t, "", "sandbox", "ls")
	if r.code != 0 || !strings.Contains(r.out, id[:12]) || !strings.Contains(r.out, ws) {
		t.Errorf("ls: %+v", r)
	}
	r = agentCLI(t, "", "sandbox", "ls", "--json")
	var list struct{ Sandboxes []struct{ ID string } }
	if r.code != 0 || json.Unmarshal([]byte(r.out), &list) != nil || !strings.Contains(r.out, id) {
		t.Errorf("ls --json: %+v", r)
	}

	r = agentCLI(t, "", "sandbox", "rm", id[:12])
	if r.code != 0 || strings.TrimSpace(r.out) != id {
		t.Errorf("rm: %+v", r)
	}
	if left := sandboxtest.Containers(t, sandboxtest.Client(t), label); len(left) != 0 {
		t.Errorf("rm left %d containers", len(left))
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err != nil {
		t.Errorf("rm touched the workspace: %v", err)
	}
}

// Bad input: a clear message, a non-zero exit, and nothing left behind
// (sandboxEnv's cleanup checks by label).
func TestSandboxBadInput(t *testing.T) {
	label := sandboxEnv(t)
	ws := t.TempDir()
	id := createSandbox(t, label, ws, "--chown-workspace")
	t.Cleanup(func() { agentCLI(t, "", "sandbox", "rm", id) })

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown tool", []string{"sandbox", "tool", id, "rm_rf", "{}"}, 1, `unknown tool "rm_rf"`},
		{"malformed args", []string{"sandbox", "tool", id, "read_file", `{"path":`}, 1, "not valid JSON"},
		{"wrong arg type", []string{"sandbox", "tool", id, "read_file", `{"path":7}`}, 1, "path"},
		{"escape", []string{"sandbox", "tool", id, "read_file", `{"path":"../etc/passwd"}`}, 1, "outside the workspace"},
		{"unknown sandbox", []string{"sandbox", "tool", "ffffffffffff", "read_file", "{}"}, 1, "no sandbox matches"},
		{"missing workspace", []string{"sandbox", "create", "--workspace", filepath.Join(ws, "nope"), "--label", sandbox.LabelTest + "=" + label}, 1, "does not exist"},
		{"missing image", []string{"sandbox", "create", "--workspace", ws, "--image", "agent/no-such:latest", "--label", sandbox.LabelTest + "=" + label}, 1, "agent images build sandbox"},
		{"no workspace flag", []string{"sandbox", "create"}, 2, "--workspace"},
		{"exec without command", []string{"sandbox", "exec", id}, 2, "missing CMD..."},
		{"bad label", []string{"sandbox", "create", "--workspace", ws, "--label", "novalue"}, 2, "KEY=VALUE"},
		{"bad seccomp", []string{"sandbox", "create", "--workspace", ws, "--seccomp", "loose"}, 2, "default or strict"},
		{"bad isolation", []string{"sandbox", "create", "--workspace", ws, "--isolation", "kata"}, 2, "runc"},
		{"bad isolation for a task", []string{"task", "--isolation", "vm", "x"}, 2, "runsc"},
		{"runtime runsc with isolation runc", []string{"sandbox", "create", "--workspace", ws, "--runtime", "runsc"}, 1, "sandbox.isolation: runsc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := agentCLI(t, "", tc.args...)
			if r.code != tc.code || !strings.Contains(r.errOut, tc.want) {
				t.Errorf("exit %d (want %d), stderr %q (want %q)", r.code, tc.code, r.errOut, tc.want)
			}
			if strings.Contains(r.errOut, "goroutine") || strings.Contains(r.errOut, "panic") {
				t.Errorf("stack trace in the output: %s", r.errOut)
			}
		})
	}

	// A stopped container.
	c := sandboxtest.Client(t)
	if err := c.ContainerKill(context.Background(), id, "KILL"); err != nil {
		t.Fatal(err)
	}
	waitC, errC := c.ContainerWait(context.Background(), id, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"sandbox", "tool", id, "read_file", `{"path":"x"}`},
		{"sandbox", "exec", id, "--", "true"},
	} {
		r := agentCLI(t, "", args...)
		if r.code != 1 || !strings.Contains(r.errOut, "is not running") || !strings.Contains(r.errOut, "agent sandbox rm") {
			t.Errorf("%v on a stopped sandbox: %+v", args, r)
		}
	}
	if r := agentCLI(t, "", "sandbox", "rm", id); r.code != 0 {
		t.Errorf("rm of a stopped sandbox: %+v", r)
	}
}

// Asking for gVisor from an engine without it is a clear error saying how
// to register runsc, and creates nothing.
func TestSandboxIsolationUnavailable(t *testing.T) {
	label := sandboxEnv(t)
	e := sandboxtest.RequireDocker(t)
	if e.Offers(sandbox.IsolationRunsc, "") {
		t.Skip("this engine offers runsc: nothing to refuse")
	}
	r := agentCLI(t, "", "sandbox", "create", "--workspace", t.TempDir(), "--isolation", "runsc", "--label", sandbox.LabelTest+"="+label)
	want := "daemon.json"
	if e.Podman {
		want = "containers.conf"
	}
	if r.code != 1 || !strings.Contains(r.errOut, "isolation runsc") || !strings.Contains(r.errOut, want) || strings.Contains(r.errOut, "goroutine") {
		t.Errorf("exit %d, stderr %q", r.code, r.errOut)
	}
	if cs := sandboxtest.Containers(t, sandboxtest.Client(t), label); len(cs) != 0 {
		t.Errorf("containers left: %d", len(cs))
	}
}

// Flag and argument parsing, without the engine.
func TestSandboxArgs(t *testing.T) {
	ios, _, _, _ := cli.TestStreams()
	f := cli.NewFactory(ios)

	var ex *cli.SandboxExecOptions
	cmd := cli.NewCmdSandboxExec(f, func(_ context.Context, o *cli.SandboxExecOptions) error { ex = o; return nil })
	cmd.SetArgs([]string{"--user", "7", "abc", "--", "ls", "-la", "--color"})
	if err := cmd.Execute(); err != nil || ex.ID != "abc" || ex.User != "7" || strings.Join(ex.Cmd, " ") != "ls -la --color" {
		t.Errorf("exec parse: %+v %v", ex, err)
	}

	var to *cli.SandboxToolOptions
	cmd = cli.NewCmdSandboxTool(f, func(_ context.Context, o *cli.SandboxToolOptions) error { to = o; return nil })
	cmd.SetArgs([]string{"abc", "list_dir"})
	if err := cmd.Execute(); err != nil || to.Tool != "list_dir" || string(to.Args) != "{}" {
		t.Errorf("tool parse: %+v %v", to, err)
	}

	var cr *cli.SandboxCreateOptions
	cmd = cli.NewCmdSandboxCreate(f, func(_ context.Context, o *cli.SandboxCreateOptions) error { cr = o; return nil })
	cmd.SetArgs([]string{"-w", "/some/dir", "--label", "a=b", "--json"})
	if err := cmd.Execute(); err != nil || cr.Workspace != "/some/dir" || !cr.JSON || len(cr.Labels) != 1 {
		t.Errorf("create parse: %+v %v", cr, err)
	}

	// Usage errors exit 2 through Main.
	for _, args := range [][]string{
		{"sandbox", "tool", "abc"},
		{"sandbox", "rm"},
		{"sandbox", "ls", "extra"},
		{"sandbox", "create", "--nope"},
	} {
		if r := agentCLI(t, "", args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, r.code, r.errOut)
		}
	}
}

func TestSandboxCreateExplicitUser(t *testing.T) {
	label := sandboxEnv(t)
	id := createSandbox(t, label, t.TempDir(), "--user", "4242:4343", "--seccomp", "strict")
	t.Cleanup(func() { agentCLI(t, "", "sandbox", "rm", id) })
	r := agentCLI(t, "", "sandbox", "exec", id, "--", "id")
	if r.code != 0 || !strings.Contains(r.out, "uid=4242") || !strings.Contains(r.out, "gid=4343") {
		t.Errorf("id in a sandbox created with --user 4242:4343: %+v", r)
	}
}

// As root, a root-owned directory the user names is never chowned to the
// sandbox uid unasked: create refuses, says how to go on, changes no owner
// and leaves no container. Control: with --chown-workspace the same
// command hands the whole tree over, which is what it refused to do.
func TestSandboxCreateRefusesChown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the chown happens only when agent runs as root")
	}
	label := sandboxEnv(t)
	ws := t.TempDir()
	sub := filepath.Join(ws, "src")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "main.c"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) uint32 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	r := agentCLI(t, "", "sandbox", "create", "--workspace", ws, "--label", sandbox.LabelTest+"="+label)
	if r.code != 1 || !strings.Contains(r.errOut, "--chown-workspace") || !strings.Contains(r.errOut, "--user") {
		t.Errorf("create on a root-owned directory: %+v", r)
	}
	for _, p := range []string{ws, sub, filepath.Join(sub, "main.c")} {
		if uid := owner(p); uid != 0 {
			t.Errorf("%s now owned by %d", p, uid)
		}
	}
	if left := sandboxtest.Containers(t, sandboxtest.Client(t), label); len(left) != 0 {
		t.Errorf("a refused create left %d containers", len(left))
	}

	id := createSandbox(t, label, ws, "--chown-workspace")
	t.Cleanup(func() { agentCLI(t, "", "sandbox", "rm", id) })
	if uid := owner(filepath.Join(sub, "main.c")); uid != sandbox.NobodyUID {
		t.Errorf("control: with --chown-workspace main.c is owned by %d, want %d", uid, sandbox.NobodyUID)
	}
}
