package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
}
