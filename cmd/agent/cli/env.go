package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/environment"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/policy"
)

// environmentOptions turns the env.* configuration into the
// orchestrator's options, reading the user's own definition files.
func environmentOptions(cfg *Config) (orchestrator.EnvironmentOptions, error) {
	eo := orchestrator.EnvironmentOptions{Off: cfg.Env.Off, Mirror: cfg.Images.Mirror, SeedHostCaches: cfg.Env.SeedHostCaches, Include: cfg.Env.Include, Bases: cfg.Env.Bases}
	eg, err := policy.ParseEgress(cfg.Env.Egress)
	if err != nil {
		return eo, fmt.Errorf("configuration env.egress: %w", err)
	}
	eo.Egress = eg
	read := func(p string) (*environment.Definition, error) {
		if strings.HasPrefix(p, "~/") {
			home, _ := os.UserHomeDir()
			p = filepath.Join(home, p[2:])
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("environment file: %w", err)
		}
		d, err := environment.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return d, nil
	}
	if cfg.Env.DefaultFile != "" {
		if eo.Default, err = read(cfg.Env.DefaultFile); err != nil {
			return eo, err
		}
	}
	for _, r := range cfg.Env.Repos {
		d, err := read(r.File)
		if err != nil {
			return eo, err
		}
		root := r.Repo
		if abs, err := filepath.Abs(root); err == nil {
			root = abs
		}
		if real, err := filepath.EvalSymlinks(root); err == nil {
			root = real
		}
		if eo.Repos == nil {
			eo.Repos = map[string]*environment.Definition{}
		}
		eo.Repos[root] = d
	}
	return eo, nil
}

// EnvOptions are the inputs of the `agent env` commands.
type EnvOptions struct {
	IO    *IOStreams
	Repo  string
	Base  string
	JSON  bool
	Force bool
	Write bool
	Key   string
	All   bool
}

// NewCmdEnv builds `agent env`.
func NewCmdEnv(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Project environments: toolchain images and dependency caches",
		Long: `A repository describes the toolchain its sandbox needs in .agent/environment.yaml:

  base: agent/sandbox:latest     # optional; any local image (never pulled)
  packages: [golang-go, make]    # Debian packages, from your configured mirror
  setup:                         # run once per build, in the project, as the sandbox user
    - go mod download
  env: {GOFLAGS: -mod=mod}       # set for setup and every command of a task
  network: [proxy.golang.org]    # hosts setup needs: refused unless env.egress allows them

The image is named by a hash of the definition, its base image and the
lock files (go.sum, requirements*.txt, package-lock.json, Cargo.lock ...),
built before the first task that needs it and reused while nothing changes.
Dependency caches (Go, pip, npm, cargo) persist per repository.

  agent env init      propose a definition from the repository's files
  agent env show      the effective environment and its image
  agent env build     build it now
  agent env cache ls | rm KEY`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cache := &cobra.Command{Use: "cache", Short: "Per-repository dependency caches", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	cache.AddCommand(newCmdEnvCacheLs(f), newCmdEnvCacheRm(f))
	cmd.AddCommand(newCmdEnvShow(f, false), newCmdEnvShow(f, true), newCmdEnvInit(f), cache)
	return cmd
}

func newCmdEnvShow(f *Factory, build bool) *cobra.Command {
	opts := &EnvOptions{IO: f.IO}
	use, short := "show", "Show the repository's effective environment and its image"
	if build {
		use, short = "build", "Build the repository's environment image now"
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.SetProjectDir(projectDir(cmd.Context(), opts.Repo))
			if build {
				return envBuild(cmd.Context(), f, opts)
			}
			return envShow(cmd.Context(), f, opts)
		},
	}
	cmd.Flags().StringVar(&opts.Repo, "repo", "", "repository (default: the working directory)")
	cmd.Flags().StringVar(&opts.Base, "base", "", "commit whose environment file and lock files count (default HEAD)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	if build {
		cmd.Flags().BoolVar(&opts.Force, "force", false, "rebuild even when the image is present")
	}
	return cmd
}

func envPlan(ctx context.Context, f *Factory, opts *EnvOptions) (*orchestrator.Orchestrator, *orchestrator.EnvPlan, error) {
	r := newEventRenderer(opts.IO, opts.JSON)
	o, _, err := newOrchestrator(f, r, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	dir := opts.Repo
	if dir == "" {
		dir, _ = os.Getwd()
	}
	p, err := o.PlanEnvironment(ctx, dir, opts.Base)
	if err != nil {
		return nil, nil, err
	}
	if p == nil {
		return o, nil, fmt.Errorf("%s has no environment: no %s, and no env.default_file or env.repos entry in your config (`agent env init` proposes one)", dir, environment.File)
	}
	return o, p, nil
}

func envShow(ctx context.Context, f *Factory, opts *EnvOptions) error {
	_, p, err := envPlan(ctx, f, opts)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSONLine(opts.IO.Out, p)
	}
	w := opts.IO.Out
	state := "not built (the next task or `agent env build` builds it)"
	if p.Present {
		state = "present"
	}
	fmt.Fprintf(w, "source:     %s\n", termtext.Text(p.Source))
	fmt.Fprintf(w, "image:      %s (%s)\n", p.Ref, state)
	fmt.Fprintf(w, "hash:       %s\n", p.Hash)
	fmt.Fprintf(w, "lock files: %s\n", termtext.Text(strings.Join(p.Lockfiles, ", ")))
	fmt.Fprintf(w, "caches:     %s in %s\n", strings.Join(p.Ecosystems, ", "), p.CacheDir)
	fmt.Fprintf(w, "mirror:     %s\n", p.Mirror)
	eg := p.Egress
	if eg == "" {
		eg = "none (env.egress in your config)"
	}
	fmt.Fprintf(w, "setup network: %s\n\n", eg)
	fmt.Fprint(w, termtext.Text(p.Def.YAML()))
	return nil
}

func envBuild(ctx context.Context, f *Factory, opts *EnvOptions) error {
	o, p, err := envPlan(ctx, f, opts)
	if err != nil {
		return err
	}
	res, err := o.BuildEnvironment(ctx, p, opts.Force, nil)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSONLine(opts.IO.Out, res)
	}
	verb := "built"
	if res.Reused {
		verb = "reused"
	}
	fmt.Fprintf(opts.IO.Out, "%s %s in %s\n", verb, res.Ref, res.Duration.Round(1e8))
	return nil
}

func newCmdEnvInit(f *Factory) *cobra.Command {
	opts := &EnvOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use: "init", Short: "Propose an environment from the repository's files", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return envInit(cmd.Context(), opts) },
	}
	cmd.Flags().StringVar(&opts.Repo, "repo", "", "repository (default: the working directory)")
	cmd.Flags().BoolVar(&opts.Write, "write", false, "write it to "+environment.File+" (never over an existing file)")
	return cmd
}

func envInit(ctx context.Context, opts *EnvOptions) error {
	dir := opts.Repo
	if dir == "" {
		dir, _ = os.Getwd()
	}
	repo, err := worktree.Open(ctx, dir)
	if err != nil {
		return err
	}
	base, err := repo.ResolveBase(ctx, "")
	if err != nil {
		return err
	}
	files, err := repo.TopLevelNames(ctx, base.Commit)
	if err != nil {
		return err
	}
	all, err := repo.TreeNames(ctx, base.Commit, 20000)
	if err != nil {
		return err
	}
	read := func(name string) []byte {
		b, _, _ := repo.ReadFile(ctx, base.Commit, name, 1<<20)
		return b
	}
	d := environment.Propose(files, all, read)
	text := "# proposed by `agent env init` from the files at " + base.Commit[:10] + "\n" + d.YAML()
	if len(d.Packages) == 0 {
		text += "# no toolchain recognised: list the Debian packages your build and tests need under packages:\n"
	}
	for _, n := range environment.ProposalNotes(d, read) {
		text += "# note: " + n + "\n"
		fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", termtext.Text(n))
	}
	if !opts.Write {
		fmt.Fprint(opts.IO.Out, termtext.Text(text))
		return nil
	}
	// Written into the user's checkout on the user's command: never over
	// an existing file, never through a symlink.
	adir := filepath.Join(repo.Root, ".agent")
	if err := os.Mkdir(adir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if fi, err := os.Lstat(adir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", adir)
	}
	p := filepath.Join(repo.Root, environment.File)
	fh, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("not writing %s: %w", p, err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(text); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.ErrOut, "wrote %s: review it, commit it, then `agent env build`\n", termtext.Path(p))
	return nil
}

func newCmdEnvCacheLs(f *Factory) *cobra.Command {
	opts := &EnvOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use: "ls", Short: "List the dependency caches of every repository", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.Config()
			if err != nil {
				return err
			}
			list, err := environment.ListCaches(cfg.StateDir)
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSONLine(opts.IO.Out, list)
			}
			tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tREPOSITORY\tCACHES")
			for _, c := range list {
				var parts []string
				names := make([]string, 0, len(c.Sizes))
				for n := range c.Sizes {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					parts = append(parts, fmt.Sprintf("%s %.1f MB", n, float64(c.Sizes[n])/1e6))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Key, termtext.Text(c.Repo), strings.Join(parts, ", "))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func newCmdEnvCacheRm(f *Factory) *cobra.Command {
	opts := &EnvOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use: "rm KEY|REPO | --all", Short: "Delete a repository's dependency caches", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && !opts.All {
				return &usageError{err: errors.New("name a cache key or repository (see `agent env cache ls`), or pass --all")}
			}
			cfg, err := f.Config()
			if err != nil {
				return err
			}
			key := ""
			if len(args) == 1 {
				key = args[0]
			}
			// A running task's sandboxes have the caches mounted: removing
			// them under it would break its builds half-way.
			if st, err := store.Open(filepath.Join(cfg.StateDir, "tasks")); err == nil {
				tasks, _ := st.List()
				for _, tk := range tasks {
					k := environment.RepoKey(tk.RepoGitDir)
					if tk.State == store.Running && (key == "" || key == k || key == tk.Repo) {
						return fmt.Errorf("task %s of %s is running with these caches: wait for it or stop it first", tk.ID, termtext.Text(tk.Repo))
					}
				}
			}
			removed, err := environment.RemoveCaches(cfg.StateDir, key)
			for _, k := range removed {
				fmt.Fprintf(opts.IO.Out, "removed the caches of %s\n", k)
				// The repository's environment images go too: they record
				// that setup filled caches that are now gone.
				if dc, derr := f.Docker(); derr == nil {
					if imgs, lerr := dc.ImageList(context.Background(), image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", environment.RepoPrefix+k))}); lerr == nil {
						for _, im := range imgs {
							for _, tag := range im.RepoTags {
								if strings.HasPrefix(tag, environment.RepoPrefix+k+":") {
									if _, rerr := dc.ImageRemove(context.Background(), tag, image.RemoveOptions{}); rerr == nil {
										fmt.Fprintf(opts.IO.Out, "removed %s\n", tag)
									}
								}
							}
						}
					}
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "delete every repository's caches")
	return cmd
}
