package worktree

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// special is the mode of files git cannot record: FIFOs, sockets and
// devices. `git add` stops at the first one ("can only add regular files"),
// so one such file in place of a tracked file would keep all of a task's
// work off its branch. They are left out of every commit and named.
const special = fs.ModeNamedPipe | fs.ModeSocket | fs.ModeDevice | fs.ModeCharDevice | fs.ModeIrregular

// specialFiles returns those of paths (relative to root, as git status
// gives them) that are FIFOs, sockets or devices in the worktree. It
// never follows a symlink: a path below a symlinked directory is not a
// file of the worktree (git records the link). Callers run it while no
// sandbox can change the tree.
func (r *Repo) specialFiles(root string, paths []string) []string {
	if r.UnsafeAddSpecial {
		return nil
	}
	return specialFiles(root, paths)
}

func specialFiles(root string, paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" || strings.HasSuffix(p, "/") {
			continue
		}
		if isSpecial(root, p) {
			out = append(out, p)
		}
	}
	return out
}

func isSpecial(root, rel string) bool {
	parts := strings.Split(rel, "/")
	dir := root
	for _, part := range parts[:len(parts)-1] {
		if part == "" || part == "." || part == ".." {
			return false
		}
		dir = filepath.Join(dir, part)
		st, err := os.Lstat(dir)
		if err != nil || !st.IsDir() {
			return false
		}
	}
	st, err := os.Lstat(filepath.Join(dir, parts[len(parts)-1]))
	return err == nil && st.Mode()&special != 0
}

// SpecialAmong returns those of a worktree's changed paths (as Changes
// gives them) that are FIFOs, sockets or devices: they are never committed
// (see CommitAll) and stay in the worktree only. Call it while no sandbox
// can change the tree.
func SpecialAmong(root string, changes []string) []string { return specialFiles(root, changes) }
