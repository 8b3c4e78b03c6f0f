package environment

import (
	"bytes"
	"path"
	"slices"
	"sort"
)

// Propose suggests a definition from a repository's top-level names and
// (some of) its file paths at every level; read returns a top-level
// file's contents (nil when unreadable). It
// installs the Debian toolchain of each ecosystem found and, where a lock
// file makes it repeatable, a setup step that fills the dependency cache.
func Propose(files, all []string, read func(name string) []byte) *Definition {
	d := &Definition{}
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
	}
	if has("pyproject.toml", "requirements*.txt", "setup.py", "setup.cfg", "*.py") {
		add("python3")
		if has("requirements*.txt", "pyproject.toml", "setup.py") {
			add("python3-pip")
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
	return d
}
