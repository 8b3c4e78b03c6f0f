package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/images"
	"github.com/localagent/agent/orchestrator/environment"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
)

// EnvironmentOptions configure project environments. Everything here comes
// from the user's own configuration: a repository supplies only its
// .agent/environment.yaml, which cannot widen any of it.
type EnvironmentOptions struct {
	// Off ignores every environment definition (the sandbox image alone).
	Off bool
	// Mirror is the configured Debian mirror ("" = the host's apt mirror).
	Mirror string
	// Egress is what setup steps may reach (e.g. an internal module proxy).
	Egress policy.Egress
	// Default applies to a repository with no environment file; Repos,
	// keyed by checkout path, replace a repository's own file.
	Default *environment.Definition
	Repos   map[string]*environment.Definition
	// SeedHostCaches mounts the host's Go module cache read-only as a
	// last-resort module source.
	SeedHostCaches bool
	// Include are the patterns (relative to the checkout's top) of
	// untracked files copied from the user's checkout into each task's
	// worktree; a repository's .agent/include proposes patterns, and only
	// those listed here are copied.
	Include []string
	// Bases are the images a repository's own definition may name as its
	// base, besides the configured sandbox image and the images agent
	// built (env.bases).
	Bases []string
}

// applyEnvironment adds a task's environment (variables, cache mounts) to
// a sandbox spec.
func applyEnvironment(spec *sandbox.Spec, env *store.Environment) {
	if env == nil {
		return
	}
	spec.Env = environment.MergeEnv(spec.Env, env.Env)
	for _, m := range env.Mounts {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
}

// EnvPlan is a repository's effective environment.
type EnvPlan struct {
	Def        *environment.Definition `json:"definition"`
	Source     string                  `json:"source"`
	Lockfiles  []string                `json:"lockfiles"`
	Ecosystems []string                `json:"ecosystems"`
	Ref        string                  `json:"image"`
	// Base is the image the environment is built on.
	Base     string `json:"base"`
	Hash     string `json:"hash"`
	Present  bool   `json:"present"`
	CacheDir string `json:"cache_dir"`
	Mirror   string `json:"mirror"`
	Egress   string `json:"setup_egress"`

	req *environment.Request
}

// loadDefinition finds the environment of a repository at commit: the
// user's definition for this checkout, else the repository's file, else
// the user's default. def is nil when there is none.
func (o *Orchestrator) loadDefinition(ctx context.Context, repo *worktree.Repo, commit string) (def *environment.Definition, source string, err error) {
	eo := o.opts.Environment
	if eo.Off {
		return nil, "", nil
	}
	if d, ok := eo.Repos[repo.Root]; ok && d != nil {
		return d, "user config (env.repos)", nil
	}
	data, found, err := repo.ReadFile(ctx, commit, environment.File, environment.MaxFileBytes)
	if err != nil {
		return nil, "", err
	}
	if found {
		d, err := environment.Parse(data)
		if err != nil {
			return nil, "", err
		}
		return d, environment.File + " at " + short(commit), nil
	}
	if eo.Default != nil {
		return eo.Default, "user config (env.default)", nil
	}
	return nil, "", nil
}

// PlanEnvironment works out a repository's environment at ref ("" = HEAD)
// without building anything. It returns nil when there is none.
func (o *Orchestrator) PlanEnvironment(ctx context.Context, dir, ref string) (*EnvPlan, error) {
	repo, err := worktree.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	base, err := repo.ResolveBase(ctx, ref)
	if err != nil {
		return nil, err
	}
	return o.planEnvironment(ctx, repo, base.Commit)
}

func (o *Orchestrator) planEnvironment(ctx context.Context, repo *worktree.Repo, commit string) (*EnvPlan, error) {
	def, source, err := o.loadDefinition(ctx, repo, commit)
	if err != nil || def == nil {
		return nil, err
	}
	if err := def.Check(); err != nil {
		return nil, err
	}
	files, err := repo.TopLevelNames(ctx, commit)
	if err != nil {
		return nil, err
	}
	lockNames := def.Lockfiles
	if len(lockNames) == 0 {
		lockNames = environment.DetectLockfiles(files)
	}
	locks := map[string][]byte{}
	for _, n := range lockNames {
		b, found, err := repo.ReadFile(ctx, commit, n, 32<<20)
		if err != nil {
			return nil, err
		}
		if found {
			locks[n] = b
		}
	}
	mirror, err := images.ResolveMirror(o.opts.Environment.Mirror)
	if err != nil {
		return nil, err
	}
	u := sandbox.ChooseUser(os.Geteuid(), os.Getegid(), os.Geteuid(), os.Getegid())
	seed := ""
	if o.opts.Environment.SeedHostCaches {
		seed = hostGoDownloadCache()
	}
	caches := environment.CachesFor(o.opts.StateDir, repo.CommonDir, repo.Root)
	req := &environment.Request{
		Def: def, RepoKey: environment.RepoKey(repo.CommonDir), RepoDir: repo.Root, Locks: locks,
		Mirror: mirror, Egress: o.opts.Environment.Egress,
		Export: func(ctx context.Context, dir string) error {
			return exportCommit(ctx, repo, commit, dir)
		},
		Caches: caches, Ecosystems: environment.DetectEcosystems(files, def.Packages), User: u, SeedGo: seed,
		Sandbox: o.opts.Sandbox, WorkDir: filepath.Join(o.opts.StateDir, "envbuild", environment.RepoKey(repo.CommonDir)),
		Bases: o.opts.Environment.Bases, Trusted: !strings.HasPrefix(source, environment.File),
	}
	p := &EnvPlan{Def: def, Source: source, Base: envBase(def, o.opts.Sandbox.Image), Lockfiles: lockNames, Ecosystems: req.Ecosystems, CacheDir: caches.Dir,
		Mirror: mirror, Egress: o.opts.Environment.Egress.String(), req: req}
	dc, err := environment.Connect()
	if err != nil {
		return nil, err
	}
	defer dc.Close()
	b := &environment.Builder{Docker: dc}
	p.Ref, p.Hash, _, err = b.Plan(ctx, req)
	if err != nil {
		return nil, err
	}
	if _, err := dc.ImageInspect(ctx, p.Ref); err == nil {
		p.Present = true
	}
	return p, nil
}

// BuildEnvironment makes the plan's environment present (building it when
// its image is missing or force is set), reporting progress as events.
func (o *Orchestrator) BuildEnvironment(ctx context.Context, p *EnvPlan, force bool, labels map[string]string) (environment.Result, error) {
	e, err := o.engine(ctx)
	if err != nil {
		return environment.Result{}, err
	}
	if o.opts.Sandbox.Toolbox == "" || o.opts.ToolboxError != nil {
		return environment.Result{}, errors.Join(errors.New("environment builds need the toolbox binary"), o.opts.ToolboxError)
	}
	dc, err := environment.Connect()
	if err != nil {
		return environment.Result{}, err
	}
	defer dc.Close()
	// One build per repository at a time: a second task waits, then finds
	// the image the first one built.
	unlock, err := worktree.LockFile(ctx, filepath.Join(o.lockDir(), "env-"+p.req.RepoKey+".lock"))
	if err != nil {
		return environment.Result{}, err
	}
	defer unlock()
	req := *p.req
	req.Force = force
	req.Labels = labels
	req.Progress = func(s string) {
		o.opts.Sink.Emit(event.Event{Time: time.Now(), Kind: event.Progress, State: "environment", Text: s})
	}
	b := &environment.Builder{Docker: dc, Sandboxes: e}
	return b.Ensure(ctx, &req)
}

// prepareEnvironment makes a new task's environment present and returns
// its record, or nil when the repository has none.
func (o *Orchestrator) prepareEnvironment(ctx context.Context, repo *worktree.Repo, commit string) (*store.Environment, string, error) {
	p, err := o.planEnvironment(ctx, repo, commit)
	if err != nil || p == nil {
		if err != nil {
			err = fmt.Errorf("project environment: %w", err)
		}
		return nil, "", err
	}
	res, err := o.BuildEnvironment(ctx, p, false, o.opts.Sandbox.Labels)
	if err != nil {
		return nil, "", fmt.Errorf("building the project environment (%s): %w", p.Source, err)
	}
	rec := &store.Environment{Hash: res.Hash, Source: p.Source, Base: p.Base, Env: res.Env, Reused: res.Reused, BuildMS: res.Duration.Milliseconds()}
	for _, m := range res.Mounts {
		rec.Mounts = append(rec.Mounts, store.CacheMount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return rec, res.Ref, nil
}

// envBase is the image an environment is built on.
func envBase(def *environment.Definition, sandboxImage string) string {
	switch {
	case def != nil && def.Base != "":
		return def.Base
	case sandboxImage != "":
		return sandboxImage
	}
	return sandbox.DefaultImage
}

// exportCommit writes commit's files into dir for setup.
func exportCommit(ctx context.Context, repo *worktree.Repo, commit, dir string) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := repo.Archive(ctx, commit, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	err := environment.ExtractTar(pr, dir, 4<<30, 500_000)
	pr.CloseWithError(io.ErrClosedPipe)
	if aerr := <-errc; aerr != nil && !errors.Is(aerr, io.ErrClosedPipe) && err == nil {
		err = aerr
	}
	return err
}

// hostGoDownloadCache is the host's Go module download cache, if any.
func hostGoDownloadCache() string {
	dir := os.Getenv("GOMODCACHE")
	if dir == "" {
		gp := os.Getenv("GOPATH")
		if gp == "" {
			home, _ := os.UserHomeDir()
			gp = filepath.Join(home, "go")
		}
		dir = filepath.Join(filepath.SplitList(gp)[0], "pkg", "mod")
	}
	d := filepath.Join(dir, "cache", "download")
	if fi, err := os.Stat(d); err == nil && fi.IsDir() {
		return d
	}
	return ""
}
