package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// busyboxCandidates are where Debian's busybox-static (and most distros'
// static busybox packages) install the binary.
var busyboxCandidates = []string{"/bin/busybox", "/usr/bin/busybox", "/usr/sbin/busybox", "/sbin/busybox"}

func busyboxRecipe() recipe {
	return recipe{
		preflight: func() error { _, err := findStaticBusybox(); return err },
		rootfs:    busyboxRootfs,
		changes:   []string{"ENV PATH=/bin", `CMD ["sh"]`},
		verify:    []string{"sh", "-c", "echo ok from $(busybox | head -n 1)"},
	}
}

// findStaticBusybox returns the first statically linked busybox on the
// host. A dynamic one would not run in an image that has no libc.
func findStaticBusybox() (string, error) {
	var dynamic []string
	for _, p := range busyboxCandidates {
		ok, err := isStaticELF(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil && ok {
			return p, nil
		}
		dynamic = append(dynamic, p)
	}
	if len(dynamic) > 0 {
		return "", fmt.Errorf("%s is not statically linked: install busybox-static (`apt-get install busybox-static`)", strings.Join(dynamic, ", "))
	}
	return "", fmt.Errorf("no busybox found in %s: install busybox-static (`apt-get install busybox-static`)", strings.Join(busyboxCandidates, ", "))
}

// isStaticELF reports whether path is an ELF executable without a program
// interpreter (the dynamic loader), i.e. statically linked.
func isStaticELF(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		return false, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

func busyboxRootfs(ctx context.Context, b *build) (func(io.Writer) error, string, func(), error) {
	noop := func() {}
	st := b.p.start(b.def.Name, "rootfs", "writing a busybox root filesystem")
	bin, err := findStaticBusybox()
	if err != nil {
		return nil, "", noop, err
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, "", noop, fmt.Errorf("reading %s: %w", bin, err)
	}
	// The static binary runs on the host as well; ask it which applets
	// it has rather than keeping a list that drifts between versions.
	out, err := exec.CommandContext(ctx, bin, "--list").Output()
	if err != nil {
		return nil, "", noop, fmt.Errorf("listing busybox applets with %s --list: %w", bin, err)
	}
	applets := strings.Fields(string(out))
	version := ""
	if help, err := exec.CommandContext(ctx, bin).CombinedOutput(); err == nil || len(help) > 0 {
		version = firstLine(string(help))
	}
	var buf bytes.Buffer
	if err := writeBusyboxTar(&buf, body, applets); err != nil {
		return nil, "", noop, err
	}
	st.done(fmt.Sprintf("%s, %d applets, %s", bin, len(applets), humanSize(int64(buf.Len()))))
	info := fmt.Sprintf("busybox-static from=%s (%s)", bin, version)
	return func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }, info, noop, nil
}

// writeBusyboxTar lays out a minimal root: /bin/busybox with one symlink
// per applet, /etc/passwd and /etc/group so tools can name root and
// nobody, a world-writable sticky /tmp, and /workspace for the bind mount.
func writeBusyboxTar(w io.Writer, busybox []byte, applets []string) error {
	tw := tar.NewWriter(w)
	now := time.Now().UTC().Truncate(time.Second)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: now})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	link := func(name, target string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: now})
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin", 0o755}, {"dev", 0o755}, {"etc", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"root", 0o700}, {"tmp", 0o1777}, {"usr", 0o755}, {"usr/bin", 0o755}, {"workspace", 0o755}} {
		if err := dir(d.name, d.mode); err != nil {
			return err
		}
	}
	if err := file("bin/busybox", 0o755, busybox); err != nil {
		return err
	}
	sort.Strings(applets)
	seen := map[string]bool{"busybox": true}
	for _, a := range applets {
		// Applet names come from the binary; refuse anything that is not
		// a plain file name.
		if seen[a] || a == "" || strings.ContainsAny(a, "/\\") || a == "." || a == ".." {
			continue
		}
		seen[a] = true
		if err := link("bin/"+a, "busybox"); err != nil {
			return err
		}
	}
	// Scripts start with #!/usr/bin/env sh as often as #!/bin/sh.
	if err := link("usr/bin/env", "/bin/busybox"); err != nil {
		return err
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")); err != nil {
		return err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")); err != nil {
		return err
	}
	return tw.Close()
}
