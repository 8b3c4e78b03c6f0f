package environment

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// ExtractTar writes a tar stream (git archive of a commit) into dir,
// which must exist and be empty. Every write goes through an os.Root, so
// no entry can reach outside dir, through a symlink or otherwise; at most
// maxBytes of file contents and maxEntries entries are written.
func ExtractTar(r io.Reader, dir string, maxBytes int64, maxEntries int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return ExtractTarRoot(r, root, maxBytes, maxEntries)
}

// ExtractTarRoot is ExtractTar into an open root.
func ExtractTarRoot(r io.Reader, root *os.Root, maxBytes int64, maxEntries int) error {
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the project archive: %w", err)
		}
		if n >= maxEntries {
			return fmt.Errorf("the project has more than %d files", maxEntries)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("project archive entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if total += h.Size; total > maxBytes {
				return fmt.Errorf("the project is larger than %d bytes", maxBytes)
			}
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			mode := fs.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, io.LimitReader(tr, h.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		default:
			// Submodules appear as empty directories; nothing else is
			// written by git archive.
		}
	}
}
