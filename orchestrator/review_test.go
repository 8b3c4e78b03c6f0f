package orchestrator

import (
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
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
		{Path: ".agent/config.yaml", Mode: "100644"},
		{Path: "sub/.gitattributes", Mode: "100644"},
		{Path: ".github/workflows/ci.yml", Mode: "100644"},
		{Path: "tools/hooks/pre-commit", Mode: "100755"},
		{Path: "link", Mode: "120000", LinkTarget: "/etc/passwd"},
		{Path: "a/up", Mode: "120000", LinkTarget: "../../x"},
		{Path: "a/ok", Mode: "120000", LinkTarget: "../README.md"},
	}}
	got := sensitiveChanges(st, "tools/hooks")
	want := []string{".gitattributes", ".agent/config.yaml", "sub/.gitattributes", ".github/workflows/ci.yml", "tools/hooks/pre-commit", "link -> /etc/passwd", "a/up -> ../../x"}
	check(t, got, want)
}

// TestSensitiveSymlinks: a symlink is flagged when its name is, holds or
// lies under a sensitive path, or when it points at one. Control: plain
// symlinks inside the repository are not.
func TestSensitiveSymlinks(t *testing.T) {
	st := worktree.Stat{Files: []worktree.FileStat{
		{Path: ".agent", Mode: "120000", LinkTarget: "tools/devcfg"},
		{Path: ".vscode", Mode: "120000", LinkTarget: "tools/editor"},
		{Path: ".github", Mode: "120000", LinkTarget: "ci"},
		{Path: ".envrc", Mode: "120000", LinkTarget: "scripts/env.sh"},
		{Path: "sub/.git", Mode: "120000", LinkTarget: "../x"},
		{Path: "tools/hooks", Mode: "120000", LinkTarget: "../scripts"},
		{Path: "docs/h", Mode: "120000", LinkTarget: "../.git/hooks"},
		{Path: "cfg", Mode: "120000", LinkTarget: ".agent/config.yaml"},
		{Path: "ci", Mode: "120000", LinkTarget: ".github/workflows"},
		{Path: "hk", Mode: "120000", LinkTarget: "tools/hooks/pre-commit"},
		{Path: "ed", Mode: "120000", LinkTarget: "./.idea"},
		{Path: "a/ok", Mode: "120000", LinkTarget: "../README.md"},
		{Path: "lib", Mode: "120000", LinkTarget: "vendor/lib"},
		{Path: "agentdocs", Mode: "120000", LinkTarget: "docs/agent"},
	}}
	got := sensitiveChanges(st, "tools/hooks")
	want := []string{".agent -> tools/devcfg", ".vscode -> tools/editor", ".github -> ci", ".envrc -> scripts/env.sh", "sub/.git -> ../x",
		"tools/hooks -> ../scripts", "docs/h -> ../.git/hooks", "cfg -> .agent/config.yaml", "ci -> .github/workflows",
		"hk -> tools/hooks/pre-commit", "ed -> ./.idea"}
	check(t, got, want)
}

func check(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d warnings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("warning %d = %q, want it to name %q", i, got[i], w)
		}
	}
}

func TestCommitMessage(t *testing.T) {
	tk := &store.Task{ID: "abc123", Model: "qwen", Prompt: "Add pagination to the users endpoint, with a page size flag and tests for the edge cases\nand docs"}
	msg := CommitMessage(tk, "Added pagination.")
	lines := strings.Split(msg, "\n")
	if len(lines[0]) > 72 || !strings.HasPrefix(lines[0], "Add pagination to the users endpoint") || lines[1] != "" {
		t.Errorf("subject/blank line wrong:\n%s", msg)
	}
	for _, want := range []string{"Task:\nAdd pagination", "Agent summary:\nAdded pagination.", "\nAgent-Task: abc123\nAgent-Model: qwen\n"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

func TestDetectTests(t *testing.T) {
	zero, one := 0, 1
	if DetectTests([]store.Command{{Command: "ls"}}) != nil {
		t.Error("tests detected among no test commands")
	}
	tr := DetectTests([]store.Command{{Command: "go test ./...", ExitCode: &one}, {Command: "ls", ExitCode: &zero}, {Command: "go test ./...", ExitCode: &zero}})
	if tr == nil || !tr.Passed || tr.Runs != 2 {
		t.Errorf("got %+v", tr)
	}
	tr = DetectTests([]store.Command{{Command: "make test", ExitCode: &zero}, {Command: "make test", ExitCode: &one}})
	if tr == nil || tr.Passed {
		t.Errorf("last run failed but got %+v", tr)
	}
}

func TestReconcileMarksDeadTasks(t *testing.T) {
	o, err := New(Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"dead01", "live01", "done01"} {
		state := store.Running
		if id == "done01" {
			state = store.Kept
		}
		if err := o.Store().Save(&store.Task{ID: id, State: state, PID: 999999}); err != nil {
			t.Fatal(err)
		}
	}
	release, err := o.Store().Claim("live01")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	marked, err := o.Reconcile()
	if err != nil || len(marked) != 1 || marked[0] != "dead01" {
		t.Fatalf("marked %v, %v", marked, err)
	}
	for id, want := range map[string]store.State{"dead01": store.Interrupted, "live01": store.Running, "done01": store.Kept} {
		if tk, _ := o.Store().Load(id); tk.State != want {
			t.Errorf("%s: %s, want %s", id, tk.State, want)
		}
	}
}

func TestQuoteUnsafe(t *testing.T) {
	for in, want := range map[string]string{
		"secret.env":       "secret.env",
		"a b/c.txt":        "a b/c.txt",
		"evil\x1b[31m.txt": `"evil\x1b[31m.txt"`,
		"new\nline":        `"new\nline"`,
		`say "hi"`:         `"say \"hi\""`,
		"caf\u00e9":        `"café"`,
	} {
		if got := quoteUnsafe(in); got != want {
			t.Errorf("quoteUnsafe(%q) = %s, want %s", in, got, want)
		}
	}
}
