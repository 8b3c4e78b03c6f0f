package environment

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/hostfs"
)

// Ecosystems whose dependency caches are kept.
const (
	Go     = "go"
	Python = "python"
	Node   = "node"
	Rust   = "rust"
)

// ecosystem is where one ecosystem's cache goes in a sandbox and which
// standard variables point the tools at it.
type ecosystem struct {
	dir    string // host directory name and target under sandbox.CacheRoot
	env    []string
	files  []string // top-level files that reveal the ecosystem
	debian []string // package-name prefixes that do
	// subdirs must exist before the tools run.
	subdirs []string
}

var ecosystems = map[string]ecosystem{
	// GOTMPDIR: go's work directories (test binaries, link outputs) go
	// to the cache's disk instead of the size-limited tmpfs /tmp.
	Go: {dir: "go", env: []string{"GOMODCACHE=/cache/go/mod", "GOCACHE=/cache/go/build", "GOTMPDIR=/cache/go/tmp", "GOTOOLCHAIN=local"},
		subdirs: []string{"tmp"},
		files:   []string{"go.mod", "go.work"}, debian: []string{"golang"}},
	// pytest's cache (--lf, --ff) goes to /tmp too: in the project it
	// would warn where it cannot be written and be committed where it can.
	Python: {dir: "pip", env: []string{"PIP_CACHE_DIR=/cache/pip", "PYTHONPYCACHEPREFIX=/tmp/pycache", "PYTEST_ADDOPTS=-o cache_dir=/tmp/pytest-cache"},
		files: []string{"pyproject.toml", "requirements*.txt", "setup.py", "setup.cfg", "Pipfile", "*.py"}, debian: []string{"python3"}},
	Node: {dir: "npm", env: []string{"npm_config_cache=/cache/npm"},
		files: []string{"package.json"}, debian: []string{"nodejs", "npm"}},
	Rust: {dir: "cargo", env: []string{"CARGO_HOME=/cache/cargo"},
		files: []string{"Cargo.toml"}, debian: []string{"cargo", "rustc"}},
}

// DetectEcosystems names the ecosystems of a repository from its top-level
// file names and the packages its environment installs.
func DetectEcosystems(files, packages []string) []string {
	var out []string
	for name, e := range ecosystems {
		found := false
		for _, f := range files {
			for _, p := range e.files {
				if ok, _ := pathMatch(p, f); ok {
					found = true
				}
			}
		}
		for _, p := range packages {
			for _, pre := range e.debian {
				if strings.HasPrefix(p, pre) {
					found = true
				}
			}
		}
		if found {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// RepoKey identifies a repository by its common git directory: caches and
// environment images are never shared between two keys.
func RepoKey(commonGitDir string) string {
	s := sha256.Sum256([]byte(filepath.Clean(commonGitDir)))
	return hex.EncodeToString(s[:6])
}

// Caches are one repository's dependency caches under a state directory.
type Caches struct {
	// Dir is <state>/caches/<repo key>.
	Dir  string
	Repo string // the repository's checkout, for listings
}

// CachesFor returns the caches of a repository.
func CachesFor(stateDir, commonGitDir, checkout string) Caches {
	return Caches{Dir: filepath.Join(stateDir, "caches", RepoKey(commonGitDir)), Repo: checkout}
}

// Mounts creates (when missing) the cache directories of ecos, owned by
// uid:gid (the sandbox user), and returns the mounts and environment a
// sandbox needs to use them. seedGo, when not empty, is a host Go module
// download cache mounted read-only and used as the module proxy of last
// resort (GOPROXY=file://...), for machines with no network at all.
func (c Caches) Mounts(ecos []string, uid, gid int, seedGo string) ([]sandbox.Mount, []string, error) {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("cache directory: %w", err)
	}
	if fi, err := os.Lstat(c.Dir); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("cache directory %s is not a directory", c.Dir)
	}
	if c.Repo != "" {
		_ = os.WriteFile(filepath.Join(c.Dir, "repo"), []byte(c.Repo+"\n"), 0o600)
	}
	var mounts []sandbox.Mount
	var env []string
	for _, name := range ecos {
		e, ok := ecosystems[name]
		if !ok {
			continue
		}
		dir := filepath.Join(c.Dir, e.dir)
		switch err := os.Mkdir(dir, 0o700); {
		case err == nil:
			// A new directory is handed to the sandbox user; an old one
			// already is, and is never walked here (the sandbox writes it).
			if err := os.Lchown(dir, uid, gid); err != nil {
				return nil, nil, fmt.Errorf("cache %s: %w", dir, err)
			}
		case errors.Is(err, fs.ErrExist):
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
				return nil, nil, fmt.Errorf("cache %s is not a directory", dir)
			}
		default:
			return nil, nil, fmt.Errorf("cache %s: %w", dir, err)
		}
		if len(e.subdirs) > 0 {
			// The directory is the sandbox's to write: create what is
			// missing through a root, never through a link it planted.
			root, err := os.OpenRoot(dir)
			if err != nil {
				return nil, nil, fmt.Errorf("cache %s: %w", dir, err)
			}
			for _, sd := range e.subdirs {
				if err := root.Mkdir(sd, 0o700); err == nil {
					_ = root.Lchown(sd, uid, gid)
				}
			}
			root.Close()
		}
		mounts = append(mounts, sandbox.Mount{Source: dir, Target: sandbox.CacheRoot + "/" + e.dir})
		env = append(env, e.env...)
		if name == Go && seedGo != "" {
			if fi, err := os.Stat(seedGo); err == nil && fi.IsDir() {
				mounts = append(mounts, sandbox.Mount{Source: seedGo, Target: sandbox.CacheRoot + "/seed-go", ReadOnly: true})
				env = append(env, "GOPROXY=file://"+sandbox.CacheRoot+"/seed-go", "GONOSUMDB=*", "GOFLAGS=-mod=mod")
			}
		}
	}
	return mounts, env, nil
}

// MergeEnv appends override's entries to base, an entry of override
// replacing one of base with the same key.
func MergeEnv(base, override []string) []string {
	out := slices.Clone(base)
	for _, kv := range override {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(s string) bool { return strings.HasPrefix(s, k+"=") })
		out = append(out, kv)
	}
	return out
}

// CacheInfo describes one repository's caches.
type CacheInfo struct {
	Key   string           `json:"key"`
	Repo  string           `json:"repo"`
	Dir   string           `json:"dir"`
	Sizes map[string]int64 `json:"sizes"` // ecosystem directory -> bytes
	// Truncated is set when a cache held more entries than are counted.
	Truncated bool `json:"truncated,omitempty"`
}

// maxCountEntries bounds the walk that sizes a cache.
const maxCountEntries = 1_000_000

// ListCaches describes every repository's caches under stateDir. Sizes are
// counted with lstat only: nothing in a cache is opened or followed.
func ListCaches(stateDir string) ([]CacheInfo, error) {
	root := filepath.Join(stateDir, "caches")
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []CacheInfo
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		ci := CacheInfo{Key: e.Name(), Dir: dir, Sizes: map[string]int64{}}
		if b, err := readBounded(filepath.Join(dir, "repo"), 4096); err == nil {
			ci.Repo = strings.TrimSpace(string(b))
		}
		subs, _ := os.ReadDir(dir)
		n := 0
		for _, s := range subs {
			if !s.IsDir() {
				continue
			}
			var size int64
			_ = filepath.WalkDir(filepath.Join(dir, s.Name()), func(_ string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if n++; n > maxCountEntries {
					ci.Truncated = true
					return filepath.SkipAll
				}
				if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
					size += info.Size()
				}
				return nil
			})
			ci.Sizes[s.Name()] = size
		}
		out = append(out, ci)
	}
	return out, nil
}

// RemoveCaches deletes one repository's caches (by key, or all with
// key ""). Removal never follows a symlink.
func RemoveCaches(stateDir, key string) ([]string, error) {
	list, err := ListCaches(stateDir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, c := range list {
		if key != "" && c.Key != key && c.Repo != key {
			continue
		}
		if err := hostfs.RemoveTree(c.Dir); err != nil {
			return removed, fmt.Errorf("removing %s: %w", c.Dir, err)
		}
		removed = append(removed, c.Key)
	}
	if key != "" && len(removed) == 0 {
		return nil, fmt.Errorf("no caches for %q (see `agent env cache ls`)", key)
	}
	return removed, nil
}

// readBounded reads at most n bytes of a regular file, never through a
// symlink.
func readBounded(p string, n int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscallNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return b[:k], nil
}
