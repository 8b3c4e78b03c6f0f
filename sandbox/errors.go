package sandbox

import (
	"errors"
	"fmt"
)

// ErrNotFound is wrapped by errors about a sandbox that does not exist (or
// is not one of this project's).
var ErrNotFound = errors.New("sandbox not found")

// ErrNotRunning is wrapped by errors about a sandbox whose container has
// stopped; it cannot run tools any more.
var ErrNotRunning = errors.New("sandbox is not running")

func notFound(ref string) error {
	return fmt.Errorf("no sandbox matches %q: list them with `agent sandbox ls`: %w", ref, ErrNotFound)
}

func notRunning(id, state string, exitCode int, oom bool) error {
	why := state
	if why == "" {
		why = "stopped"
	}
	if state == "exited" {
		why = fmt.Sprintf("exited with code %d", exitCode)
	}
	if oom {
		why += ", out of memory"
	}
	return fmt.Errorf("sandbox %s is not running (%s): remove it with `agent sandbox rm %s` and create a new one: %w", shortID(id), why, shortID(id), ErrNotRunning)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ChownRefusedError says that a sandbox would have to take ownership of a
// root-owned workspace (the caller is root) and Spec.RefuseChown forbade it.
type ChownRefusedError struct {
	Workspace string
	UID       int
}

func (e *ChownRefusedError) Error() string {
	return fmt.Sprintf("workspace %s belongs to root, and a sandbox never runs as root: it would have to be chowned (recursively) to unprivileged uid %d, which is not done unasked; give the user to run as (--user UID:GID), or allow the chown explicitly (--chown-workspace)", e.Workspace, e.UID)
}
