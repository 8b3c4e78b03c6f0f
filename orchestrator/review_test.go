package orchestrator

import (
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/worktree"
)

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Add pagination to the users endpoint":                     "add-pagination-to-the-users",
		"Make greet.sh greet the name given as its first argument": "make-greet-sh-greet-the-name",
		"  --weird** input!! ":                                     "weird-input",
		"日本語だけ":                                                    "task",
		"":                                                         "task",
		"supercalifragilisticexpialidociousandthensomemoreletters x": "supercalifragilisticexpialidocio",
		"fix ../../etc/passwd; rm -rf /":                             "fix-etc-passwd-rm-rf",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsTestCommand(t *testing.T) {
	yes := []string{"go test ./...", "cd x && go test -run Foo ./pkg", "pytest -q", "python3 -m pytest",
		"npm test", "npm run test", "cargo test", "make test", "make -j4 check", "sh test.sh", "./run_tests.sh",
		"bash scripts/test.sh", "mvn -q test", "./gradlew test", "bundle exec rspec"}
	no := []string{"ls", "cat test.sh", "go build ./...", "echo testing", "git status", "make build", "vim test.py"}
	for _, c := range yes {
		if !IsTestCommand(c) {
			t.Errorf("%q not detected as a test command", c)
		}
	}
	for _, c := range no {
		if IsTestCommand(c) {
			t.Errorf("%q detected as a test command", c)
		}
	}
}

func TestSensitiveChanges(t *testing.T) {
	st := worktree.Stat{Files: []worktree.FileStat{
		{Path: "src/main.go", Mode: "100644"},
		{Path: ".gitattributes", Mode: "100644"},
		{Path: "sub/.gitattributes", Mode: "100644"},
		{Path: ".github/workflows/ci.yml", Mode: "100644"},
		{Path: "tools/hooks/pre-commit", Mode: "100755"},
		{Path: "link", Mode: "120000", LinkTarget: "/etc/passwd"},
		{Path: "a/up", Mode: "120000", LinkTarget: "../../x"},
		{Path: "a/ok", Mode: "120000", LinkTarget: "../README.md"},
	}}
	got := sensitiveChanges(st, "tools/hooks")
	want := []string{".gitattributes", "sub/.gitattributes", ".github/workflows/ci.yml", "tools/hooks/pre-commit", "link -> /etc/passwd", "a/up -> ../../x"}
	if len(got) != len(want) {
		t.Fatalf("got %d warnings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("warning %d = %q, want it to name %q", i, got[i], w)
		}
	}
}
