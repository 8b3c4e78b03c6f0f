package environment

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Propose suggests a definition from a repository's top-level names and
// (some of) its file paths at every level; read returns a top-level
// file's contents (nil when unreadable). It
// installs the Debian toolchain of each ecosystem found and, where a lock
// file makes it repeatable, a setup step that fills the dependency cache.
// Everything proposed must work offline in the task's sandbox: no package
// manager that could only reach the network (pip), and what a language
// needs to run the project's own tests (a C compiler for cgo, the source
// directory of a src layout on PYTHONPATH).
func Propose(files, all []string, read func(name string) []byte) *Definition {
	d := &Definition{}
	setEnv := func(k, v string) {
		if d.Env == nil {
			d.Env = map[string]string{}
		}
		d.Env[k] = v
	}
	// Source files count at any depth (a package directory of .py files,
	// C sources under src/).
	for _, p := range all {
		switch path.Ext(p) {
		case ".py", ".c", ".h", ".cpp", ".cc", ".hpp":
			if !slices.Contains(files, "*"+path.Ext(p)) {
				files = append(files, "*"+path.Ext(p))
			}
		}
	}
	has := func(patterns ...string) bool {
		for _, f := range files {
			for _, p := range patterns {
				if ok, _ := path.Match(p, f); ok {
					return true
				}
			}
		}
		return false
	}
	add := func(p ...string) { d.Packages = append(d.Packages, p...) }
	if has("go.mod") {
		add("golang-go")
		if has("go.sum") {
			d.Setup = append(d.Setup, "go mod download")
		}
		// Debian's golang-go (1.19) builds with cgo by default and has no
		// C compiler of its own: net and os/user then fail with
		// `cgo: C compiler "gcc" not found`. A module that uses cgo gets
		// the compiler; any other builds without cgo (the pure-Go net and
		// os/user), which needs nothing more.
		if usesCgo(all, read) {
			add("gcc", "libc6-dev")
		} else {
			setEnv("CGO_ENABLED", "0")
		}
	}
	if has("pyproject.toml", "requirements*.txt", "setup.py", "setup.cfg", "*.py") {
		add("python3")
		// Not python3-pip: the task's sandbox has no network, so pip
		// could install nothing there. A src layout is made importable
		// through PYTHONPATH, which an editable install would otherwise do.
		if srcLayout(files, all, read) {
			setEnv("PYTHONPATH", "src")
		}
		for _, f := range files {
			if ok, _ := path.Match("requirements*.txt", f); ok || f == "pyproject.toml" || f == "setup.cfg" || f == "tox.ini" || f == "pytest.ini" {
				if bytes.Contains(read(f), []byte("pytest")) {
					add("python3-pytest")
					break
				}
			}
		}
		if has("pytest.ini", "conftest.py", "tests", "test") && !slices.Contains(d.Packages, "python3-pytest") {
			add("python3-pytest")
		}
	}
	if has("package.json") {
		add("nodejs", "npm")
		if has("package-lock.json", "npm-shrinkwrap.json") {
			d.Setup = append(d.Setup, "npm ci --ignore-scripts")
		}
	}
	if has("Cargo.toml") {
		add("cargo", "rustc")
		if has("Cargo.lock") {
			d.Setup = append(d.Setup, "cargo fetch")
		}
	}
	if has("*.c", "*.h", "src", "configure", "CMakeLists.txt") && has("*.c", "*.h", "CMakeLists.txt", "configure") {
		add("gcc", "libc6-dev", "make")
	}
	if has("*.cpp", "*.cc", "*.hpp") {
		add("g++", "make")
	}
	if has("CMakeLists.txt") {
		add("cmake")
	}
	if has("Makefile", "makefile", "GNUmakefile") {
		add("make")
	}
	sort.Strings(d.Packages)
	d.Packages = slices.Compact(d.Packages)
	d.Test = proposeTest(has, read, slices.Contains(d.Packages, "python3-pytest"))
	return d
}

// maxCgoScan bounds the Go files usesCgo reads.
const maxCgoScan = 200

var importCRe = regexp.MustCompile(`(?m)^\s*import\s+"C"\s*$|^\s*"C"\s*$`)

// usesCgo reports whether a Go module has C sources next to its Go files
// or a Go file (among the first maxCgoScan non-test ones) imports "C".
func usesCgo(all []string, read func(string) []byte) bool {
	scanned := 0
	for _, p := range all {
		if strings.HasPrefix(p, "vendor/") || strings.Contains(p, "/testdata/") || strings.HasPrefix(p, "testdata/") {
			continue
		}
		switch path.Ext(p) {
		case ".c", ".cc", ".cpp", ".h", ".S":
			return true
		case ".go":
			if strings.HasSuffix(p, "_test.go") || scanned >= maxCgoScan {
				continue
			}
			scanned++
			if importCRe.Match(read(p)) {
				return true
			}
		}
	}
	return false
}

var packageDirSrcRe = regexp.MustCompile(`(?m)^\s*(?:package[-_]dir\s*=\s*\{\s*["']{2}\s*[:=]\s*["']src["']|where\s*=\s*\[?\s*["']?src["']?\s*\]?\s*$|package_dir\s*=\s*\n\s*=\s*src\s*$)`)

// srcLayout reports whether a Python project keeps its packages under
// src/: a package directory src/NAME/__init__.py, or the build
// configuration saying so (package-dir = {"" = "src"}, where = ["src"]).
func srcLayout(files, all []string, read func(string) []byte) bool {
	if !slices.Contains(files, "src") {
		return false
	}
	for _, p := range all {
		if parts := strings.Split(p, "/"); len(parts) == 3 && parts[0] == "src" && parts[2] == "__init__.py" {
			return true
		}
	}
	for _, f := range []string{"pyproject.toml", "setup.cfg", "setup.py"} {
		if slices.Contains(files, f) && packageDirSrcRe.Match(read(f)) {
			return true
		}
	}
	return false
}

// DebianGo is the Go version of golang-go in the default sandbox image's
// Debian suite (bookworm).
const DebianGo = "1.19"

var goLineRe = regexp.MustCompile(`(?m)^go\s+([0-9]+)\.([0-9]+)(?:\.[0-9]+)?\s*$`)

// ProposalNotes are what a proposal cannot settle by itself, for the user
// to read before committing it: today a go.mod asking for a newer Go than
// Debian's golang-go.
func ProposalNotes(d *Definition, read func(name string) []byte) []string {
	var notes []string
	if slices.Contains(d.Packages, "golang-go") {
		if m := goLineRe.FindSubmatch(read("go.mod")); m != nil {
			major, _ := strconv.Atoi(string(m[1]))
			minor, _ := strconv.Atoi(string(m[2]))
			if major > 1 || major == 1 && minor > 19 {
				notes = append(notes, fmt.Sprintf("go.mod asks for go %d.%d, newer than Debian bookworm's golang-go (Go %s): go test may refuse the module or fail on newer language features. "+
					"Set base: to a local image with Go %d.%d or later, or lower the go line if the code allows", major, minor, DebianGo, major, minor))
			}
		}
	}
	return notes
}

// makeTarget matches a Makefile rule named test or check.
var makeTarget = regexp.MustCompile(`(?m)^(test|check)\s*:`)

// proposeTest suggests the project's test command: the Makefile's own
// test (or check) target, else the usual runner of its ecosystem.
func proposeTest(has func(...string) bool, read func(string) []byte, pytest bool) string {
	for _, mk := range []string{"GNUmakefile", "makefile", "Makefile"} {
		if has(mk) {
			if m := makeTarget.FindSubmatch(read(mk)); m != nil {
				return "make " + string(m[1])
			}
		}
	}
	switch {
	case has("go.mod"):
		return "go test ./..."
	case has("Cargo.toml"):
		return "cargo test"
	case has("package.json") && bytes.Contains(read("package.json"), []byte(`"test"`)):
		return "npm test"
	case pytest:
		return "python3 -m pytest"
	case has("CMakeLists.txt"):
		return "cmake -S . -B build && cmake --build build && ctest --test-dir build"
	}
	return ""
}
