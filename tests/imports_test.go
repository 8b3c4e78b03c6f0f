package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/localagent/agent"

// importRules are DESIGN.md's package table: which project packages each
// top-level package may import (its own sub-packages are always allowed).
// They are what keeps the sandbox a real boundary: the agent cannot reach
// Docker or the orchestrator, so no tool can have a host execution path.
var importRules = map[string][]string{
	"cmd":          {"*"},
	"tests":        {"*"},
	"orchestrator": {"sandbox", "agent", "policy", "images", "compose"},
	"sandbox":      {"policy"},
	"images":       {"policy"},
	"agent":        {"policy"},
	"policy":       {},
	"compose":      {},
}

// thirdPartyRules forbid outside modules in packages that must not see them.
var thirdPartyRules = []struct {
	prefix  string
	allowed []string // top-level project packages that may import it
	why     string
}{
	{"github.com/docker/", []string{"cmd", "orchestrator", "sandbox", "images", "tests"}, "only the engine-facing packages talk to Docker"},
	{"github.com/moby/", []string{"cmd", "orchestrator", "sandbox", "images", "tests"}, "only the engine-facing packages talk to Docker"},
	{"github.com/charmbracelet/huh", []string{"cmd"}, "forms live behind the prompter in cmd/agent"},
	{"github.com/spf13/viper", []string{"cmd"}, "configuration is read in cmd/agent and passed down as plain structs"},
	{"github.com/spf13/cobra", []string{"cmd"}, "logic packages never see cobra"},
	// The agent acts only through its Workspace (the sandbox): a process
	// started by the agent package itself would run on the host.
	{"os/exec", []string{"cmd", "orchestrator", "sandbox", "images", "tests"}, "the agent may not start host processes: every command runs in the sandbox"},
}

// engineSDKs are the engine client modules. Inside orchestrator only the
// packages in engineSDKOrchestrator may import them: the task lifecycle,
// store, worktrees and gc see sandboxes only through sandbox.Backend, so
// another engine can replace Docker without touching them.
var engineSDKs = []string{"github.com/docker/", "github.com/moby/"}

// engineSDKOrchestrator are the orchestrator packages that drive the
// engine for things other than sandboxes: building environment images and
// running the llama-server container.
var engineSDKOrchestrator = []string{
	module + "/orchestrator/environment",
	module + "/orchestrator/llamaserver",
}

// engineViolation says why pkg may not import imp, or "".
func engineViolation(pkg, imp string) string {
	if topLevel(pkg) != "orchestrator" {
		return ""
	}
	for _, sdk := range engineSDKs {
		if !strings.HasPrefix(imp, sdk) {
			continue
		}
		for _, ok := range engineSDKOrchestrator {
			if pkg == ok || strings.HasPrefix(pkg, ok+"/") {
				return ""
			}
		}
		return fmt.Sprintf("%s imports %s: the orchestrator sees sandboxes only through sandbox.Backend, never an engine SDK", pkg, imp)
	}
	return ""
}

func topLevel(pkg string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	top, _, _ := strings.Cut(rel, "/")
	return top
}

func allowed(list []string, top string) bool {
	for _, a := range list {
		if a == "*" || a == top {
			return true
		}
	}
	return false
}

// importViolations checks `go list` lines (a package, then its imports)
// against the rules; it also says how many packages it checked.
func importViolations(goList string) (violations []string, checked int) {
	for _, line := range strings.Split(strings.TrimSpace(goList), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		top := topLevel(pkg)
		rules, ok := importRules[top]
		if !ok {
			violations = append(violations, fmt.Sprintf("%s: top-level package %q is not in DESIGN.md's layout", pkg, top))
			continue
		}
		checked++
		for _, imp := range imports {
			if strings.HasPrefix(imp, module+"/") {
				if it := topLevel(imp); it != top && !allowed(rules, it) {
					violations = append(violations, fmt.Sprintf("%s imports %s: %s may not import %s", pkg, imp, top, it))
				}
				continue
			}
			if v := engineViolation(pkg, imp); v != "" {
				violations = append(violations, v)
			}
			for _, r := range thirdPartyRules {
				if strings.HasPrefix(imp, r.prefix) && !allowed(r.allowed, top) {
					violations = append(violations, fmt.Sprintf("%s imports %s: %s", pkg, imp, r.why))
				}
			}
		}
	}
	return violations, checked
}

func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	violations, checked := importViolations(string(out))
	for _, v := range violations {
		t.Error(v)
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages; go list output looks wrong:\n%s", checked, out)
	}

	// Control: the same check catches the agent reaching Docker, the
	// orchestrator or the host's processes, viper outside cmd, and a package
	// outside the layout.
	bad := strings.Join([]string{
		module + "/agent/tools " + module + "/orchestrator",
		module + "/agent " + "github.com/docker/docker/client",
		module + "/policy " + "github.com/spf13/viper",
		module + "/internal/x fmt",
		module + "/agent/llm os/exec",
		module + "/agent/event fmt " + module + "/policy",
	}, "\n")
	if got, _ := importViolations(bad); len(got) != 5 {
		t.Errorf("control: %d violations found in five bad packages and one good one: %q", len(got), got)
	}

	// Control: a Docker SDK import planted in the orchestrator proper (or
	// its store) is caught; the image and model-server packages may keep
	// theirs.
	planted := strings.Join([]string{
		module + "/orchestrator context " + module + "/sandbox github.com/docker/docker/client",
		module + "/orchestrator/store github.com/moby/moby/api/types/container",
		module + "/orchestrator/environment github.com/docker/docker/client",
		module + "/orchestrator/llamaserver github.com/docker/docker/api/types/container",
	}, "\n")
	if got, _ := importViolations(planted); len(got) != 2 {
		t.Errorf("control: want 2 violations (orchestrator, orchestrator/store), got %d: %q", len(got), got)
	}
}

// TestImportRulesOnPlantedPackage runs the whole check (go list included) on
// a copy of an orchestrator-like package that imports the Docker client:
// the rule must name it.
func TestImportRulesOnPlantedPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package list of a temporary module")
	}
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+module+"\n\ngo 1.22\n")
	write("orchestrator/planted.go", "package orchestrator\n\nimport _ \"github.com/docker/docker/client\"\n")
	cmd := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s%s", err, out, stderr.String())
	}
	got, checked := importViolations(string(out))
	if checked != 1 || len(got) != 1 || !strings.Contains(got[0], "sandbox.Backend") {
		t.Fatalf("planted Docker import in orchestrator: want one violation, got %d (checked %d): %q\n%s", len(got), checked, got, out)
	}
}

// The toolbox runs inside arbitrary images: it must stay free of the
// project's other packages and of anything but the standard library,
// doublestar and golang.org/x/net/html (web_fetch turns HTML into text
// inside the sandbox, so the host never parses it), so that it builds
// static and small.
func TestToolboxImportsOnlyStdlib(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`, module+"/cmd/agent-toolbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == module+"/cmd/agent-toolbox", strings.HasPrefix(p, module+"/sandbox/toolbox"),
			strings.HasPrefix(p, "github.com/bmatcuk/doublestar/"),
			p == "golang.org/x/net/html", p == "golang.org/x/net/html/atom":
		default:
			t.Errorf("agent-toolbox depends on %s", p)
		}
	}
}
