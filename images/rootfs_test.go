package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteDirTar(t *testing.T) {
	dir := t.TempDir()
	mk := func(p, body string) {
		t.Helper()
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/bin/tool", "#!/bin/sh\n")
	mk("proc/self/status", "must not be archived")
	mk("dev/null", "must not be archived")
	if err := os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool2")); err != nil {
		t.Fatal(err)
	}
	// A link pointing at a host path stays a link; its target is never read.
	if err := os.Symlink("/etc/shadow", filepath.Join(dir, "shadow")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeDirTar(dir, &buf); err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	for _, want := range []string{"usr/", "usr/bin/", "usr/bin/tool", "usr/bin/tool2", "shadow", "proc/", "dev/"} {
		if got[want] == nil {
			t.Errorf("missing %s in %v", want, keys(got))
		}
	}
	for _, not := range []string{"proc/self/", "proc/self/status", "dev/null"} {
		if got[not] != nil {
			t.Errorf("%s must not be archived", not)
		}
	}
	if h := got["shadow"]; h != nil && (h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc/shadow" || h.Size != 0) {
		t.Errorf("shadow: %+v, want a symlink to /etc/shadow", h)
	}
	t1, t2 := got["usr/bin/tool"], got["usr/bin/tool2"]
	if t1 == nil || t2 == nil || t1.Typeflag != tar.TypeReg || t2.Typeflag != tar.TypeLink || t2.Linkname != "usr/bin/tool" {
		t.Errorf("hard link not preserved: %+v %+v", t1, t2)
	}
}

func keys(m map[string]*tar.Header) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// An interrupted debootstrap can leave host directories mounted inside
// the build directory. removeRootfs must not delete through them.
func TestRemoveRootfsKeepsMountedHostFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount")
	}
	setup := func() (build, hostFile string) {
		host := t.TempDir()
		hostFile = filepath.Join(host, "precious")
		if err := os.WriteFile(hostFile, []byte("host data"), 0o644); err != nil {
			t.Fatal(err)
		}
		build = t.TempDir()
		target := filepath.Join(build, "rootfs", "dev", "host")
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(host, target, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("bind mount not permitted here: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) })
		return build, hostFile
	}

	// Control: a plain recursive delete goes through the mount and
	// destroys the host's file.
	build, hostFile := setup()
	_ = os.RemoveAll(build)
	if _, err := os.Stat(hostFile); err == nil {
		t.Fatal("control: os.RemoveAll did not reach through the bind mount; the test proves nothing")
	}

	build, hostFile = setup()
	if err := removeRootfs(build); err != nil {
		t.Fatalf("removeRootfs: %v", err)
	}
	if b, err := os.ReadFile(hostFile); err != nil || string(b) != "host data" {
		t.Fatalf("the host file behind the mount was harmed: %v", err)
	}
	if _, err := os.Stat(build); !os.IsNotExist(err) {
		t.Errorf("build directory still exists: %v", err)
	}
}

func TestTrimRootfs(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{
		"var/lib/apt/lists/deb.debian.org_dists_bookworm_main_binary-amd64_Packages",
		"var/cache/apt/pkgcache.bin",
		"var/cache/apt/archives/git_1_amd64.deb",
		"var/cache/debconf/config.dat", "var/cache/debconf/config.dat-old",
		"usr/share/doc/git/copyright", "usr/share/doc/git/changelog.gz",
		"usr/share/man/man1/git.1.gz",
		"var/log/dpkg.log",
		"usr/bin/git",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "var/lib/apt/lists/partial"), 0o700)
	// A symlink planted where a trimmed directory's entry would be must
	// be removed as a link, never followed.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "usr/share/man/evil"))

	if _, err := trimRootfs(dir); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"var/lib/apt/lists/deb.debian.org_dists_bookworm_main_binary-amd64_Packages", "var/cache/apt/pkgcache.bin", "var/cache/apt/archives/git_1_amd64.deb", "var/cache/debconf/config.dat-old", "usr/share/doc/git/changelog.gz", "usr/share/man/man1", "usr/share/man/evil", "var/log/dpkg.log"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s was not trimmed", gone)
		}
	}
	for _, kept := range []string{"usr/bin/git", "usr/share/doc/git/copyright", "var/cache/debconf/config.dat", "var/lib/apt/lists/partial", "var/cache/apt/archives"} {
		if _, err := os.Lstat(filepath.Join(dir, kept)); err != nil {
			t.Errorf("%s must be kept: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Error("trimming followed a symlink out of the root")
	}
}

func TestWriteBusyboxTar(t *testing.T) {
	var buf bytes.Buffer
	if err := writeBusyboxTar(&buf, []byte("ELF"), []string{"sh", "ls", "busybox", "../evil", "ls"}); err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if got[h.Name] != nil {
			t.Errorf("duplicate entry %s", h.Name)
		}
		got[h.Name] = h
	}
	if h := got["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp must be 1777: %+v", h)
	}
	if h := got["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("bin/sh: %+v", h)
	}
	for _, want := range []string{"bin/busybox", "etc/passwd", "etc/group", "workspace/", "usr/bin/env"} {
		if got[want] == nil {
			t.Errorf("missing %s", want)
		}
	}
	for name := range got {
		if strings.Contains(name, "..") {
			t.Errorf("unsafe applet name became an entry: %s", name)
		}
	}
}
