package sandbox

import (
	"context"
	"io"
)

// Backend is a sandbox engine as the orchestrator sees it: it creates a
// hardened sandbox from a Spec, finds this project's sandboxes by id or
// label, and removes them. Everything done to one sandbox afterwards (its
// tool session, exec, freeze/thaw, inspection) goes through the Sandbox it
// returns, which carries the backend's Driver.
//
// Engine (Docker, or Podman through its Docker-compatible socket) is the
// one implementation users can select; sandboxtest has an in-process one
// for unit tests. No engine SDK type appears in this interface or in the
// types it uses, so a caller never sees which engine it talks to. Errors
// keep their classification: a sandbox that is gone wraps ErrNotFound, a
// stopped one wraps ErrNotRunning, a missing image an *ImageMissingError.
type Backend interface {
	// Create makes and starts a hardened sandbox for spec; on failure it
	// removes what it created.
	Create(ctx context.Context, spec Spec) (*Sandbox, error)
	// Get finds one of this project's sandboxes by id, unique id prefix
	// or name.
	Get(ctx context.Context, ref string) (*Sandbox, error)
	// List returns this project's sandboxes narrowed by opts, newest first.
	List(ctx context.Context, opts ListOptions) ([]*Sandbox, error)
	// Remove kills and removes a sandbox; one already gone is not an error.
	Remove(ctx context.Context, id string) error
	// ImagePresent returns *ImageMissingError when ref is not present.
	ImagePresent(ctx context.Context, ref string) error
	// Freeze and Thaw act on sandbox id as Sandbox.Freeze and Thaw do, for
	// callers that found it by label (every sandbox over one worktree).
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
}

// Driver is what a Sandbox asks of its backend once it exists. A backend
// implements it and hands it to its sandboxes with Bind.
type Driver interface {
	// Exec runs opts.Cmd in sandbox id (opts.User and opts.WorkingDir are
	// already filled in) and returns its exit code; a non-zero exit is
	// not an error.
	Exec(ctx context.Context, id string, opts ExecOptions) (int, error)
	// OpenStream starts cmd as user in sandbox id with its stdin, stdout
	// and stderr connected to the returned Stream; stderr is copied to
	// errOut. It carries the toolbox session.
	OpenStream(ctx context.Context, id, user string, cmd []string, errOut io.Writer) (Stream, error)
	// CheckRunning returns nil when sandbox id can run commands, an error
	// wrapping ErrNotFound when it is gone, and one wrapping ErrNotRunning
	// when it is stopped or frozen.
	CheckRunning(ctx context.Context, id string) error
	// Freeze stops every process of sandbox id from running (the cgroup
	// freezer, or signals from inside where the engine has none) until
	// Thaw; one gone or stopped is not an error.
	Freeze(ctx context.Context, id string) error
	// Thaw lets a frozen sandbox run again; one not frozen is not an error.
	Thaw(ctx context.Context, id string) error
	// Remove kills and removes sandbox id; one already gone is not an
	// error.
	Remove(ctx context.Context, id string) error
}

// Stream is a running long-lived command: write its stdin, read its
// stdout. Close ends it and unblocks a pending Read.
type Stream interface {
	io.Writer
	Stdout() io.Reader
	Close() error
}

// Bind attaches a backend's driver to a sandbox description, making it
// usable (Tool, Exec, Freeze...). Backends call it for every Sandbox they
// return; the toolbox session opens on the first Tool call.
func Bind(sb *Sandbox, d Driver) *Sandbox {
	sb.drv = d
	return sb
}

var (
	_ Backend = (*Engine)(nil)
	_ Driver  = (*Engine)(nil)
)
