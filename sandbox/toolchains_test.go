package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// ToolchainsImage has git, make, gcc, Go, Python with pytest and Node with
// npm (testdata/toolchains/Dockerfile). It is built by hand, not by the
// project, so the test below runs only where it exists, or fails when
// AGENT_TEST_TOOLCHAINS=1 asks for it.
const ToolchainsImage = "agent-test/toolchains:bookworm"

// toolchainProject is a tiny project in each language, with a passing test.
var toolchainProject = map[string]string{
	"c/Makefile":        "hello: hello.c\n\tcc -O2 -Wall -o hello hello.c\ncheck: hello\n\t./hello | grep -q 'hello from C'\n\techo C-OK\n",
	"c/hello.c":         "#include <stdio.h>\nint main(void) { puts(\"hello from C\"); return 0; }\n",
	"go/go.mod":         "module example.com/add\n\ngo 1.19\n",
	"go/add.go":         "package add\n\n// Add adds.\nfunc Add(a, b int) int { return a + b }\n",
	"go/add_test.go":    "package add\n\nimport (\n\t\"sync\"\n\t\"testing\"\n)\n\nfunc TestAdd(t *testing.T) {\n\tvar wg sync.WaitGroup\n\tfor i := 0; i < 8; i++ {\n\t\twg.Add(1)\n\t\tgo func() { defer wg.Done(); _ = Add(1, 2) }()\n\t}\n\twg.Wait()\n\tif Add(2, 2) != 4 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n",
	"py/add.py":         "def add(a, b):\n    return a + b\n",
	"py/test_add.py":    "import subprocess\nfrom add import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\ndef test_subprocess():\n    assert subprocess.run(['true']).returncode == 0\n",
	"js/package.json":   `{"name": "add", "version": "1.0.0", "private": true, "scripts": {"test": "node test.js"}}` + "\n",
	"js/add.js":         "module.exports = (a, b) => a + b;\n",
	"js/test.js":        "const assert = require('assert');\nconst add = require('./add');\nassert.strictEqual(add(2, 2), 4);\nrequire('child_process').execFileSync('true');\nconsole.log('JS-OK');\n",
	"py/pytest.ini":     "[pytest]\naddopts = -p no:cacheprovider\n",
	"js/.npmrc":         "update-notifier=false\nfund=false\naudit=false\n",
	"c/.gitignore":      "hello\n",
	"go/.gitattributes": "* text=auto\n",
}

// Ordinary development work builds and tests under the project's seccomp
// profile, the default: git, make with a C compiler, `go test ./...`,
// `python3 -m pytest` and `npm test`, each a tiny project with a passing
// test. The same sandbox refuses socket(AF_VSOCK), which shows the
// project's profile is the one in force.
func TestToolchainsUnderDefaultSeccomp(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sandboxtest.Client(t).ImageInspect(ctx, ToolchainsImage); err != nil {
		if os.Getenv("AGENT_TEST_TOOLCHAINS") == "1" {
			t.Fatalf("image %s: %v (build it: docker build -t %s sandbox/testdata/toolchains)", ToolchainsImage, err, ToolchainsImage)
		}
		t.Skipf("image %s is not present (docker build -t %s sandbox/testdata/toolchains, then run again)", ToolchainsImage, ToolchainsImage)
	}
	ws := t.TempDir()
	for name, body := range toolchainProject {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb := sandboxtest.New(t, e, sandbox.Spec{Workspace: ws, Image: ToolchainsImage})

	for _, step := range []struct{ name, cmd, want string }{
		{"profile", `grep Seccomp: /proc/self/status; python3 -c 'import socket; socket.socket(40, socket.SOCK_STREAM)' 2>&1 | tail -1`, "Address family not supported"},
		{"git", `cd /tmp && git init -q repo && cd repo && cp -r /workspace/c . && git add -A && git -c user.name=n -c user.email=e@x commit -qm init && git log --oneline | wc -l && git status --short | wc -l && echo GIT-OK`, "GIT-OK"},
		{"make and cc", `cd c && make -s check && ./hello`, "hello from C"},
		{"go test", `cd go && go version && go vet ./... && go test -count=1 ./... && echo GO-OK`, "GO-OK"},
		{"pytest", `cd py && python3 -m pytest -q 2>&1 && echo PY-OK`, "2 passed"},
		{"npm test", `cd js && npm test 2>&1 && echo NPM-OK`, "NPM-OK"},
	} {
		start := time.Now()
		r := tool(t, sb, "bash", map[string]any{"command": step.cmd, "timeout": 600})
		t.Logf("%s (%s): exit %d\n%s", step.name, time.Since(start).Round(time.Millisecond), exitCode(r), strings.TrimSpace(r.Output))
		if !strings.Contains(r.Output, step.want) || step.name != "profile" && r.IsError {
			t.Errorf("%s under the default seccomp profile: want %q, got exit %d:\n%s", step.name, step.want, exitCode(r), r.Output)
		}
	}
}
