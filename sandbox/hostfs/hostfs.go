package hostfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The sandbox can write every name in the tree, so a path the host builds
// from names there may lead, through a symlink in any of its components,
// to a host file. These functions therefore never resolve a path: they
// walk it one component at a time from an open directory (openat with
// O_NOFOLLOW), so a symlink anywhere is refused (or, for the last
// component, acted on as the link itself) instead of followed. They are
// still only safe while nothing in the sandbox can run: between two steps
// a live process could swap what a name refers to.

// ErrSymlink is returned when a leading component of a path is a symlink
// (or not a directory).
var ErrSymlink = errors.New("a path component is a symlink or not a directory")

// openDirNoFollow opens name relative to dirfd as a directory, refusing a
// symlink (ErrSymlink). Errors do not name the path: callers do.
func openDirNoFollow(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, ErrSymlink
		}
		return -1, err
	}
	return fd, nil
}

func openRoot(root string) (int, error) {
	fd, err := openDirNoFollow(unix.AT_FDCWD, filepath.Clean(root))
	if err != nil {
		return -1, fmt.Errorf("%s: %w", root, err)
	}
	return fd, nil
}

// splitRel checks that rel is a relative path inside the root and splits
// it into its components.
func splitRel(rel string) ([]string, error) {
	clean := filepath.Clean(rel)
	if clean == "." || filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, fmt.Errorf("path %q is not inside the tree", rel)
	}
	return strings.Split(clean, "/"), nil
}

// LchownChain changes the owner of rel and of every directory between it
// and root (not root itself), never following a symlink: each directory
// is entered with O_NOFOLLOW and each entry changed with
// AT_SYMLINK_NOFOLLOW. A component that no longer exists ends the walk
// without an error (the file was deleted); a symlink as a leading
// component is an error wrapping ErrSymlink.
func LchownChain(root, rel string, uid, gid int) error {
	parts, err := splitRel(rel)
	if err != nil {
		return err
	}
	fd, err := openRoot(root)
	if err != nil {
		return err
	}
	defer func() { unix.Close(fd) }()
	for i, name := range parts {
		if err := unix.Fchownat(fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return &os.PathError{Op: "lchown", Path: filepath.Join(parts[:i+1]...), Err: err}
		}
		if i == len(parts)-1 {
			return nil
		}
		next, err := openDirNoFollow(fd, name)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return fmt.Errorf("%s: %w", filepath.Join(parts[:i+1]...), err)
		}
		unix.Close(fd)
		fd = next
	}
	return nil
}

// ChownTree changes the owner of root and of everything under it, walking
// by open directory descriptors: a symlink is changed as the link itself
// and never entered, and a symlink as root is refused (ErrSymlink). This
// is how a tree is handed to the sandbox user.
func ChownTree(root string, uid, gid int) error {
	fd, err := openRoot(root)
	if err != nil {
		return err
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "fchown", Path: root, Err: err}
	}
	return walkFD(fd, root, func(dirfd int, name, _ string, _ bool) error {
		if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "lchown", Path: name, Err: err}
		}
		return nil
	})
}

// MaxTreeDepth bounds how deep a walk goes: each level holds a directory
// descriptor open, and a tree the sandbox made deeper than any checkout
// could be (git's paths stop at PATH_MAX) must not exhaust them.
const MaxTreeDepth = 2048

// depthBound is MaxTreeDepth; tests lower it.
var depthBound = MaxTreeDepth

// MaxTreeEntries bounds the entries one walk visits.
const MaxTreeEntries = 2_000_000

// ErrTooManyEntries is returned when a tree has more than MaxTreeEntries
// entries; ErrTooDeep when it nests deeper than MaxTreeDepth.
var (
	ErrTooManyEntries = errors.New("the tree has too many entries to walk")
	ErrTooDeep        = errors.New("the tree nests too deep to walk")
)

// walker is one bounded walk.
type walker struct {
	root    string
	entries int
	fn      func(dirfd int, name, rel string, isDir bool) error
}

// walkFD calls fn for every entry under the directory open as fd (which
// it closes), depth first, entering only real directories (O_NOFOLLOW).
// fn gets the entry's name in dirfd and its path relative to the walk's
// root; an error from fn ends the walk. It stops with ErrTooManyEntries or
// ErrTooDeep past the bounds.
func walkFD(fd int, path string, fn func(dirfd int, name, rel string, isDir bool) error) error {
	w := &walker{root: path, fn: fn}
	return w.dir(fd, path, "", 0)
}

func (w *walker) dir(fd int, path, rel string, depth int) error {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if depth > depthBound {
		return fmt.Errorf("%s: %w (more than %d levels)", w.root, ErrTooDeep, depthBound)
	}
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			if w.entries++; w.entries > MaxTreeEntries {
				return fmt.Errorf("%s: %w (more than %d)", w.root, ErrTooManyEntries, MaxTreeEntries)
			}
			isDir := e.IsDir() // from d_type: a symlink is never IsDir
			erel := e.Name()
			if rel != "" {
				erel = rel + "/" + erel
			}
			if err := w.fn(fd, e.Name(), erel, isDir); err != nil {
				return err
			}
			if !isDir {
				continue
			}
			sub, err := openDirNoFollow(fd, e.Name())
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("%s: %w", filepath.Join(path, e.Name()), err)
			}
			if err := w.dir(sub, filepath.Join(path, e.Name()), erel, depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || (err == nil && len(ents) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// SizedFile is one file of a measured tree.
type SizedFile struct {
	Path  string `json:"path"` // relative to the tree's root
	Bytes int64  `json:"bytes"`
}

// TreeSize is what MeasureTree found.
type TreeSize struct {
	// Bytes is the sum over every entry of the larger of its length and
	// the space it takes on disk (a sparse file counts at its length: git
	// would read all of it).
	Bytes int64
	// Entries is the number of entries visited.
	Entries int
	// Stopped says the walk ended early because Bytes passed the bound
	// it was given: Bytes is then a lower bound.
	Stopped bool
	// Largest are the largest regular files, largest first.
	Largest []SizedFile
}

var errStopWalk = errors.New("stop")

// MeasureTree adds up the size of everything under root without following
// a symlink anywhere (see ChownTree), keeping the keep largest regular
// files. With stopAt > 0 it stops as soon as the total passes stopAt. It
// reads metadata only, within the walk's bounds.
func MeasureTree(root string, stopAt int64, keep int) (TreeSize, error) {
	var ts TreeSize
	fd, err := openRoot(root)
	if err != nil {
		return ts, err
	}
	err = walkFD(fd, root, func(dirfd int, name, rel string, _ bool) error {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return &os.PathError{Op: "lstat", Path: rel, Err: err}
		}
		ts.Entries++
		n := max(st.Size, st.Blocks*512)
		ts.Bytes += n
		if keep > 0 && st.Mode&unix.S_IFMT == unix.S_IFREG {
			ts.Largest = keepLargest(ts.Largest, SizedFile{Path: rel, Bytes: n}, keep)
		}
		if stopAt > 0 && ts.Bytes > stopAt {
			ts.Stopped = true
			return errStopWalk
		}
		return nil
	})
	if errors.Is(err, errStopWalk) {
		err = nil
	}
	return ts, err
}

// keepLargest inserts f into list (largest first) and keeps at most n.
func keepLargest(list []SizedFile, f SizedFile, n int) []SizedFile {
	if len(list) == n && list[n-1].Bytes >= f.Bytes {
		return list
	}
	i := len(list)
	for i > 0 && list[i-1].Bytes < f.Bytes {
		i--
	}
	list = append(list, SizedFile{})
	copy(list[i+1:], list[i:])
	list[i] = f
	if len(list) > n {
		list = list[:n]
	}
	return list
}

// chmodNoFollow sets the mode of the directory name in dirfd without
// following a symlink: the directory is pinned with O_PATH|O_NOFOLLOW and
// changed through its /proc/self/fd link, which names that very inode.
func chmodNoFollow(dirfd int, name string, mode uint32) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode)
}

// RemoveTree removes a tree a sandbox may have made unwritable (a
// directory chmod 000, or Go's read-only module cache, cannot be emptied
// by a non-root owner). It never follows symlinks: os.RemoveAll unlinks a
// link itself, and the modes are fixed by makeDirsWritable's walk.
func RemoveTree(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	makeDirsWritable(path)
	return os.RemoveAll(path)
}

// makeDirsWritable gives the owner every permission on root and every
// directory under it (best effort), so that a tree the sandbox made
// unwritable can be removed; it never follows a symlink.
func makeDirsWritable(root string) {
	_ = chmodNoFollow(unix.AT_FDCWD, filepath.Clean(root), 0o700)
	fd, err := openRoot(root)
	if err != nil {
		return
	}
	_ = walkFD(fd, root, func(dirfd int, name, _ string, isDir bool) error {
		if isDir {
			_ = chmodNoFollow(dirfd, name, 0o700)
		}
		return nil
	})
}
