package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
)

// A warm pool keeps started, hardened sandboxes waiting for a workspace,
// so that a task or sub-agent has one in milliseconds instead of paying
// for a container create and start.
//
// A member is made exactly as a fresh sandbox (Backend.Create, the same
// Spec, the same hardening, network none) except that its /workspace is
// an empty slot directory of the pool's own, <dir>/slots/<name>/workspace.
// Claiming it for a workspace W (an existing directory, normally a task
// worktree just created) moves W's entries into the slot and renames the
// slot onto W: the member's bind mount follows the directory, so the
// container now works on W without a restart. Nothing else of the
// container changes, and no command has ever run in a member before its
// claim.
//
// Labels cannot change after create, so a claim is journalled in
// <dir>/claims/<container id> before anything moves: the labels the
// sandbox would carry had it been created fresh for W (workspace, task,
// use). WithPoolClaims applies that journal to every lookup, which is how
// freezes, gc, discard and `agent sandbox ls` find a claimed member. The
// claim record is created with link(2), which fails when it exists, so
// two claimers, in one process or two, never get the same member. A
// claimed member is never returned to the pool: it is removed with its
// task.
//
// Members belong to the pool directory (one per state directory) and
// outlive the process that made them: any process of the same state
// directory claims them by label. A process keeps the toolbox sessions of
// the members it made open; another process opens one on claim.
//
// Specs that cannot be pooled (ErrNotPoolable): an egress proxy socket,
// extra mounts, GPUs, gVisor or another non-default OCI runtime. Their callers create a
// fresh sandbox. Everything else that makes two sandboxes differ (image,
// toolbox, limits, user, seccomp, shell, environment, labels, read-only
// workspace, whether a history is mounted) is part of the pool key, so a
// member is only ever handed to a spec it was made for.

// ErrNotPoolable is wrapped by Claim and Fill when the spec cannot come
// from the pool; the caller creates a fresh sandbox.
var ErrNotPoolable = errors.New("not pooled")

// ErrPoolEmpty is returned by Claim when no member is waiting for the
// spec's key; the caller creates a fresh sandbox.
var ErrPoolEmpty = errors.New("no warm sandbox waiting")

// errClaimed: another claimer took the member first.
var errClaimed = errors.New("already claimed")

// Pool member states, as Sandbox.Pool shows them.
const (
	PoolIdle    = "idle"
	PoolClaimed = "claimed"
)

// Directories and files under a pool directory.
const (
	poolSlots  = "slots"
	poolClaims = "claims"
	poolLocks  = "locks"
	slotWS     = "workspace"
	slotHist   = "history"
)

// orphanSlotAge is how old a slot directory without a container must be
// before it is taken for the leftover of a create that failed or was
// killed (younger ones may belong to a create in progress).
const orphanSlotAge = time.Minute

// PoolClaim is the journal entry of one claimed member.
type PoolClaim struct {
	// ID is the member's container id.
	ID string `json:"id"`
	// Key is the pool key it was made for.
	Key string `json:"key"`
	// Workspace is the directory it works on since the claim ("" when it
	// was claimed to be removed).
	Workspace string `json:"workspace,omitempty"`
	// History is the exported history it mounts since the claim.
	History string `json:"history,omitempty"`
	// Labels are the labels lookups see for it: those of a fresh sandbox
	// for the claiming spec, plus the pool's own.
	Labels map[string]string `json:"labels,omitempty"`
	// Removing is set when it was claimed only to be removed (gc, trim).
	Removing bool      `json:"removing,omitempty"`
	PID      int       `json:"pid"`
	Time     time.Time `json:"time"`
}

// imageIdentifier is implemented by backends that can name the image a
// reference points at now (Engine); without it images are not compared.
type imageIdentifier interface {
	ImageID(ctx context.Context, ref string) (string, error)
}

// ImageID returns the id of the image ref points at.
func (e *Engine) ImageID(ctx context.Context, ref string) (string, error) {
	ins, err := e.api.ImageInspect(ctx, ref)
	if err != nil {
		return "", e.wrap("inspecting image "+ref, err)
	}
	return ins.ID, nil
}

// Pool is a warm pool of sandboxes over one pool directory. Its methods
// are safe for concurrent use.
type Pool struct {
	b    Backend
	dir  string
	size int

	mu        sync.Mutex
	idle      map[string][]*Sandbox // members this process made, sessions open
	templates map[string]poolTemplate
	filling   map[string]bool
	lastErr   error
	wg        sync.WaitGroup

	// images caches the image id a reference points at (imageTTL).
	images map[string]imageSeen

	// overwriteClaims: test switch (export_test.go) for control runs.
	overwriteClaims bool
}

type imageSeen struct {
	id   string
	when time.Time
}

// imageTTL is how long a claim trusts the image id it last looked up: a
// member of an image rebuilt since can be handed out that long after the
// rebuild (never after: the next lookup retires it).
const imageTTL = 10 * time.Second

type poolTemplate struct {
	spec Spec // defaulted, user set
	user UserChoice
}

// NewPool returns the pool of dir (created when missing) keeping size
// members per key in use. dir must be on the file system of the
// workspaces it hands members to (a claim renames). size 0 makes a pool
// that hands out nothing and makes nothing.
func NewPool(b Backend, dir string, size int) (*Pool, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pool directory %s: %w", dir, err)
	}
	return &Pool{b: b, dir: abs, size: max(size, 0), idle: map[string][]*Sandbox{}, templates: map[string]poolTemplate{}, filling: map[string]bool{}}, nil
}

// Size is the number of members kept per key.
func (p *Pool) Size() int { return p.size }

// Dir is the pool directory.
func (p *Pool) Dir() string { return p.dir }

// LastError is the last failure of a background refill (nil when none).
func (p *Pool) LastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// poolable says why s cannot come from a pool, or nil.
func poolable(s Spec) error {
	switch {
	case s.EgressDir != "":
		return fmt.Errorf("%w: the sandbox has an egress proxy socket", ErrNotPoolable)
	case len(s.Mounts) > 0:
		return fmt.Errorf("%w: the sandbox has extra mounts", ErrNotPoolable)
	case len(s.DeviceRequests) > 0:
		return fmt.Errorf("%w: the sandbox has GPUs", ErrNotPoolable)
	case s.Isolation == IsolationRunsc:
		// gVisor serves the mount through its own file system layer;
		// that it follows the slot's rename is not shown.
		return fmt.Errorf("%w: the sandbox runs under gVisor", ErrNotPoolable)
	case s.Runtime != "":
		return fmt.Errorf("%w: the sandbox runs under runtime %s", ErrNotPoolable, s.Runtime)
	}
	return nil
}

// toolboxPrint identifies the toolbox binary's current version.
func toolboxPrint(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return strconv.FormatInt(fi.Size(), 10) + "-" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
}

// key is the pool key of a defaulted spec running as user: everything
// that makes two sandboxes differ, except the workspace, the task and the
// use.
func (p *Pool) key(s Spec, user UserChoice) string {
	labels := map[string]string{}
	for k, v := range s.Labels {
		if k != LabelUse && k != LabelTask {
			labels[k] = v
		}
	}
	seccomp, _ := json.Marshal(s.Seccomp)
	b, _ := json.Marshal(struct {
		Dir, Image, Toolbox, ToolboxPrint, User, Runtime, Isolation, Shell, StateID string
		Limits                                                                      any
		Seccomp                                                                     string
		EngineSeccomp, ReadOnly, History                                            bool
		Env                                                                         []string
		Labels                                                                      map[string]string
	}{
		p.dir, s.Image, s.Toolbox, toolboxPrint(s.Toolbox), user.String(), s.Runtime, string(s.Isolation), s.Shell, s.StateID,
		s.Limits, string(seccomp), s.EngineSeccomp, s.WorkspaceReadOnly, s.History != "", s.Env, labels,
	})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// prepare defaults and checks spec for the pool and picks its user as a
// fresh Create would; chown hands the workspace over when that is needed
// (Claim), as Create does.
func (p *Pool) prepare(spec Spec, chown bool) (Spec, UserChoice, string, string, error) {
	if p == nil || p.size == 0 {
		return spec, UserChoice{}, "", "", fmt.Errorf("%w: the pool is off", ErrNotPoolable)
	}
	s, err := spec.withDefaults()
	if err != nil {
		return s, UserChoice{}, "", "", err
	}
	if err := poolable(s); err != nil {
		return s, UserChoice{}, "", "", err
	}
	var (
		user   UserChoice
		notice string
	)
	if chown {
		user, notice, err = chooseUser(s)
	} else if s.User != "" {
		user.UID, user.GID, err = parseUser(s.User)
	} else {
		user, err = WorkspaceUser(s.Workspace)
		user.Chown = false
	}
	if err != nil {
		return s, user, "", "", err
	}
	user.Chown = false
	s.User = user.String()
	return s, user, p.key(s, user), notice, nil
}

// Claim hands spec's workspace a warm member made for the same key: it
// journals the claim, moves the workspace's entries into the member's
// slot and renames the slot onto the workspace (and likewise the
// history), and returns the member working on it, labelled (through the
// journal) as a fresh sandbox for spec would be. It returns an error
// wrapping ErrNotPoolable or ErrPoolEmpty when the caller should create
// a fresh sandbox; any other error also leaves the workspace as it was.
// The pool is not refilled here: call Refill once the caller's own start
// no longer competes with it.
//
// The workspace must be one no sandbox mounts yet (a worktree just made):
// its entries move, and a sandbox that mounts it would keep the emptied
// directory.
func (p *Pool) Claim(ctx context.Context, spec Spec) (*Sandbox, error) {
	s, user, key, notice, err := p.prepare(spec, true)
	if err != nil {
		return nil, err
	}
	if e, ok := p.b.(*Engine); ok && e.NoCgroupLimits {
		// What Create says of such a sandbox (the member was made so).
		notice = joinNotice(notice, rlimitFallback(&container.Config{}, s.Limits))
	}
	p.mu.Lock()
	p.templates[key] = poolTemplate{spec: s, user: user}
	p.mu.Unlock()
	want := p.imageID(ctx, s.Image)
	ok := func(sb *Sandbox) bool {
		return want == "" || imageOf(sb.Labels) == want
	}
	for {
		sb := p.popIdle(key)
		if sb == nil {
			break
		}
		if !ok(sb) {
			p.retire(context.WithoutCancel(ctx), sb.ID, key)
			continue
		}
		if got, err := p.take(ctx, sb, key, s, user, notice); err == nil || !errors.Is(err, errClaimed) {
			return got, err
		}
	}
	list, err := p.b.List(ctx, ListOptions{Labels: []string{LabelPool + "=" + key}, Running: true})
	if err != nil {
		return nil, err
	}
	// Oldest first: a member made by another process has had the most
	// time to finish starting.
	slices.Reverse(list)
	for _, sb := range list {
		if sb.Labels[LabelPool] != key || p.claimed(sb.ID) {
			continue
		}
		if !ok(sb) {
			continue // gc or the next refill removes it
		}
		if got, err := p.take(ctx, sb, key, s, user, notice); err == nil || !errors.Is(err, errClaimed) {
			return got, err
		}
	}
	return nil, ErrPoolEmpty
}

func (p *Pool) popIdle(key string) *Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.idle[key]
	if len(l) == 0 {
		return nil
	}
	sb := l[0]
	p.idle[key] = l[1:]
	return sb
}

// take claims member sb for s and binds s's workspace to it.
func (p *Pool) take(ctx context.Context, sb *Sandbox, key string, s Spec, user UserChoice, notice string) (*Sandbox, error) {
	slot, err := p.slotOf(sb)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range sb.Labels {
		labels[k] = v
	}
	for k, v := range s.SandboxLabels(user) {
		labels[k] = v
	}
	rec := PoolClaim{ID: sb.ID, Key: key, Workspace: s.Workspace, History: s.History, Labels: labels, PID: os.Getpid(), Time: time.Now().UTC()}
	if err := p.writeClaim(rec); err != nil {
		if errors.Is(err, errClaimed) {
			// Another claimer's now: this process keeps no channel
			// into it.
			sb.Close()
		}
		return nil, err
	}
	// The member is this claimer's now: from here on a failure removes
	// it, it never goes back to the pool.
	// A member made by another process has no session here yet: open
	// it while the workspace moves (one this process made has its own).
	sb.mu.Lock()
	alive := sb.sess != nil && sb.sess.alive()
	sb.mu.Unlock()
	if !alive {
		sb.openAsync()
	}
	if err := bindSlot(slot, s); err != nil {
		_ = sb.Remove(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("handing the workspace %s to a warm sandbox: %w", s.Workspace, err)
	}
	sb.Workspace = s.Workspace
	sb.Labels = labels
	sb.Pool = PoolClaimed
	sb.Notice = notice
	return sb, nil
}

// slotOf is the slot directory of member sb, checked to be one of this
// pool's.
func (p *Pool) slotOf(sb *Sandbox) (string, error) {
	ws := filepath.Clean(sb.Workspace)
	slot := filepath.Dir(ws)
	if filepath.Base(ws) != slotWS || filepath.Dir(slot) != p.slotsDir() {
		return "", fmt.Errorf("sandbox %s is not a member of the pool at %s (workspace %s)", shortID(sb.ID), p.dir, ws)
	}
	return slot, nil
}

// bindSlot moves s.Workspace's entries into the slot's workspace, gives
// that directory the workspace's mode and owner and renames it onto the
// workspace; the history, when s has one, goes first, so that nothing can
// fail once the workspace is the member's. On failure the entries moved
// so far go back.
func bindSlot(slot string, s Spec) error {
	if s.History != "" {
		if err := bindDir(filepath.Join(slot, slotHist), s.History); err != nil {
			return err
		}
	}
	if err := bindDir(filepath.Join(slot, slotWS), s.Workspace); err != nil {
		return err
	}
	_ = os.Remove(slot)
	return nil
}

// bindDir makes the empty directory from take the place of the directory
// to, with to's entries, mode and owner.
func bindDir(from, to string) (err error) {
	fi, err := os.Lstat(to)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", to)
	}
	ents, err := os.ReadDir(to)
	if err != nil {
		return err
	}
	var moved []string
	defer func() {
		if err != nil {
			for _, name := range moved {
				_ = os.Rename(filepath.Join(from, name), filepath.Join(to, name))
			}
		}
	}()
	for _, e := range ents {
		// rename(2) moves a symlink itself, never what it points at.
		if err := os.Rename(filepath.Join(to, e.Name()), filepath.Join(from, e.Name())); err != nil {
			return err
		}
		moved = append(moved, e.Name())
	}
	if err := os.Chmod(from, fi.Mode().Perm()|fi.Mode()&(fs.ModeSticky|fs.ModeSetgid)); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if err := os.Lchown(from, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	// Replaces the now empty directory: one atomic step, after which the
	// path names the member's mount. (os.Rename refuses an existing
	// directory as the target; rename(2) replaces an empty one.)
	if err := syscall.Rename(from, to); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

func (p *Pool) slotsDir() string  { return filepath.Join(p.dir, poolSlots) }
func (p *Pool) claimsDir() string { return filepath.Join(p.dir, poolClaims) }

// writeClaim creates the claim record of rec.ID, complete, or fails with
// errClaimed when one exists: it is written aside and linked into place.
func (p *Pool) writeClaim(rec PoolClaim) error {
	dir := p.claimsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".new-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// Not synced: the record needs to be complete when it appears (the
	// link), and to outlive the process, not the machine (a reboot ends
	// the containers too).
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if p.overwriteClaims {
		return os.Rename(tmp.Name(), filepath.Join(dir, rec.ID))
	}
	if err := os.Link(tmp.Name(), filepath.Join(dir, rec.ID)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return errClaimed
		}
		return err
	}
	return nil
}

func (p *Pool) claimed(id string) bool {
	if p.overwriteClaims {
		return false
	}
	_, err := os.Lstat(filepath.Join(p.claimsDir(), id))
	return err == nil
}

// ReadPoolClaim returns the claim record of container id in the pool
// directory dir, or nil when it is not claimed.
func ReadPoolClaim(dir, id string) *PoolClaim {
	if id == "" || strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, poolClaims, id))
	if err != nil {
		return nil
	}
	var rec PoolClaim
	if json.Unmarshal(b, &rec) != nil || rec.ID != id {
		// Records are linked into place complete; an unreadable one
		// still means "claimed".
		return &PoolClaim{ID: id, Removing: true}
	}
	return &rec
}

func (p *Pool) imageID(ctx context.Context, ref string) string {
	ii, ok := p.b.(imageIdentifier)
	if !ok {
		return ""
	}
	p.mu.Lock()
	seen, ok := p.images[ref]
	p.mu.Unlock()
	if ok && time.Since(seen.when) < imageTTL {
		return seen.id
	}
	id, err := ii.ImageID(ctx, ref)
	if err != nil {
		return ""
	}
	p.mu.Lock()
	if p.images == nil {
		p.images = map[string]imageSeen{}
	}
	p.images[ref] = imageSeen{id: id, when: time.Now()}
	p.mu.Unlock()
	return id
}

// imageOf is the image id recorded on a member ("id ref").
func imageOf(labels map[string]string) string {
	id, _, _ := strings.Cut(labels[LabelPoolImage], " ")
	return id
}

// retire claims member id to remove it, and removes it; false when
// another claimer had it first.
func (p *Pool) retire(ctx context.Context, id, key string) bool {
	if err := p.writeClaim(PoolClaim{ID: id, Key: key, Removing: true, PID: os.Getpid(), Time: time.Now().UTC()}); err != nil {
		return false
	}
	_ = p.b.Remove(ctx, id)
	return true
}

// Fill makes members for spec's key until size of them wait, and waits
// for them (tests and benchmarks; tasks use Refill).
func (p *Pool) Fill(ctx context.Context, spec Spec) error {
	s, user, key, _, err := p.prepare(spec, false)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.templates[key] = poolTemplate{spec: s, user: user}
	p.mu.Unlock()
	return p.refillKey(ctx, key)
}

// Refill brings every key this process has claimed for back to size
// members, in the background: one refill per key at a time in this
// process, and one across processes (a lock file per key). WaitRefills
// waits for it.
func (p *Pool) Refill() {
	if p == nil || p.size == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for key := range p.templates {
		if p.filling[key] {
			continue
		}
		p.filling[key] = true
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err := p.refillKey(ctx, key)
			p.mu.Lock()
			p.filling[key] = false
			if err != nil {
				p.lastErr = err
			}
			p.mu.Unlock()
		}()
	}
}

// WaitRefills waits until the background refills of this process end.
func (p *Pool) WaitRefills() {
	if p != nil {
		p.wg.Wait()
	}
}

// refillKey tops key up to size members, under the key's lock file.
func (p *Pool) refillKey(ctx context.Context, key string) error {
	p.mu.Lock()
	tmpl, ok := p.templates[key]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	unlock, err := p.lockKey(key)
	if err != nil || unlock == nil {
		return err // nil, nil: another process is refilling it
	}
	defer unlock()
	// Claim records of sandboxes removed since, and stale members, go
	// now rather than at the next gc.
	_, _ = p.Sweep(ctx)
	want := p.imageID(ctx, tmpl.spec.Image)
	// One member at a time, counting again after each: a claim made
	// meanwhile (a sub-agent's) is refilled too. Bounded, so that members
	// claimed as fast as they are made cannot keep it going.
	for range 2 * p.size {
		list, err := p.b.List(ctx, ListOptions{Labels: []string{LabelPool + "=" + key}})
		if err != nil {
			return err
		}
		var ready []*Sandbox
		for _, sb := range list {
			if p.claimed(sb.ID) || sb.Labels[LabelPool] != key {
				continue
			}
			if sb.State != "running" || (want != "" && imageOf(sb.Labels) != want) {
				p.retire(ctx, sb.ID, key)
				continue
			}
			ready = append(ready, sb)
		}
		// More than size (two processes' refills before the lock, a
		// smaller size now): the newest go.
		for len(ready) > p.size {
			p.retire(ctx, ready[0].ID, key)
			ready = ready[1:]
		}
		if len(ready) >= p.size {
			return nil
		}
		sb, err := p.makeMember(ctx, key, tmpl, want)
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.idle[key] = append(p.idle[key], sb)
		p.mu.Unlock()
	}
	return nil
}

// lockKey takes the refill lock of key without waiting; nil, nil when
// another process holds it.
func (p *Pool) lockKey(key string) (func(), error) {
	dir := filepath.Join(p.dir, poolLocks)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, key), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// makeMember creates one member for key: a fresh slot, then the sandbox
// made from the key's spec over it.
func (p *Pool) makeMember(ctx context.Context, key string, tmpl poolTemplate, imageID string) (*Sandbox, error) {
	name := randomHex(6)
	slot := filepath.Join(p.slotsDir(), name)
	if err := os.MkdirAll(p.slotsDir(), 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(slot, 0o700); err != nil {
		return nil, err
	}
	m := tmpl.spec
	m.Workspace = filepath.Join(slot, slotWS)
	dirs := []string{m.Workspace}
	if m.History != "" {
		m.History = filepath.Join(slot, slotHist)
		dirs = append(dirs, m.History)
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			_ = os.RemoveAll(slot)
			return nil, err
		}
	}
	m.Task = ""
	m.Name = "agent-pool-" + name
	m.Labels = map[string]string{}
	for k, v := range tmpl.spec.Labels {
		if k != LabelUse && k != LabelTask {
			m.Labels[k] = v
		}
	}
	m.Labels[LabelPool] = key
	m.Labels[LabelPoolImage] = strings.TrimSpace(imageID + " " + m.Image)
	m.Labels[LabelPoolToolbox] = toolboxPrint(m.Toolbox) + " " + m.Toolbox
	sb, err := p.b.Create(ctx, m)
	if err != nil {
		_ = removeSlot(slot)
		return nil, fmt.Errorf("making a warm sandbox: %w", err)
	}
	sb.Pool = PoolIdle
	// It waits with its toolbox session open (a failed open is retried
	// by the first call).
	sb.session(ctx)
	return sb, nil
}

// removeSlot removes a slot that holds nothing: its directories are
// removed one by one, never recursively, so a slot that somehow holds
// files keeps them.
func removeSlot(slot string) error {
	for _, d := range []string{slotWS, slotHist} {
		if err := os.Remove(filepath.Join(slot, d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(slot); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Stale reports why an unclaimed member should go ("" when it may stay):
// the pool is off, it is not running, its slot is gone, or it was made
// from another image or toolbox than its references name now.
func (p *Pool) Stale(ctx context.Context, sb *Sandbox) string {
	switch {
	case p.size == 0:
		return "the pool is off"
	case sb.State != "running" && time.Since(sb.Created) > orphanSlotAge:
		// (A younger one may be starting.)
		return "not running (" + sb.State + ")"
	}
	if _, err := os.Lstat(sb.Workspace); err != nil {
		return "its slot directory is gone"
	}
	if id, ref, ok := strings.Cut(sb.Labels[LabelPoolImage], " "); ok {
		if now := p.imageID(ctx, ref); now != "" && now != id {
			return "its image " + ref + " was rebuilt"
		}
	}
	if print, path, ok := strings.Cut(sb.Labels[LabelPoolToolbox], " "); ok && toolboxPrint(path) != print {
		return "its toolbox binary changed"
	}
	return ""
}

// Members lists the pool's members (claimed or not, running or not),
// with Pool set to PoolIdle or PoolClaimed and a claimed one's labels and
// workspace as its claim recorded them.
func (p *Pool) Members(ctx context.Context) ([]*Sandbox, error) {
	list, err := p.b.List(ctx, ListOptions{Labels: []string{LabelPool}})
	if err != nil {
		return nil, err
	}
	var out []*Sandbox
	for _, sb := range list {
		if rec := ReadPoolClaim(p.dir, sb.ID); rec != nil {
			applyClaim(sb, rec)
			out = append(out, sb)
			continue
		}
		if _, err := p.slotOf(sb); err == nil {
			sb.Pool = PoolIdle
			out = append(out, sb)
		}
	}
	return out, nil
}

// Sweep removes the unclaimed members Stale says should go (claiming
// them first, so that no claimer gets one being removed), the claim
// records of containers that are gone, and slot directories that no
// container uses. It returns the removed members' ids.
func (p *Pool) Sweep(ctx context.Context) ([]string, error) {
	start := time.Now()
	list, err := p.b.List(ctx, ListOptions{Labels: []string{LabelPool}})
	if err != nil {
		return nil, err
	}
	var removed []string
	exists := map[string]bool{}
	slots := map[string]bool{}
	for _, sb := range list {
		exists[sb.ID] = true
		slot, err := p.slotOf(sb)
		if err != nil {
			continue
		}
		slots[filepath.Base(slot)] = true
		if p.claimed(sb.ID) {
			continue
		}
		if why := p.Stale(ctx, sb); why != "" && p.retire(ctx, sb.ID, sb.Labels[LabelPool]) {
			removed = append(removed, sb.ID)
			_ = removeSlot(slot)
		}
	}
	// Members this process made that are gone or another claimer took:
	// no session of this process stays open into them.
	p.mu.Lock()
	var drop []*Sandbox
	for key, l := range p.idle {
		p.idle[key] = slices.DeleteFunc(l, func(sb *Sandbox) bool {
			if slices.Contains(removed, sb.ID) || p.claimed(sb.ID) {
				drop = append(drop, sb)
				return true
			}
			return false
		})
	}
	p.mu.Unlock()
	for _, sb := range drop {
		sb.Close()
	}
	if ents, err := os.ReadDir(p.claimsDir()); err == nil {
		for _, e := range ents {
			name := e.Name()
			if strings.HasPrefix(name, ".") {
				if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > orphanSlotAge {
					_ = os.Remove(filepath.Join(p.claimsDir(), name))
				}
				continue
			}
			// A record newer than the listing may be of a member made
			// and claimed since.
			if fi, err := e.Info(); err == nil && !exists[name] && fi.ModTime().Before(start) {
				_ = os.Remove(filepath.Join(p.claimsDir(), name))
			}
		}
	}
	if ents, err := os.ReadDir(p.slotsDir()); err == nil {
		for _, e := range ents {
			if slots[e.Name()] {
				continue
			}
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > orphanSlotAge {
				_ = removeSlot(filepath.Join(p.slotsDir(), e.Name()))
			}
		}
	}
	return removed, nil
}

// applyClaim makes sb look as its claim recorded it.
func applyClaim(sb *Sandbox, rec *PoolClaim) {
	sb.Pool = PoolClaimed
	if rec.Removing || rec.Labels == nil {
		return
	}
	sb.Labels = map[string]string{}
	for k, v := range rec.Labels {
		sb.Labels[k] = v
	}
	sb.Workspace = rec.Workspace
}

// WithPoolClaims returns b with the claims journalled in the pool
// directory dir applied to every lookup: a claimed member is listed and
// found with the labels and workspace of its claim (those of a fresh
// sandbox for the same task), so a search for the sandboxes over a
// worktree or of a task finds it, and one for its old slot does not. List
// filters on the workspace, task and use labels are applied after the
// claims.
func WithPoolClaims(b Backend, dir string) Backend {
	if b == nil || dir == "" {
		return b
	}
	if c, ok := b.(*claimsBackend); ok {
		b = c.Backend
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return b
	}
	return &claimsBackend{Backend: b, dir: abs}
}

type claimsBackend struct {
	Backend
	dir string
}

// claimedKeys are the labels a claim changes.
var claimedKeys = []string{LabelWorkspace, LabelTask, LabelUse}

func (c *claimsBackend) List(ctx context.Context, opts ListOptions) ([]*Sandbox, error) {
	if _, err := os.Lstat(c.dir); errors.Is(err, fs.ErrNotExist) {
		// No pool, so no claim: the engine filters as asked.
		return c.Backend.List(ctx, opts)
	}
	var direct, after []string
	for _, l := range opts.Labels {
		k, _, _ := strings.Cut(l, "=")
		if slices.Contains(claimedKeys, k) {
			after = append(after, l)
		} else {
			direct = append(direct, l)
		}
	}
	list, err := c.Backend.List(ctx, ListOptions{Labels: direct, Running: opts.Running})
	if err != nil {
		return nil, err
	}
	out := list[:0]
	for _, sb := range list {
		c.apply(sb)
		if matchLabels(sb.Labels, after) {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (c *claimsBackend) Get(ctx context.Context, ref string) (*Sandbox, error) {
	sb, err := c.Backend.Get(ctx, ref)
	if err == nil {
		c.apply(sb)
	}
	return sb, err
}

func (c *claimsBackend) apply(sb *Sandbox) {
	if sb.Labels[LabelPool] == "" {
		return
	}
	if rec := ReadPoolClaim(c.dir, sb.ID); rec != nil {
		applyClaim(sb, rec)
		return
	}
	if filepath.Dir(filepath.Dir(filepath.Clean(sb.Workspace))) == filepath.Join(c.dir, poolSlots) {
		sb.Pool = PoolIdle
	}
}

// matchLabels reports whether labels has every "key" or "key=value" of
// want.
func matchLabels(labels map[string]string, want []string) bool {
	for _, w := range want {
		k, v, withValue := strings.Cut(w, "=")
		got, ok := labels[k]
		if !ok || (withValue && got != v) {
			return false
		}
	}
	return true
}

// SweepForeignPools removes the unclaimed pool members, of any state
// directory, whose pool directory no longer exists (the state directory
// was deleted): they hold no work and can never be claimed. It returns
// their ids.
func SweepForeignPools(ctx context.Context, b Backend) ([]string, error) {
	if c, ok := b.(*claimsBackend); ok {
		b = c.Backend
	}
	list, err := b.List(ctx, ListOptions{Labels: []string{LabelPool}})
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, sb := range list {
		ws := filepath.Clean(sb.Workspace)
		if filepath.Base(ws) != slotWS || !filepath.IsAbs(ws) {
			continue
		}
		dir := filepath.Dir(filepath.Dir(filepath.Dir(ws)))
		if filepath.Base(filepath.Dir(filepath.Dir(ws))) != poolSlots {
			continue
		}
		if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := b.Remove(ctx, sb.ID); err == nil {
			removed = append(removed, sb.ID)
		}
	}
	return removed, nil
}
