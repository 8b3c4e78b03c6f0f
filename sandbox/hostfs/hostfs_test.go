package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func owner(t *testing.T, p string) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid)
}

// TestLchownChainRefusesSymlinkComponents: a symlink as a leading
// component is refused, so the file behind it keeps its owner. Control:
// os.Lchown by path, as before, follows the same link and changes it.
func TestLchownChainRefusesSymlinkComponents(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	root := t.TempDir()
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "y"), 0o700); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(host, "y", "f")
	if err := os.WriteFile(victim, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "x")); err != nil {
		t.Fatal(err)
	}
	err := LchownChain(root, "x/y/f", 65534, 65534)
	if !errors.Is(err, ErrSymlink) {
		t.Fatalf("LchownChain through a symlink: %v, want ErrSymlink", err)
	}
	if owner(t, victim) != 0 {
		t.Fatal("LchownChain changed the owner of a file behind a symlink")
	}
	if owner(t, filepath.Join(root, "x")) != 65534 {
		t.Error("the link itself was not handed over")
	}
	// Control: the path-based hand-over follows the link.
	if err := os.Lchown(filepath.Join(root, "x", "y", "f"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if owner(t, victim) != 65534 {
		t.Fatal("control failed: os.Lchown did not follow the leading symlink, so this test proves nothing")
	}

	// A real chain is handed over whole; a missing file is not an error.
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "b", "c"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LchownChain(root, "a/b/c", 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/c"} {
		if owner(t, filepath.Join(root, p)) != 65534 {
			t.Errorf("%s not handed over", p)
		}
	}
	if owner(t, root) != 0 {
		t.Error("the root itself was handed over")
	}
	if err := LchownChain(root, "a/gone/c", 1, 1); err != nil {
		t.Errorf("missing path: %v", err)
	}
	for _, bad := range []string{"../x", "/etc/passwd", "."} {
		if err := LchownChain(root, bad, 1, 1); err == nil {
			t.Errorf("LchownChain(%q) accepted", bad)
		}
	}
}

// TestChownTreeNeverEntersSymlinks: everything under the root is handed
// over, a symlink as the link itself, and nothing behind a link.
func TestChownTreeNeverEntersSymlinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	root := t.TempDir()
	host := t.TempDir()
	victim := filepath.Join(host, "f")
	if err := os.WriteFile(victim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d", "e", "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "d", "link")); err != nil {
		t.Fatal(err)
	}
	if err := ChownTree(root, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".", "d", "d/e", "d/e/g", "d/link"} {
		if owner(t, filepath.Join(root, p)) != 65534 {
			t.Errorf("%s not handed over", p)
		}
	}
	if owner(t, victim) != 0 || owner(t, host) != 0 {
		t.Fatal("ChownTree followed a symlink out of the tree")
	}
	if err := ChownTree(filepath.Join(root, "d", "link"), 1, 1); !errors.Is(err, ErrSymlink) {
		t.Errorf("ChownTree of a symlink root: %v", err)
	}
	// Control: a path-based chown through the link does reach the host
	// file, so the check above is a real one.
	if err := os.Chown(filepath.Join(root, "d", "link", "f"), 65534, 65534); err != nil || owner(t, victim) != 65534 {
		t.Fatalf("control failed: chown through the link did not reach the host file (%v), so this test proves nothing", err)
	}
}

// TestMeasureTree: sizes add up (a sparse file at its length), symlinks
// are counted as links and never followed, the largest files are kept
// in order, and the walk stops once past the bound.
func TestMeasureTree(t *testing.T) {
	root := t.TempDir()
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "huge"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int{"a": 1000, "d/b": 5000, "d/c": 3000} {
		if err := os.WriteFile(filepath.Join(root, name), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sparse, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(200 << 10); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	ts, err := MeasureTree(root, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Bytes < 209000 || ts.Bytes > 300<<10 {
		t.Errorf("total %d: want the files (209 KB) and directories, not what the link points to", ts.Bytes)
	}
	if len(ts.Largest) != 2 || ts.Largest[0].Path != "sparse" || ts.Largest[1].Path != "d/b" {
		t.Errorf("largest: %+v", ts.Largest)
	}
	if ts.Stopped {
		t.Error("stopped without a bound")
	}
	ts, err = MeasureTree(root, 10000, 0)
	if err != nil || !ts.Stopped {
		t.Errorf("bounded walk: %+v %v", ts, err)
	}
}

// BenchmarkMeasureTree10k measures the walk the disk bound makes, on
// 10,000 small files in 100 directories.
func BenchmarkMeasureTree10k(b *testing.B) {
	root := b.TempDir()
	for i := range 10_000 {
		p := filepath.Join(root, "pkg"+strconv.Itoa(i%100), "f"+strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := MeasureTree(root, 0, 64); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMakeDirsWritableNeverFollows: directories of the tree get 0700, a
// directory behind a symlink keeps its mode. Control: os.Chmod by path,
// as the removal did before, changes the directory behind the link.
func TestMakeDirsWritableNeverFollows(t *testing.T) {
	root := t.TempDir()
	host := t.TempDir()
	if err := os.Chmod(host, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(host, 0o755) })
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a/b", "a"} {
		if err := os.Chmod(filepath.Join(root, d), 0o500); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(host, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	mode := func(p string) os.FileMode {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	makeDirsWritable(root)
	for _, d := range []string{".", "a", "a/b"} {
		if m := mode(filepath.Join(root, d)); m != 0o700 {
			t.Errorf("%s: mode %o, want 700", d, m)
		}
	}
	if m := mode(host); m != 0o555 {
		t.Fatalf("the directory behind the symlink changed mode to %o", m)
	}
	if err := os.Chmod(filepath.Join(root, "link"), 0o700); err != nil {
		t.Fatal(err)
	}
	if mode(host) != 0o700 {
		t.Fatal("control failed: os.Chmod did not follow the link, so this test proves nothing")
	}
}

// TestWalkIsBounded: a tree nested deeper than MaxTreeDepth (the sandbox
// can make one: it is out of git's reach, but not out of a walk's) ends
// the walk with ErrTooDeep instead of holding a descriptor per level;
// RemoveTree still removes it. Control: one level less is walked whole.
// (The bound is lowered to keep the test fast.)
func TestWalkIsBounded(t *testing.T) {
	defer func(d int) { depthBound = d }(depthBound)
	depthBound = 64
	mk := func(levels int) string {
		root := t.TempDir()
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for range levels {
			if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
				t.Fatal(err)
			}
			next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			unix.Close(fd)
			if err != nil {
				t.Fatal(err)
			}
			fd = next
		}
		unix.Close(fd)
		return root
	}
	deep := mk(depthBound + 1)
	if _, err := MeasureTree(deep, 0, 0); !errors.Is(err, ErrTooDeep) {
		t.Errorf("walk of a tree %d deep: %v, want ErrTooDeep", depthBound+1, err)
	}
	if err := RemoveTree(deep); err != nil {
		t.Errorf("removing the deep tree: %v", err)
	}
	ts, err := MeasureTree(mk(depthBound), 0, 0)
	if err != nil || ts.Entries != depthBound {
		t.Errorf("control: walk of a tree %d deep: %d entries, %v", depthBound, ts.Entries, err)
	}
}
