package worktree

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/localagent/agent/sandbox/hostfs"
)

// Shared history packs.
//
// ExportHistory packs everything reachable from a task's base and head for
// every sandbox: on a deep history that is seconds of CPU, hundreds of MB of
// memory and a full copy of the pack on disk per running sandbox, on the
// way to the first tool call. ExportHistoryShared builds the same bare
// repository from packs exported once per repository and hard-linked into
// each sandbox's history, packing only what is new.
//
// The store of one repository is a chain of immutable packs. Layer i holds
// the objects reachable from commit C_i and not from C_{i-1}, and C_{i-1}
// is an ancestor of C_i (checked before a layer is added), so the layers up
// to C_k hold exactly the objects reachable from C_k. A sandbox whose base
// descends from C_k gets those layers plus a pack of what base and head
// add; its history therefore holds exactly the objects reachable from base
// and head, as ExportHistory's does: never another branch's, a tag's, a
// stash's, a note's or a reflog-only object, because no layer is ever
// linked unless its commit is an ancestor of the base.
//
// Layout of a store directory (only the orchestrator writes it):
//
//	lock                 flock held by whoever reads or changes the chain
//	chain                one line per layer, oldest first: "<commit> <pack name>"
//	pack-<hash>.{pack,idx,rev}
//	tmp-*                a layer being written (removed by the next writer)
//
// The chain file is replaced by rename after the layer's pack is in place,
// and files no chain names are removed by the next writer, so a process
// killed at any step leaves a store the next export uses or repairs.

// maxHistoryLayers bounds the chain: past it, the next new base starts a
// new chain with one full pack (git slows down with many packs).
const maxHistoryLayers = 16

// historyLayer is one entry of a store's chain.
type historyLayer struct {
	commit string
	pack   string // "pack-<hash>", the base name of its files
}

// packExts are the files of one pack that are linked into a history.
var packExts = []string{".pack", ".idx", ".rev"}

// trustChain, when set (by tests only), skips the ancestry checks: it is
// the control that shows the reachable-set tests catch a layer that does
// not belong to the base's history.
var trustChain = false

// ExportHistoryShared writes at dest the same bare repository as
// ExportHistory (objects reachable from base and head, refs/heads/base and
// refs/heads/head, HEAD at head), taking the base's history from the
// repository's pack store at store (created if needed; it must be a
// directory only the orchestrator writes, on the same file system as dest)
// and packing only the objects that are new since the store's last layer.
// Where links cannot be made it falls back to ExportHistory.
func (r *Repo) ExportHistoryShared(ctx context.Context, store, dest, base, head string) error {
	for _, rev := range []string{base, head} {
		if err := validRev(rev); err != nil {
			return err
		}
	}
	baseC, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "--end-of-options", base+"^{commit}")
	if err != nil {
		return fmt.Errorf("history: base %s: %w", base, err)
	}
	headC, err := r.g.out(ctx, r.CommonDir, "", "rev-parse", "--verify", "--end-of-options", head+"^{commit}")
	if err != nil {
		return fmt.Errorf("history: head %s: %w", head, err)
	}
	if err := os.MkdirAll(store, 0o700); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	unlock, err := LockFile(ctx, filepath.Join(store, "lock"))
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	chain, err := r.extendChain(ctx, store, baseC)
	if err != nil {
		unlock()
		return fmt.Errorf("history store: %w", err)
	}
	// Linked under the lock: no writer removes a layer in the meantime.
	// Once linked, a layer stays in this history whatever the store does.
	linked, err := linkHistory(ctx, r, store, dest, chain)
	unlock()
	if err != nil {
		return err
	}
	if !linked {
		return r.ExportHistory(ctx, dest, base, head)
	}
	if headC != baseC {
		// What the task branch adds to its base: usually a few commits.
		pack := filepath.Join(dest, "objects", "pack", "pack")
		if _, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, stdin: strings.NewReader(headC + "\n^" + baseC + "\n"),
			args: []string{"pack-objects", "--quiet", "--revs", "--delta-base-offset", pack}}); err != nil {
			return fmt.Errorf("history: packing: %w", err)
		}
	}
	return writeHistoryRefs(dest, baseC, headC)
}

// extendChain returns the store's layers whose objects are exactly those
// reachable from base (commit id), adding a layer for base when the chain
// does not end there. Called with the store's lock held.
func (r *Repo) extendChain(ctx context.Context, store, base string) ([]historyLayer, error) {
	chain := readChain(store)
	if len(chain) > 0 && chain[len(chain)-1].commit == base {
		return chain, nil
	}
	// The longest prefix of the chain whose last commit is an ancestor of
	// base: ancestry along the chain is monotone, so bisect it. chain[:lo]
	// is known to qualify, chain[:hi+1] known not to.
	lo, hi := 0, len(chain)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		ok := trustChain
		if !ok {
			var err error
			if ok, err = r.IsAncestor(ctx, chain[mid-1].commit, base); err != nil {
				// A layer of a commit the repository no longer has.
				ok = false
			}
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	keep := lo
	if keep > 0 && chain[keep-1].commit == base {
		chain = chain[:keep]
		return chain, writeChain(store, chain)
	}
	if keep >= maxHistoryLayers {
		keep = 0
	}
	chain = chain[:keep]
	input := base + "\n"
	if keep > 0 {
		input += "^" + chain[keep-1].commit + "\n"
	}
	cleanStore(store, chain)
	tmp, err := os.MkdirTemp(store, "tmp-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	out, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, stdin: strings.NewReader(input),
		args: []string{"pack-objects", "--quiet", "--revs", "--delta-base-offset", filepath.Join(tmp, "pack")}})
	if err != nil {
		return nil, fmt.Errorf("packing: %w", err)
	}
	name := "pack-" + strings.TrimSpace(string(out))
	if !hexID(strings.TrimPrefix(name, "pack-")) {
		return nil, fmt.Errorf("packing: unexpected output %q", out)
	}
	// The index last: a pack file without its index is never used.
	for _, ext := range []string{".pack", ".rev", ".idx"} {
		err := os.Rename(filepath.Join(tmp, name+ext), filepath.Join(store, name+ext))
		if err != nil && (ext != ".rev" || !errors.Is(err, os.ErrNotExist)) {
			return nil, err
		}
	}
	chain = append(chain, historyLayer{commit: base, pack: name})
	if err := writeChain(store, chain); err != nil {
		return nil, err
	}
	cleanStore(store, chain)
	return chain, nil
}

// linkHistory makes dest a bare repository whose object store holds hard
// links to the chain's packs. It reports false (and leaves nothing at
// dest) when the file system refuses the links.
func linkHistory(ctx context.Context, r *Repo, store, dest string, chain []historyLayer) (bool, error) {
	if err := hostfs.RemoveTree(dest); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("history %s: %w", dest, err)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return false, err
	}
	if _, err := r.g.run(ctx, invocation{gitDir: dest, args: []string{"init", "--quiet", "--bare", "--template=", dest}}); err != nil {
		return false, fmt.Errorf("history: %w", err)
	}
	packDir := filepath.Join(dest, "objects", "pack")
	if err := os.MkdirAll(packDir, 0o755); err != nil {
		return false, err
	}
	for _, l := range chain {
		for _, ext := range packExts {
			err := os.Link(filepath.Join(store, l.pack+ext), filepath.Join(packDir, l.pack+ext))
			if err == nil || (ext == ".rev" && errors.Is(err, os.ErrNotExist)) {
				continue
			}
			_ = hostfs.RemoveTree(dest)
			return false, nil
		}
	}
	return true, nil
}

// writeHistoryRefs names base and head in dest and points HEAD at head,
// as ExportHistory does, by writing the loose ref files (dest is a fresh
// repository that only this process writes).
func writeHistoryRefs(dest, base, head string) error {
	for ref, c := range map[string]string{HistoryBaseRef: base, HistoryHeadRef: head} {
		p := filepath.Join(dest, filepath.FromSlash(ref))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(c+"\n"), 0o644); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dest, "HEAD"), []byte("ref: "+HistoryHeadRef+"\n"), 0o644); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// readChain reads a store's chain; a missing or malformed one is empty (the
// next export starts a new chain).
func readChain(store string) []historyLayer {
	f, err := os.Open(filepath.Join(store, "chain"))
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var chain []historyLayer
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		commit, pack, ok := strings.Cut(sc.Text(), " ")
		if !ok || !hexID(commit) || !strings.HasPrefix(pack, "pack-") || !hexID(strings.TrimPrefix(pack, "pack-")) {
			return nil
		}
		for _, ext := range []string{".pack", ".idx"} {
			if _, err := os.Lstat(filepath.Join(store, pack+ext)); err != nil {
				return nil
			}
		}
		chain = append(chain, historyLayer{commit: commit, pack: pack})
	}
	if sc.Err() != nil {
		return nil
	}
	return chain
}

// writeChain replaces a store's chain file atomically.
func writeChain(store string, chain []historyLayer) error {
	var b strings.Builder
	for _, l := range chain {
		b.WriteString(l.commit + " " + l.pack + "\n")
	}
	tmp := filepath.Join(store, "chain.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(store, "chain"))
}

// cleanStore removes what no chain names: packs of dropped layers (links
// in live histories keep their data) and leftovers of a killed writer.
func cleanStore(store string, chain []historyLayer) {
	keep := map[string]bool{"lock": true, "chain": true}
	for _, l := range chain {
		for _, ext := range packExts {
			keep[l.pack+ext] = true
		}
	}
	entries, err := os.ReadDir(store)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !keep[e.Name()] {
			_ = hostfs.RemoveTree(filepath.Join(store, e.Name()))
		}
	}
}

// hexID reports whether s looks like an object id (SHA-1 or SHA-256).
func hexID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
