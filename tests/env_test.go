package tests

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/localagent/agent/orchestrator/environment"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// Environment tests. The ones that install real Debian packages (python3,
// golang-go) from the configured mirror take about a minute each on a cold
// machine and need the mirror reachable from the host: they run only with
// AGENT_TEST_ENV=1 (`make test-env`).

func requireEnvTests(t *testing.T) {
	t.Helper()
	if os.Getenv("AGENT_TEST_ENV") != "1" {
		t.Skip("installs Debian packages from the mirror (about a minute): set AGENT_TEST_ENV=1")
	}
}

// removeLabelledImagesOnCleanup removes, when the test ends, exactly the
// images carrying sandbox.LabelTest=value (environment images built by it).
func removeLabelledImagesOnCleanup(t *testing.T, c *client.Client, value string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		imgs, err := c.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelTest+"="+value))})
		if err != nil {
			t.Error(err)
			return
		}
		for _, im := range imgs {
			_, _ = c.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
}

// untagOnCleanup removes a repository's environment tag when the test
// ends (its image may be a shared package image built earlier, which the
// label cleanup above leaves alone).
func untagOnCleanup(t *testing.T, c *client.Client, ref string) {
	if !strings.HasPrefix(ref, "agent/env-") {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.ImageRemove(ctx, ref, image.RemoveOptions{})
	})
}

// writeRepo makes a git repository with files and one commit.
func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, dir, "init", "-q", "-b", "main")
	Git(t, dir, "add", "-A")
	Git(t, dir, "commit", "-q", "-m", "init")
	return dir
}

func writeUserConfig(t *testing.T, e *AgentEnv, text string) {
	t.Helper()
	for _, kv := range e.Env {
		if d, ok := strings.CutPrefix(kv, "XDG_CONFIG_HOME="); ok {
			p := filepath.Join(d, "agent", "config.yaml")
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no XDG_CONFIG_HOME")
}

// TestEnvSetupNetworkIsTheUsers: a repository whose environment asks for a
// host its user did not allow is refused before anything is built; the
// control run, with the user allowing that host, builds.
func TestEnvSetupNetworkIsTheUsers(t *testing.T) {
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	removeLabelledImagesOnCleanup(t, c, e.Label)
	repo := writeRepo(t, map[string]string{
		"README":                  "x\n",
		".agent/environment.yaml": "setup: [\"echo setup ran\"]\nnetwork: [exfil.example.com]\n",
	})
	code, _, stderr := e.Run(repo, "task", "--llm", "script:"+writeScript(t, "turns:\n  - text: done\n"), "--approve", "discard", e.LabelFlag(), "do nothing")
	if code == 0 || !strings.Contains(stderr, "exfil.example.com") || !strings.Contains(stderr, "does not allow") {
		t.Fatalf("exit %d, want a refusal naming the host; stderr:\n%s", code, stderr)
	}
	if ts, _ := taskStore(t, e.StateDir).List(); len(ts) != 0 {
		t.Fatalf("a refused environment still created %d task(s)", len(ts))
	}

	// Control: the same repository, with the user allowing the host.
	writeUserConfig(t, e, "env:\n  egress: [exfil.example.com]\n")
	code, _, stderr = e.Run(repo, "task", "--llm", "script:"+writeScript(t, "turns:\n  - text: done\n"), "--approve", "discard", e.LabelFlag(), "do nothing")
	if code != 0 || strings.Contains(stderr, "does not allow") {
		t.Fatalf("control: exit %d with the host allowed; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "setup 1/1") {
		t.Fatalf("control: setup did not run; stderr:\n%s", stderr)
	}
	untagOnCleanup(t, c, newestTask(t, e.StateDir).Image)

	// A setup step that reaches for a host nobody declared or allowed is
	// stopped by the proxy, and the error names the host.
	if err := os.WriteFile(filepath.Join(repo, ".agent", "environment.yaml"), []byte("setup: [\"wget -q -O- http://undeclared.example.com/x\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, repo, "add", "-A")
	Git(t, repo, "commit", "-q", "-m", "sneaky setup")
	code, _, stderr = e.Run(repo, "task", "--llm", "script:"+writeScript(t, "turns:\n  - text: done\n"), "--approve", "discard", e.LabelFlag(), "do nothing")
	if code == 0 || !strings.Contains(stderr, "undeclared.example.com:80") || !strings.Contains(stderr, "env.egress") {
		t.Fatalf("exit %d, want the setup failure to name the refused host; stderr:\n%s", code, stderr)
	}
}

// taskRecord returns the record of the newest task.
func newestTask(t *testing.T, stateDir string) *store.Task {
	t.Helper()
	ts, err := taskStore(t, stateDir).List()
	if err != nil || len(ts) == 0 {
		t.Fatalf("no task: %v", err)
	}
	newest := ts[0]
	for _, x := range ts {
		if x.Created.After(newest.Created) {
			newest = x
		}
	}
	return newest
}

func commandDuration(t *testing.T, tk *store.Task, prefix string) (time.Duration, int) {
	t.Helper()
	for _, c := range tk.Commands {
		if strings.HasPrefix(c.Command, prefix) {
			code := -1
			if c.ExitCode != nil {
				code = *c.ExitCode
			}
			return time.Duration(c.DurationMS) * time.Millisecond, code
		}
	}
	t.Fatalf("task %s ran no %q: %+v", tk.ID, prefix, tk.Commands)
	return 0, 0
}

// TestEnvPython: a Python package tested with Debian's python3-pytest in a
// sandbox without network; a command missing from the image gets a note
// naming it, in the tool result and in the review.
// envBuildTimeout bounds a run that builds an environment image: unpacking
// a toolchain (golang-go is ~300 MB installed) took up to three minutes on
// a loaded 2-core machine.
const envBuildTimeout = 10 * time.Minute

func TestEnvPython(t *testing.T) {
	requireEnvTests(t)
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	e.Timeout = envBuildTimeout
	e.Env = append(e.Env, "AGENT_SANDBOX_IMAGE=agent/sandbox:latest")
	removeLabelledImagesOnCleanup(t, c, e.Label)
	repo := writeRepo(t, map[string]string{
		"calc/__init__.py":        "def add(a, b):\n    return a + b\n",
		"tests/test_calc.py":      "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
		".agent/environment.yaml": "packages: [python3, python3-pytest]\n",
	})
	script := writeScript(t, `turns:
  - tool_calls:
      - {name: bash, arguments: {command: "python3 -m pytest -q"}}
  - expect: {last_role: tool, tool_result_contains: "1 passed"}
    tool_calls:
      - {name: bash, arguments: {command: "go version"}}
  - expect: {last_role: tool, tool_result_contains: "golang-go"}
    text: "All tests pass."
`)
	start := time.Now()
	code, stdout, stderr := e.Run(repo, "task", "--llm", "script:"+script, "--approve", "keep", "--json", e.LabelFlag(), "run the tests")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	t.Logf("first task (environment built): %s", time.Since(start).Round(time.Millisecond))
	tk := newestTask(t, e.StateDir)
	untagOnCleanup(t, c, tk.Image)
	if tk.Environment == nil || tk.Environment.Reused {
		t.Fatalf("the first task did not build its environment: %+v", tk.Environment)
	}
	if _, code := commandDuration(t, tk, "python3 -m pytest"); code != 0 {
		t.Fatalf("pytest exited %d", code)
	}
	var rv struct {
		Review struct {
			Tests    struct{ Passed bool } `json:"tests"`
			Warnings []string              `json:"warnings"`
		} `json:"review"`
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.Contains(line, `"review"`) {
			_ = json.Unmarshal([]byte(line), &rv)
		}
	}
	if !strings.Contains(stderr+stdout, "golang-go") {
		t.Fatalf("the 127 note does not name the package:\n%s\n%s", stdout, stderr)
	}
	_ = rv

	// Second task: the image is reused, nothing is rebuilt.
	start = time.Now()
	code, stdout, stderr = e.Run(repo, "task", "--llm", "script:"+script, "--approve", "keep", e.LabelFlag(), "run the tests again")
	stderr += stdout
	if code != 0 {
		t.Fatalf("second task: exit %d\n%s", code, stderr)
	}
	t.Logf("second task (environment reused): %s", time.Since(start).Round(time.Millisecond))
	tk2 := newestTask(t, e.StateDir)
	if tk2.Environment == nil || !tk2.Environment.Reused || tk2.Image != tk.Image {
		t.Fatalf("second task did not reuse %s: %+v image %s", tk.Image, tk2.Environment, tk2.Image)
	}
	if !strings.Contains(stderr, "Tests: passed") || !strings.Contains(stderr, `"go version" exited 127`) {
		t.Fatalf("review lacks the test result or the 127 note:\n%s", stderr)
	}
}

// goProxy serves one module, example.com/greet v1.0.0, the way a module
// proxy does, on a host address; it returns its host:port.
func goProxy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	mod := filepath.Join(dir, "example.com", "greet", "@v")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"list":        "v1.0.0\n",
		"v1.0.0.info": `{"Version":"v1.0.0","Time":"2024-01-01T00:00:00Z"}`,
		"v1.0.0.mod":  "module example.com/greet\n\ngo 1.19\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(mod, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	zf, err := os.Create(filepath.Join(mod, "v1.0.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	for n, c := range map[string]string{
		"go.mod":   files["v1.0.0.mod"],
		"greet.go": "package greet\n\n// Hello greets name.\nfunc Hello(name string) string { return \"Hello, \" + name }\n",
	} {
		w, _ := zw.Create("example.com/greet@v1.0.0/" + n)
		_, _ = w.Write([]byte(c))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zf.Close()
	// Not on 127.0.0.1: Go (like curl) never sends a loopback URL through
	// a proxy, and the sandbox's own loopback is not the host's. A host
	// address stands for an internal module proxy.
	ln, err := net.Listen("tcp", hostAddr(t)+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// hostAddr is a non-loopback IPv4 address of this machine.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address to serve the module proxy on")
	return ""
}

// TestEnvGo: a Go module whose dependency comes from a module proxy only
// setup can reach (through the user's env.egress); the task's sandbox has
// no network and runs `go test ./...` from the warm dependency cache. The
// second task reuses the image and the build cache.
func TestEnvGo(t *testing.T) {
	requireEnvTests(t)
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	e.Timeout = envBuildTimeout
	e.Env = append(e.Env, "AGENT_SANDBOX_IMAGE=agent/sandbox:latest")
	removeLabelledImagesOnCleanup(t, c, e.Label)
	proxy := goProxy(t)

	// go.sum from the same proxy, by the host's go.
	gomod := "module example.com/app\n\ngo 1.19\n\nrequire example.com/greet v1.0.0\n"
	sumDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(sumDir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "mod", "download", "example.com/greet")
	cmd.Dir = sumDir
	cmd.Env = append(os.Environ(), "GOPROXY=http://"+proxy, "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOMODCACHE="+filepath.Join(sumDir, "cache"), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod download on the host: %v\n%s", err, out)
	}
	gosum, err := os.ReadFile(filepath.Join(sumDir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("chmod", "-R", "u+w", sumDir).Run() })

	repo := writeRepo(t, map[string]string{
		"go.mod":                  gomod,
		"go.sum":                  string(gosum),
		"app.go":                  "package app\n\nimport \"example.com/greet\"\n\nfunc Greeting() string { return greet.Hello(\"world\") }\n",
		"app_test.go":             "package app\n\nimport \"testing\"\n\nfunc TestGreeting(t *testing.T) {\n\tif g := Greeting(); g != \"Hello, world\" {\n\t\tt.Fatal(g)\n\t}\n}\n",
		".agent/environment.yaml": "packages: [golang-go]\nsetup: [go mod download]\nenv: {GOPROXY: \"http://" + proxy + "\", GOSUMDB: \"off\"}\nnetwork: [\"" + proxy + "\"]\n",
	})
	writeUserConfig(t, e, "env:\n  egress: [\""+proxy+"\"]\n")
	script := writeScript(t, `turns:
  - tool_calls:
      - {name: bash, arguments: {command: "go test ./..."}}
  - expect: {last_role: tool, tool_result_contains: "ok"}
    text: "The tests pass."
`)
	start := time.Now()
	code, stdout, stderr := e.Run(repo, "task", "--llm", "script:"+script, "--approve", "keep", e.LabelFlag(), "run the tests")
	stderr += stdout
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	first := time.Since(start)
	tk := newestTask(t, e.StateDir)
	untagOnCleanup(t, c, tk.Image)
	d1, code1 := commandDuration(t, tk, "go test")
	if code1 != 0 || !strings.Contains(stderr, "Tests: passed") {
		t.Fatalf("go test exited %d\n%s", code1, stderr)
	}
	if len(tk.Network.Allow) != 0 {
		t.Fatalf("the task's sandbox had network: %v", tk.Network.Allow)
	}

	start = time.Now()
	code, _, stderr = e.Run(repo, "task", "--llm", "script:"+script, "--approve", "keep", e.LabelFlag(), "run the tests again")
	if code != 0 {
		t.Fatalf("second task: exit %d\n%s", code, stderr)
	}
	second := time.Since(start)
	tk2 := newestTask(t, e.StateDir)
	d2, code2 := commandDuration(t, tk2, "go test")
	if code2 != 0 || tk2.Environment == nil || !tk2.Environment.Reused {
		t.Fatalf("second task: go test exit %d, environment %+v", code2, tk2.Environment)
	}
	t.Logf("task 1: %s (environment built in %d ms), go test %s; task 2: %s (environment reused, %d ms), go test %s",
		first.Round(time.Millisecond), tk.Environment.BuildMS, d1, second.Round(time.Millisecond), tk2.Environment.BuildMS, d2)
	if d2 >= d1 {
		t.Errorf("the second go test (%s) was not faster than the first (%s): the build cache is not shared", d2, d1)
	}
}

// TestTaskSubmoduleAndInclude: a task's sandbox sees the repository's
// submodule (checked out from the local objects, nothing fetched) and the
// untracked file the user approved, but not one only the repository asked
// for.
func TestTaskSubmoduleAndInclude(t *testing.T) {
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	lib := writeRepo(t, map[string]string{"lib.txt": "from the submodule\n"})
	repo := writeRepo(t, map[string]string{"top.txt": "top\n", ".gitignore": ".env\nlocal.conf\n", ".agent/include": ".env\nlocal.conf\n"})
	Git(t, repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "vendor/lib")
	Git(t, repo, "commit", "-q", "-m", "add lib")
	for name, content := range map[string]string{".env": "APPROVED=1\n", "local.conf": "NOT_APPROVED=1\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeUserConfig(t, e, "env:\n  include: [.env]\n")
	script := writeScript(t, `turns:
  - tool_calls:
      - {name: bash, arguments: {command: "cat vendor/lib/lib.txt .env; cat local.conf"}}
  - expect: {last_role: tool, tool_result_contains: "from the submodule"}
    text: done
`)
	code, stdout, stderr := e.Run(repo, "task", "--llm", "script:"+script, "--approve", "discard", e.LabelFlag(), "look")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	tk := newestTask(t, e.StateDir)
	sess, err := os.ReadFile(tk.Session)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sess), "from the submodule") || !strings.Contains(string(sess), "APPROVED=1") {
		t.Fatalf("the sandbox did not see the submodule or the approved file:\n%s", sess)
	}
	if strings.Contains(string(sess), "NOT_APPROVED") {
		t.Fatal("a file only the repository asked for was copied")
	}
	if !strings.Contains(stderr, "local.conf") || !strings.Contains(stderr, "env.include") {
		t.Errorf("no notice about the unapproved pattern:\n%s", stderr)
	}
}

// TestTaskLFS: a Git LFS pointer whose object the user's repository has is
// materialised in the task's sandbox, and the task's commit keeps the
// pointer (git-lfs itself is not needed).
func TestTaskLFS(t *testing.T) {
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	content := "the real LFS content\n"
	sum := sha256.Sum256([]byte(content))
	oid := hex.EncodeToString(sum[:])
	pointer := "version https://git-lfs.github.com/spec/v1\noid sha256:" + oid + "\nsize " + strconv.Itoa(len(content)) + "\n"
	repo := writeRepo(t, map[string]string{".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n", "data.bin": pointer, "other.bin": strings.Replace(pointer, oid, strings.Repeat("0", 64), 1)})
	obj := filepath.Join(repo, ".git", "lfs", "objects", oid[0:2], oid[2:4], oid)
	if err := os.MkdirAll(filepath.Dir(obj), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obj, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, `turns:
  - tool_calls:
      - {name: bash, arguments: {command: "cat data.bin other.bin; echo x > new.txt"}}
  - expect: {last_role: tool, tool_result_contains: "the real LFS content"}
    text: done
`)
	code, stdout, stderr := e.Run(repo, "task", "--llm", "script:"+script, "--approve", "merge", e.LabelFlag(), "look")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if got := Git(t, repo, "show", "HEAD:data.bin"); got+"\n" != pointer {
		t.Fatalf("the task's commit changed the pointer:\n%s", got)
	}
	if !strings.Contains(Git(t, repo, "show", "--stat", "HEAD"), "new.txt") {
		t.Fatal("the task's own change was not committed")
	}
}

// TestEnvBuildConverges: what a killed build left (its container, its
// temporary checkout) is removed by the next build of that repository,
// and only that repository's.
func TestEnvBuildConverges(t *testing.T) {
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	removeLabelledImagesOnCleanup(t, c, e.Label)
	repo := writeRepo(t, map[string]string{".agent/environment.yaml": "setup: [\"true\"]\n"})
	key := environment.RepoKey(filepath.Join(repo, ".git"))
	ctx := context.Background()
	mk := func(name string) string {
		r, err := c.ContainerCreate(ctx, &container.Config{Image: "agent/busybox:latest", Cmd: []string{"true"},
			Labels: map[string]string{sandbox.LabelTest: e.Label}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	stale := mk("agent-env-build-" + key + "-dead" + e.Label[len(e.Label)-8:])
	other := mk("agent-env-build-000000000000-dead" + e.Label[len(e.Label)-8:])
	staleDir := filepath.Join(e.StateDir, "envbuild", key, "setup-dead")
	if err := os.MkdirAll(staleDir, 0o700); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := e.Run(repo, "env", "build", "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	// With --json, progress events come first, one per line; the result
	// is the last line.
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var res struct{ Ref string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Ref == "" {
		t.Fatalf("no result in %q: %v", stdout, err)
	}
	untagOnCleanup(t, c, res.Ref)
	if _, err := c.ContainerInspect(ctx, stale); err == nil {
		t.Error("the stale build container is still there")
	}
	if _, err := c.ContainerInspect(ctx, other); err != nil {
		t.Error("another repository's build container was removed")
	}
	if _, err := os.Stat(staleDir); err == nil {
		t.Error("the stale setup directory is still there")
	}
}

// TestEnvInitProposalsPass: what `agent env init` proposes for a Go
// module that uses cgo and for a Python package in a src layout is
// enough for the project's own tests to pass in a task's sandbox, which
// has no network. (Debian's golang-go alone fails such a module with
// `cgo: C compiler "gcc" not found`; pytest alone fails a src layout at
// collection with ModuleNotFoundError. The unit test TestProposeOffline
// checks the controls: a pure Go module gets CGO_ENABLED=0, a flat
// layout no PYTHONPATH.)
func TestEnvInitProposalsPass(t *testing.T) {
	requireEnvTests(t)
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	e.Timeout = envBuildTimeout
	e.Env = append(e.Env, "AGENT_SANDBOX_IMAGE=agent/sandbox:latest")
	removeLabelledImagesOnCleanup(t, c, e.Label)
	for _, tc := range []struct {
		name     string
		files    map[string]string
		propose  []string // in the proposal
		absent   []string // not in it
		command  string
		passLine string
	}{
		{
			name: "go-cgo",
			files: map[string]string{
				"go.mod":      "module example.com/cgoapp\n\ngo 1.19\n",
				"add.go":      "package cgoapp\n\n// static int add(int a, int b) { return a + b; }\nimport \"C\"\n\n// Add adds in C.\nfunc Add(a, b int) int { return int(C.add(C.int(a), C.int(b))) }\n",
				"add_test.go": "package cgoapp\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(Add(2, 3))\n\t}\n}\n",
			},
			propose:  []string{"golang-go", "gcc", "libc6-dev"},
			absent:   []string{"CGO_ENABLED"},
			command:  "go test ./...",
			passLine: "ok",
		},
		{
			name: "python-src",
			files: map[string]string{
				"pyproject.toml":       "[project]\nname = \"calc\"\nversion = \"1.0\"\n\n[tool.setuptools]\npackage-dir = {\"\" = \"src\"}\n",
				"src/calc/__init__.py": "def add(a, b):\n    return a + b\n",
				"tests/test_calc.py":   "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
			},
			propose:  []string{"python3-pytest", "PYTHONPATH: src"},
			absent:   []string{"python3-pip"},
			command:  "python3 -m pytest -q",
			passLine: "1 passed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := writeRepo(t, tc.files)
			code, stdout, stderr := e.Run(repo, "env", "init", "--write")
			if code != 0 {
				t.Fatalf("env init: exit %d\n%s%s", code, stdout, stderr)
			}
			proposal, err := os.ReadFile(filepath.Join(repo, ".agent", "environment.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.propose {
				if !strings.Contains(string(proposal), want) {
					t.Errorf("the proposal lacks %q:\n%s", want, proposal)
				}
			}
			for _, not := range tc.absent {
				if strings.Contains(string(proposal), not) {
					t.Errorf("the proposal holds %q:\n%s", not, proposal)
				}
			}
			Git(t, repo, "add", "-A")
			Git(t, repo, "commit", "-q", "-m", "environment")
			script := writeScript(t, `turns:
  - tool_calls:
      - {name: bash, arguments: {command: "`+tc.command+`"}}
  - text: "done"
`)
			code, stdout, stderr = e.Run(repo, "task", "--llm", "script:"+script, "--approve", "discard", e.LabelFlag(), "run the tests")
			if code != 0 {
				t.Fatalf("task: exit %d\n%s%s", code, stdout, stderr)
			}
			tk := newestTask(t, e.StateDir)
			untagOnCleanup(t, c, tk.Image)
			if len(tk.Network.Allow) != 0 {
				t.Fatalf("the task's sandbox had network: %v", tk.Network.Allow)
			}
			sess, err := os.ReadFile(tk.Session)
			if err != nil {
				t.Fatal(err)
			}
			if _, code := commandDuration(t, tk, tc.command); code != 0 || !strings.Contains(string(sess), tc.passLine) {
				t.Fatalf("%s exited %d in the proposed environment:\n%s\n%s", tc.command, code, proposal, sess)
			}
			// pytest's cache goes to /tmp: no warning about it, nothing
			// of it in the project.
			if strings.Contains(string(sess), "PytestCacheWarning") || strings.Contains(string(sess), ".pytest_cache") {
				t.Errorf("pytest warned about its cache:\n%s", sess)
			}
		})
	}
}

// TestTaskSubmoduleEditsKept: what the agent changes inside a submodule is
// committed in the submodule's own repository on the task's branch name
// and named in the review, not deleted with the worktree by the merge. The
// control is the task's own merge commit, which holds none of it.
func TestTaskSubmoduleEditsKept(t *testing.T) {
	c := RequireEngine(t)
	e := NewAgentEnv(t, c)
	lib := writeRepo(t, map[string]string{"lib.txt": "from the submodule\n"})
	repo := writeRepo(t, map[string]string{"top.txt": "top\n"})
	Git(t, repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "vendor/lib")
	Git(t, repo, "commit", "-q", "-m", "add lib")
	script := writeScript(t, `turns:
  - tool_calls:
      - {name: write_file, arguments: {path: vendor/lib/lib.txt, content: "edited by the agent\n"}}
      - {name: write_file, arguments: {path: top.txt, content: "top, edited\n"}}
  - text: done
`)
	code, stdout, stderr := e.Run(repo, "task", "--llm", "script:"+script, "--approve", "merge", e.LabelFlag(), "edit both")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	tk := newestTask(t, e.StateDir)
	if len(tk.Submodules) != 1 || tk.Submodules[0].Path != "vendor/lib" {
		t.Fatalf("the record names no submodule commit: %+v", tk.Submodules)
	}
	if !strings.Contains(stdout+stderr, "inside submodule") {
		t.Errorf("the review does not name the submodule's branch:\n%s%s", stdout, stderr)
	}
	if got := Git(t, repo, "show", "HEAD:top.txt"); got != "top, edited" {
		t.Errorf("the task's own change was not merged: %q", got)
	}
	if _, err := GitErr(repo, "diff", "--quiet", "HEAD~1", "HEAD", "--", "vendor/lib"); err != nil {
		t.Errorf("control: the merge changed the submodule's gitlink")
	}
	gd := filepath.Join(repo, ".git", "modules", "vendor", "lib")
	if got := Git(t, repo, "--git-dir="+gd, "show", tk.Submodules[0].Branch+":lib.txt"); got != "edited by the agent" {
		t.Errorf("lib.txt on the submodule's branch: %q", got)
	}
}
