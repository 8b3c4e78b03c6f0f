package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/localagent/agent/sandbox/hostfs"
)

// WorkspaceUser picks the sandbox identity for a workspace directory as it
// is owned now: ChooseUser with this process's ids and the directory's
// owner. When the result says Chown, the caller hands the tree over with
// HandOver before the sandbox uses it.
func WorkspaceUser(dir string) (UserChoice, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return UserChoice{}, fmt.Errorf("workspace %s: %w", dir, err)
	}
	owner, group := 0, 0
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner, group = int(st.Uid), int(st.Gid)
	}
	return ChooseUser(os.Geteuid(), os.Getegid(), owner, group), nil
}

// chooseUser applies ChooseUser to the spec and, when the sandbox user must
// own the workspace, hands it over.
func chooseUser(s Spec) (UserChoice, string, error) {
	if s.User != "" {
		uid, gid, err := parseUser(s.User)
		return UserChoice{UID: uid, GID: gid}, "", err
	}
	u, err := WorkspaceUser(s.Workspace)
	if err != nil {
		return u, "", err
	}
	if !u.Chown {
		return u, "", nil
	}
	if s.RefuseChown {
		return u, "", &ChownRefusedError{Workspace: s.Workspace, UID: u.UID}
	}
	if err := chownAllowed(s.Workspace); err != nil {
		return u, "", err
	}
	if err := HandOver(s.Workspace, u); err != nil {
		return u, "", fmt.Errorf("the unprivileged sandbox cannot write its workspace: %w", err)
	}
	return u, fmt.Sprintf("running as root: the sandbox runs as unprivileged %s and the workspace %s was chowned to it", u, s.Workspace), nil
}

// chownAllowed refuses to hand over, unasked, a directory whose change of
// owner would damage the host: a top-level directory (/root, /etc, /srv)
// or one holding the caller's home.
func chownAllowed(ws string) error {
	clean := filepath.Clean(ws)
	refuse := strings.Count(clean, string(filepath.Separator)) < 2
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		if rel, err := filepath.Rel(clean, home); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
			refuse = true
		}
	}
	if refuse {
		return fmt.Errorf("running as root, the sandbox would need workspace %s handed to unprivileged uid %d, and that directory is too important to chown: use a project directory, or give the user to run as explicitly (--user UID:GID)", ws, NobodyUID)
	}
	return nil
}

// HandOver gives root and everything under it to the sandbox user u,
// never following a symlink (hostfs.ChownTree: a walk by open directory
// descriptors, bounded; a symlink as root or as any component is refused
// or changed as the link itself). Workspaces, task worktrees and
// environment exports are handed over here. Call it only while no
// sandbox process can write root.
func HandOver(root string, u UserChoice) error {
	if err := hostfs.ChownTree(root, u.UID, u.GID); err != nil {
		return fmt.Errorf("handing %s to uid %s: %w", root, u, err)
	}
	return nil
}

// ParseUser reads a sandbox user as Spec.User and Sandbox.User spell it:
// "uid" or "uid:gid", numeric.
func ParseUser(s string) (UserChoice, error) {
	uid, gid, err := parseUser(s)
	return UserChoice{UID: uid, GID: gid}, err
}
