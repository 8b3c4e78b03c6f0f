package environment

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	d, err := Parse([]byte("base: agent/sandbox:latest\npackages: [golang-go, make]\nsetup:\n  - go mod download\nenv: {GOFLAGS: -mod=mod}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Packages, []string{"golang-go", "make"}) || d.Env["GOFLAGS"] != "-mod=mod" || len(d.Setup) != 1 {
		t.Fatalf("parsed %+v", d)
	}
	for _, bad := range []string{
		"packages: [\"golang-go; rm -rf /\"]\n", // not a package name
		"packages: [\"-oAPT::x=y\"]\n",          // an apt option
		"env: {PATH: /evil}\n",                  // reserved
		"env: {HTTP_PROXY: http://x}\n",         // reserved
		"env: {\"A B\": x}\n",                   // not a name
		"lockfiles: [../../etc/passwd]\n",       // outside the repository
		"lockfiles: [.git/config]\n",            // inside .git
		"network: [\"a b\"]\n",                  // not a host
		"unknown_key: 1\n",                      // strict
		"base: \"img\\\" x\"\n",                 // quotes
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
	if _, err := Parse([]byte(strings.Repeat("#", MaxFileBytes+1))); err == nil {
		t.Error("an oversized file was accepted")
	}
	if d, err := Parse(nil); err != nil || !d.Empty() {
		t.Errorf("empty file: %+v %v", d, err)
	}
}

func TestHash(t *testing.T) {
	d := &Definition{Packages: []string{"golang-go"}, Setup: []string{"go mod download"}}
	h := Hash(d, "sha256:base", "http://m", map[string][]byte{"go.sum": []byte("a")})
	if h != Hash(d, "sha256:base", "http://m", map[string][]byte{"go.sum": []byte("a")}) {
		t.Fatal("hash is not stable")
	}
	for name, other := range map[string]string{
		"lock file":  Hash(d, "sha256:base", "http://m", map[string][]byte{"go.sum": []byte("b")}),
		"base image": Hash(d, "sha256:other", "http://m", map[string][]byte{"go.sum": []byte("a")}),
		"mirror":     Hash(d, "sha256:base", "http://n", map[string][]byte{"go.sum": []byte("a")}),
		"definition": Hash(&Definition{Packages: []string{"golang-go", "make"}, Setup: d.Setup}, "sha256:base", "http://m", map[string][]byte{"go.sum": []byte("a")}),
	} {
		if other == h {
			t.Errorf("a different %s gives the same hash", name)
		}
	}
}

func TestDetect(t *testing.T) {
	files := []string{"go.mod", "go.sum", "main.go", "requirements-dev.txt", "README.md", "package.json", "Cargo.lock"}
	if got := DetectLockfiles(files); !slices.Equal(got, []string{"Cargo.lock", "go.mod", "go.sum", "package.json", "requirements-dev.txt"}) {
		t.Errorf("DetectLockfiles = %v", got)
	}
	if got := DetectEcosystems([]string{"go.mod"}, []string{"python3-pytest"}); !slices.Equal(got, []string{Go, Python}) {
		t.Errorf("DetectEcosystems = %v", got)
	}
}

func TestPropose(t *testing.T) {
	read := func(name string) []byte {
		if name == "requirements.txt" {
			return []byte("pytest==7\n")
		}
		return nil
	}
	d := Propose([]string{"go.mod", "go.sum", "requirements.txt", "Makefile", "src"}, []string{"src/main.c"}, read)
	for _, p := range []string{"golang-go", "python3", "python3-pytest", "make", "gcc"} {
		if !slices.Contains(d.Packages, p) {
			t.Errorf("proposal lacks %s: %v", p, d.Packages)
		}
	}
	if !slices.Contains(d.Setup, "go mod download") {
		t.Errorf("proposal lacks go mod download: %v", d.Setup)
	}
	if py := Propose([]string{"calc", "tests"}, []string{"calc/__init__.py", "tests/test_calc.py"}, read); !slices.Contains(py.Packages, "python3-pytest") {
		t.Errorf("a package directory with tests gives %v", py.Packages)
	}
	if _, err := Parse([]byte(d.YAML())); err != nil {
		t.Errorf("the proposal does not parse: %v\n%s", err, d.YAML())
	}
}

// TestProposeOffline: what a proposal holds must let the project's own
// tests run in a sandbox without network: a C compiler for a module that
// uses cgo, CGO_ENABLED=0 for one that does not (Debian's Go has no
// compiler of its own, and net or os/user then fail), src on PYTHONPATH
// for a src layout, never pip.
func TestProposeOffline(t *testing.T) {
	files := map[string]string{
		"go.mod":         "module example.com/m\n\ngo 1.21\n",
		"lib.go":         "package m\n\n// #include <stdlib.h>\nimport \"C\"\n",
		"pure.go":        "package m\n\nimport \"net\"\n\nvar _ = net.IPv4len\n",
		"grouped.go":     "package m\n\nimport (\n\t\"fmt\"\n\t\"C\"\n)\n",
		"pyproject.toml": "[tool.setuptools]\npackage-dir = {\"\" = \"src\"}\n[project.optional-dependencies]\ntest = [\"pytest\"]\n",
		"setup.cfg":      "[options]\npackage_dir =\n    = src\n",
	}
	read := func(name string) []byte { return []byte(files[name]) }
	cgo := Propose([]string{"go.mod", "lib.go"}, []string{"go.mod", "lib.go"}, read)
	if !slices.Contains(cgo.Packages, "gcc") || !slices.Contains(cgo.Packages, "libc6-dev") || cgo.Env["CGO_ENABLED"] != "" {
		t.Errorf("a cgo module gives %v %v", cgo.Packages, cgo.Env)
	}
	if g := Propose([]string{"go.mod", "grouped.go"}, []string{"go.mod", "grouped.go"}, read); !slices.Contains(g.Packages, "gcc") {
		t.Errorf("import \"C\" in a group is not seen: %v", g.Packages)
	}
	// Control: the same module without import "C" builds without cgo.
	pure := Propose([]string{"go.mod", "pure.go"}, []string{"go.mod", "pure.go"}, read)
	if slices.Contains(pure.Packages, "gcc") || pure.Env["CGO_ENABLED"] != "0" {
		t.Errorf("a pure Go module gives %v %v", pure.Packages, pure.Env)
	}
	if n := ProposalNotes(pure, read); len(n) != 1 || !strings.Contains(n[0], "go 1.21") || !strings.Contains(n[0], DebianGo) {
		t.Errorf("no note for go 1.21 against Go %s: %q", DebianGo, n)
	}
	files["go.mod"] = "module example.com/m\n\ngo 1.19\n"
	if n := ProposalNotes(pure, read); len(n) != 0 {
		t.Errorf("a note for go 1.19: %q", n)
	}

	src := Propose([]string{"pyproject.toml", "src", "tests"}, []string{"pyproject.toml", "src/pkg/__init__.py", "tests/test_pkg.py"}, read)
	if src.Env["PYTHONPATH"] != "src" || slices.Contains(src.Packages, "python3-pip") || !slices.Contains(src.Packages, "python3-pytest") {
		t.Errorf("a src layout gives %v %v", src.Packages, src.Env)
	}
	// Declared in the build configuration only (a namespace package).
	for _, f := range []string{"pyproject.toml", "setup.cfg"} {
		if d := Propose([]string{f, "src"}, []string{f, "src/ns/mod.py"}, read); d.Env["PYTHONPATH"] != "src" {
			t.Errorf("%s's src layout is not seen: %v", f, d.Env)
		}
	}
	// Control: a flat layout needs nothing on PYTHONPATH.
	if flat := Propose([]string{"calc", "tests"}, []string{"calc/__init__.py", "tests/test_calc.py"}, func(string) []byte { return nil }); flat.Env["PYTHONPATH"] != "" {
		t.Errorf("a flat layout gives %v", flat.Env)
	}
	for _, d := range []*Definition{cgo, pure, src} {
		if _, err := Parse([]byte(d.YAML())); err != nil {
			t.Errorf("the proposal does not parse: %v\n%s", err, d.YAML())
		}
	}
}

func TestMissingProgram(t *testing.T) {
	for out, want := range map[string]string{
		"/bin/bash: line 1: go: command not found\n[exit code 127]": "go",
		"sh: 1: pytest: not found":                                  "pytest",
		"env: 'node': No such file or directory":                    "node",
		"something else":                                            "",
	} {
		if got := MissingProgram(out); got != want {
			t.Errorf("MissingProgram(%q) = %q, want %q", out, got, want)
		}
	}
	if n := MissingNote("bash: line 1: go: command not found"); !strings.Contains(n, "golang-go") || !strings.Contains(n, File) {
		t.Errorf("note %q does not say how to add go", n)
	}
}

// evilTar holds a symlink to outside and a file written through it.
func evilTar(t *testing.T, outside string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: outside})
	body := "pwned"
	_ = tw.WriteHeader(&tar.Header{Name: "link/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
	_, _ = tw.Write([]byte(body))
	_ = tw.Close()
	return buf.Bytes()
}

// naiveExtract is what ExtractTar must not be: joining names to the
// directory and following whatever is there.
func naiveExtract(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeSymlink:
			_ = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			_, _ = io.Copy(f, tr)
			f.Close()
		}
	}
}

func TestExtractTarStaysInside(t *testing.T) {
	outside := t.TempDir()
	// Control: the archive does escape a naive extraction.
	naive := t.TempDir()
	_ = naiveExtract(bytes.NewReader(evilTar(t, outside)), naive)
	if _, err := os.Stat(filepath.Join(outside, "x")); err != nil {
		t.Fatalf("control: the naive extraction did not write outside (%v): the test proves nothing", err)
	}
	os.Remove(filepath.Join(outside, "x"))

	dir := t.TempDir()
	err := ExtractTar(bytes.NewReader(evilTar(t, outside)), dir, 1<<20, 100)
	if err == nil {
		t.Error("ExtractTar wrote through a symlink without an error")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("ExtractTar wrote outside its directory through a symlink")
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 0})
	_ = tw.Close()
	if err := ExtractTar(&buf, t.TempDir(), 1<<20, 100); err == nil {
		t.Error("a ../ entry was accepted")
	}
}

func TestCachesPerRepository(t *testing.T) {
	state := t.TempDir()
	a := CachesFor(state, "/src/a/.git", "/src/a")
	b := CachesFor(state, "/src/b/.git", "/src/b")
	if a.Dir == b.Dir {
		t.Fatal("two repositories share a cache directory")
	}
	mounts, env, err := a.Mounts([]string{Go, Python}, os.Getuid(), os.Getgid(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 2 || !slices.Contains(env, "GOMODCACHE=/cache/go/mod") || !slices.Contains(env, "PIP_CACHE_DIR=/cache/pip") {
		t.Fatalf("mounts %+v env %v", mounts, env)
	}
	// A symlink planted where a cache directory goes is refused.
	if err := os.Symlink("/etc", filepath.Join(b.Dir+"-x")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(b.Dir, "npm")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Mounts([]string{Node}, os.Getuid(), os.Getgid(), ""); err == nil {
		t.Fatal("a symlinked cache directory was mounted")
	}
	list, err := ListCaches(state)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListCaches = %+v, %v", list, err)
	}
	if removed, err := RemoveCaches(state, a.Repo); err != nil || len(removed) != 1 {
		t.Fatalf("RemoveCaches = %v, %v", removed, err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal("removal followed a symlink")
	}
}

func TestMergeEnv(t *testing.T) {
	got := MergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4"})
	if !slices.Equal(got, []string{"A=1", "B=3", "C=4"}) {
		t.Errorf("MergeEnv = %v", got)
	}
}

// The host's Go module cache, when seeding is on, is mounted read-only
// and used as the module proxy of last resort.
func TestSeedGo(t *testing.T) {
	seed := t.TempDir()
	c := CachesFor(t.TempDir(), "/src/a/.git", "/src/a")
	mounts, env, err := c.Mounts([]string{Go}, os.Getuid(), os.Getgid(), seed)
	if err != nil {
		t.Fatal(err)
	}
	var ro bool
	for _, m := range mounts {
		if m.Source == seed && m.ReadOnly && m.Target == "/cache/seed-go" {
			ro = true
		}
	}
	if !ro || !slices.Contains(env, "GOPROXY=file:///cache/seed-go") {
		t.Fatalf("mounts %+v env %v", mounts, env)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "go", "tmp")); err != nil {
		t.Errorf("GOTMPDIR was not created: %v", err)
	}
}

// A Go module cache is read-only directories; removing the caches must
// still succeed for their (non-root) owner, and must not follow a link
// planted in them.
func TestRemoveCachesReadOnlyTree(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	state := t.TempDir()
	outside := t.TempDir()
	victim := filepath.Join(outside, "keep")
	if err := os.WriteFile(victim, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(state, "caches", "k", "go", "pkg", "mod", "m@v1")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "a.go"), []byte("package m"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(mod, "link")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{mod, filepath.Dir(mod)} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	// Control: a plain RemoveAll cannot remove this tree.
	if err := os.RemoveAll(filepath.Dir(mod)); err == nil {
		t.Fatal("control: os.RemoveAll removed a read-only tree; the test proves nothing")
	}
	if _, err := RemoveCaches(state, "k"); err != nil {
		t.Fatalf("RemoveCaches: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(state, "caches", "k")); !os.IsNotExist(err) {
		t.Fatalf("cache still there: %v", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a file behind a link was removed: %v", err)
	}
}

// The proposal names the project's test command: the Makefile's own test
// target first, else the ecosystem's runner; none when nothing tells.
func TestProposeTest(t *testing.T) {
	files := map[string]string{"Makefile": "all:\n\tcc x.c\n\ntest: all\n\t./t\n", "package.json": `{"scripts": {"test": "jest"}}`}
	read := func(name string) []byte { return []byte(files[name]) }
	for _, c := range []struct {
		top  []string
		want string
	}{
		{[]string{"Makefile", "go.mod"}, "make test"},
		{[]string{"go.mod"}, "go test ./..."},
		{[]string{"Cargo.toml"}, "cargo test"},
		{[]string{"package.json"}, "npm test"},
		{[]string{"pytest.ini", "x.py"}, "python3 -m pytest"},
		{[]string{"README.md"}, ""},
	} {
		if got := Propose(c.top, c.top, read).Test; got != c.want {
			t.Errorf("Propose(%v).Test = %q, want %q", c.top, got, c.want)
		}
	}
	// The test command does not change the environment's image name.
	d := &Definition{Packages: []string{"make"}}
	h := Hash(d, "img", "m", nil)
	d.Test = "make test"
	if Hash(d, "img", "m", nil) != h {
		t.Error("a test command changed the environment's hash")
	}
}
