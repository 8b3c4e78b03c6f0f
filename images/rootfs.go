package images

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// writeDirTar streams the tree under dir as a tar archive with paths
// relative to dir, numeric owners, hard links preserved and symlinks kept
// as links (never followed). The contents of proc, sys and dev are left
// out: the engine provides them at run time, and device nodes from the
// build host have no business in an image. Extended attributes (file
// capabilities) are not carried: sandboxes drop every capability and set
// no-new-privileges, so they could never take effect.
func writeDirTar(dir string, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	skipContents := map[string]bool{"proc": true, "sys": true, "dev": true}

	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if top, _, nested := strings.Cut(rel, "/"); nested && skipContents[top] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		hdr.Name = rel
		if info.IsDir() {
			hdr.Name += "/"
		}
		// Numeric owners only: the host's user names mean nothing in
		// the image, and looking them up would mislabel files.
		hdr.Uname, hdr.Gname = "", ""
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if info.Mode().IsRegular() && st.Nlink > 1 {
				key := inode{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev's type differs by arch
				if first, seen := links[key]; seen {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					links[key] = rel
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// mountsUnder lists the mount points at or below dir, deepest first, from
// /proc/self/mountinfo.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space...) the
// kernel uses in mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeRootfs deletes a build directory. debootstrap mounts /proc, /sys
// and, inside containers, bind-mounts host device nodes into the target;
// an interrupted run can leave them mounted. Deleting recursively through
// such a mount would delete the host's files, so every mount below dir is
// unmounted first and nothing is deleted if one stays.
func removeRootfs(dir string) error {
	if dir == "" {
		return nil
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return fmt.Errorf("checking for mounts under %s: %w", dir, err)
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, 0); err != nil {
			// A busy mount goes lazily: it is detached from the tree
			// at once, which is all the removal below needs.
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if left, err := mountsUnder(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("not removing %s: still mounted: %s (unmount them, then delete the directory)", dir, strings.Join(left, ", "))
	}
	return os.RemoveAll(dir)
}

// trimRootfs removes what an image does not need: apt's package lists
// and caches (hundreds of MB of indexes), documentation except the
// copyright files, man and info pages, and logs from the build. The
// removals go through os.Root so no path can lead outside the tree, even
// through a symlink planted in it.
func trimRootfs(dir string) (int, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	removed := 0
	emptyDir := func(name string, keep func(string) bool) error {
		f, err := root.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		entries, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := name + "/" + e.Name()
			if keep != nil && keep(p) {
				continue
			}
			if err := root.RemoveAll(p); err != nil {
				return err
			}
			removed++
		}
		return nil
	}
	for _, d := range []string{"var/lib/apt/lists", "var/cache/apt", "var/cache/debconf", "usr/share/man", "usr/share/info", "var/log"} {
		keep := func(p string) bool {
			return p == "var/lib/apt/lists/partial" || p == "var/cache/apt/archives" || strings.HasSuffix(p, "config.dat") || strings.HasSuffix(p, "templates.dat") || strings.HasSuffix(p, "passwords.dat")
		}
		if err := emptyDir(d, keep); err != nil {
			return removed, fmt.Errorf("trimming %s: %w", d, err)
		}
	}
	if err := emptyDir("var/cache/apt/archives", func(p string) bool { return strings.HasSuffix(p, "/partial") || strings.HasSuffix(p, "/lock") }); err != nil {
		return removed, fmt.Errorf("trimming apt archives: %w", err)
	}
	// Keep each package's copyright file: the licences require it.
	f, err := root.Open("usr/share/doc")
	if err == nil {
		pkgs, _ := f.ReadDir(-1)
		f.Close()
		for _, p := range pkgs {
			if !p.IsDir() {
				continue
			}
			if err := emptyDir("usr/share/doc/"+p.Name(), func(q string) bool { return strings.HasSuffix(q, "/copyright") }); err != nil {
				return removed, fmt.Errorf("trimming docs: %w", err)
			}
		}
	}
	return removed, nil
}
