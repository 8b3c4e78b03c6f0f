package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/localagent/agent/sandbox/hostfs"
)

// History refs: what the sandbox's git tools call base and head.
const (
	HistoryBaseRef = "refs/heads/base"
	HistoryHeadRef = "refs/heads/head"
)

// ExportHistory writes a bare repository at dest holding only the objects
// reachable from base and head (the task's base history and the task
// branch's own commits), with refs/heads/base and refs/heads/head naming
// them and HEAD pointing at head. It is the read-only history the sandbox's
// git tools read: the sandbox never sees the user's .git, and no host git
// ever runs on sandbox files (this reads only the user's object store and
// writes only dest, which the sandbox mounts read-only).
//
// dest is replaced if it exists; it must be a path only the orchestrator
// writes (under the state directory).
func (r *Repo) ExportHistory(ctx context.Context, dest, base, head string) error {
	for _, rev := range []string{base, head} {
		if err := validRev(rev); err != nil {
			return err
		}
	}
	if err := hostfs.RemoveTree(dest); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("history %s: %w", dest, err)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	// No template: a template's hooks have no business in a repository the
	// sandbox reads (hooks never run there, but nothing should suggest so).
	if _, err := r.g.run(ctx, invocation{gitDir: dest, args: []string{"init", "--quiet", "--bare", "--template=", dest}}); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	baseC, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "--end-of-options", base+"^{commit}")
	if err != nil {
		return fmt.Errorf("history: base %s: %w", base, err)
	}
	headC, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "--end-of-options", head+"^{commit}")
	if err != nil {
		return fmt.Errorf("history: head %s: %w", head, err)
	}
	// One pack of everything reachable from the two commits, written
	// straight into dest's object store; existing deltas are reused, so
	// this is mostly a copy.
	pack := filepath.Join(dest, "objects", "pack", "pack")
	if _, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, stdin: strings.NewReader(baseC + "\n" + headC + "\n"),
		args: []string{"pack-objects", "--quiet", "--revs", "--delta-base-offset", pack}}); err != nil {
		return fmt.Errorf("history: packing: %w", err)
	}
	for ref, c := range map[string]string{HistoryBaseRef: baseC, HistoryHeadRef: headC} {
		if _, err := r.g.out(ctx, dest, "", "update-ref", ref, c); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	if _, err := r.g.out(ctx, dest, "", "symbolic-ref", "HEAD", HistoryHeadRef); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}
