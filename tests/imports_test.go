package tests

import (
	"fmt"
	"os/exec"
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
	"images":       {},
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
