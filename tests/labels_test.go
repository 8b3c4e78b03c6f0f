package tests

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// labelLiterals lists the Go files under root, tests included, other than
// policy/labels.go and this checker, that spell a label key as a string
// literal.
func labelLiterals(t *testing.T, root string) []string {
	t.Helper()
	var bad []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() || !strings.HasSuffix(p, ".go") || rel == filepath.Join("policy", "labels.go") || rel == filepath.Join("tests", "labels_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(`"dev.localagent.`)) {
			bad = append(bad, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad
}

// TestLabelKeysInOnePlace: label keys are what gc and ls find resources
// by; two spellings of one key would let a resource escape them (a test's
// cleanup as much as gc). Every key is declared in policy/labels.go and
// used through its constant.
func TestLabelKeysInOnePlace(t *testing.T) {
	for _, f := range labelLiterals(t, "..") {
		t.Errorf("%s spells a label key as a literal: use the constant from policy/labels.go", f)
	}
	// Control: a planted literal is found.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "images", "x.go"), []byte("package images\n\nconst k = \"dev.localagent.kind\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "images", "x_test.go"), []byte("package images\n\nconst k = \"dev.localagent.test\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := labelLiterals(t, dir); len(got) != 2 {
		t.Errorf("control: planted literal found in %v", got)
	}
}
