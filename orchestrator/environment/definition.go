package environment

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is where a repository describes its environment.
const File = ".agent/environment.yaml"

// Limits on a definition: it comes from the repository and is bounded like
// any other untrusted input.
const (
	MaxFileBytes  = 64 << 10
	maxPackages   = 200
	maxSetup      = 50
	maxEnv        = 100
	maxLockfiles  = 50
	maxValueBytes = 4096
)

// Definition is one environment: a base image, Debian packages installed
// on it, setup steps run once in the project root, and environment
// variables for every command of a task.
type Definition struct {
	// Base is a local image ("" = the configured sandbox image).
	Base string `yaml:"base,omitempty" json:"base,omitempty"`
	// Packages are Debian package names.
	Packages []string `yaml:"packages,omitempty" json:"packages,omitempty"`
	// Setup are shell commands run at build time, in order, in a checkout
	// of the project, as the sandbox user.
	Setup []string `yaml:"setup,omitempty" json:"setup,omitempty"`
	// Env is set for setup and for every command of a task.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Lockfiles are the files (relative to the repository root) whose
	// contents the environment depends on; empty means those detected
	// (go.sum, requirements*.txt, package-lock.json, Cargo.lock ...).
	Lockfiles []string `yaml:"lockfiles,omitempty" json:"lockfiles,omitempty"`
	// Network lists the hosts setup needs. It is a request, not a grant:
	// a build is refused unless the user's configuration allows each one.
	Network []string `yaml:"network,omitempty" json:"network,omitempty"`
	// Test is the project's test command. The orchestrator runs it in
	// the task's sandbox after the agent's last turn; its exit code is
	// the review's verdict. It does not change the environment's image.
	Test string `yaml:"test,omitempty" json:"test,omitempty"`
}

var (
	// Debian policy 5.6.1: lower case letters, digits, + - . ; at least
	// two characters, starting with an alphanumeric.
	packageRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	envKeyRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// reservedEnv are set by the sandbox itself and may not be replaced.
	reservedEnv = []string{"HOME", "USER", "PATH", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
		"http_proxy", "https_proxy", "all_proxy", "no_proxy", "LD_PRELOAD", "LD_LIBRARY_PATH"}
)

// Parse reads and checks a definition.
func Parse(data []byte) (*Definition, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", File, MaxFileBytes)
	}
	var d Definition
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil && err.Error() != "EOF" {
		return nil, fmt.Errorf("%s: %w", File, err)
	}
	if err := d.Check(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Check validates every field.
func (d *Definition) Check() error {
	if len(d.Packages) > maxPackages || len(d.Setup) > maxSetup || len(d.Env) > maxEnv || len(d.Lockfiles) > maxLockfiles {
		return fmt.Errorf("%s: too many entries (at most %d packages, %d setup steps, %d env variables, %d lock files)", File, maxPackages, maxSetup, maxEnv, maxLockfiles)
	}
	if d.Base != "" && (len(d.Base) > 256 || strings.ContainsAny(d.Base, " \t\n\"'\\")) {
		return fmt.Errorf("%s: base %q is not an image reference", File, d.Base)
	}
	for _, p := range d.Packages {
		if !packageRe.MatchString(p) {
			return fmt.Errorf("%s: %q is not a Debian package name", File, p)
		}
	}
	for _, s := range d.Setup {
		if strings.TrimSpace(s) == "" || len(s) > maxValueBytes || strings.ContainsRune(s, 0) {
			return fmt.Errorf("%s: a setup step is empty, too long or holds a NUL byte", File)
		}
	}
	for k, v := range d.Env {
		if !envKeyRe.MatchString(k) {
			return fmt.Errorf("%s: %q is not an environment variable name", File, k)
		}
		if slices.Contains(reservedEnv, k) {
			return fmt.Errorf("%s: %s is set by the sandbox and cannot be changed", File, k)
		}
		if len(v) > maxValueBytes || strings.ContainsAny(v, "\x00\n") {
			return fmt.Errorf("%s: the value of %s is too long or holds a newline", File, k)
		}
	}
	for _, l := range d.Lockfiles {
		if !cleanRel(l) {
			return fmt.Errorf("%s: lock file %q must be a plain path inside the repository", File, l)
		}
	}
	if len(d.Test) > maxValueBytes || strings.ContainsRune(d.Test, 0) {
		return fmt.Errorf("%s: the test command is too long or holds a NUL byte", File)
	}
	for _, h := range d.Network {
		if h == "" || len(h) > 255 || strings.ContainsAny(h, " \t\n/") {
			return fmt.Errorf("%s: network entry %q is not a host", File, h)
		}
	}
	return nil
}

func cleanRel(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || strings.Contains(p, "\\") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." || part == ".git" {
			return false
		}
	}
	return true
}

// Empty reports whether the definition asks for nothing beyond its base.
func (d *Definition) Empty() bool {
	return d == nil || len(d.Packages) == 0 && len(d.Setup) == 0 && len(d.Env) == 0 && d.Base == ""
}

// EnvList is Env as sorted "KEY=value" entries.
func (d *Definition) EnvList() []string {
	out := make([]string, 0, len(d.Env))
	for k, v := range d.Env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// YAML renders the definition as an environment file.
func (d *Definition) YAML() string {
	b, err := yaml.Marshal(d)
	if err != nil {
		return ""
	}
	return string(b)
}

// lockfilePatterns are the files detected as dependency locks when a
// definition lists none: top-level files only, matched by name.
var lockfilePatterns = []string{
	"go.mod", "go.sum", "go.work", "go.work.sum",
	"requirements*.txt", "constraints*.txt", "pyproject.toml", "poetry.lock", "Pipfile.lock", "uv.lock", "setup.py", "setup.cfg",
	"package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
	"Cargo.toml", "Cargo.lock", "Gemfile.lock", "composer.lock",
}

// DetectLockfiles returns the names among files (top-level names of the
// repository) that an environment depends on.
func DetectLockfiles(files []string) []string {
	var out []string
	for _, f := range files {
		for _, p := range lockfilePatterns {
			if ok, _ := pathMatch(p, f); ok {
				out = append(out, f)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// Hash names an environment: the definition, the base image's ID, the
// Debian mirror and the contents of the lock files (name -> bytes; a
// missing file is absent from the map). Any change gives a new name.
func Hash(d *Definition, baseID, mirror string, locks map[string][]byte) string {
	h := sha256.New()
	image := *d
	image.Test = ""                // the test command is not part of the image
	def, _ := json.Marshal(&image) // map keys are sorted by encoding/json
	fmt.Fprintf(h, "environment v1\ndef %s\nbase %s\nmirror %s\n", def, baseID, mirror)
	names := make([]string, 0, len(locks))
	for n := range locks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := sha256.Sum256(locks[n])
		fmt.Fprintf(h, "lock %q %x\n", n, s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// packagesHash names the image holding base + packages alone, shared by
// every environment (and repository) that asks for the same packages.
func packagesHash(baseID, mirror string, packages []string) string {
	p := slices.Clone(packages)
	sort.Strings(p)
	p = slices.Compact(p)
	s := sha256.Sum256([]byte(fmt.Sprintf("packages v1\nbase %s\nmirror %s\n%s", baseID, mirror, strings.Join(p, "\n"))))
	return hex.EncodeToString(s[:])
}
