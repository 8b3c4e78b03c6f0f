package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// NewCmdSandbox builds `agent sandbox`, the debug surface over hardened
// workspace containers.
func NewCmdSandbox(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create and use hardened workspace containers (debug surface)",
		Example: `  id=$(agent sandbox create --workspace ./repo)
  agent sandbox exec $id -- sh -c 'id; ls'
  agent sandbox rm $id`,
		Long: `Create, use and remove the hardened containers tasks run in.

A sandbox mounts one host directory at /workspace, has no network, no
capabilities, a read-only root and resource limits, and runs every tool
through the Docker exec API.`,
	}
	cmd.AddCommand(
		NewCmdSandboxCreate(f, nil),
		NewCmdSandboxExec(f, nil),
		NewCmdSandboxTool(f, nil),
		NewCmdSandboxList(f, nil),
		NewCmdSandboxRemove(f, nil),
	)
	return cmd
}

// sandboxBackend is sandboxEngine as the orchestrator takes it (never a
// typed nil inside the interface).
func sandboxBackend(ctx context.Context, f *Factory) (sandbox.Backend, error) {
	e, err := sandboxEngine(ctx, f)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// sandboxEngine connects to the engine through the factory's client and
// checks that it can run sandboxes.
func sandboxEngine(ctx context.Context, f *Factory) (*sandbox.Engine, error) {
	c, err := f.Docker()
	if err != nil {
		return nil, err
	}
	return sandbox.New(ctx, c)
}

// sandboxSpec turns the sandbox.* configuration into the spec every
// workspace sandbox starts from. A missing toolbox comes back on its own,
// as toolboxErr: commands that never create a sandbox work without one.
func sandboxSpec(cfg *Config) (spec sandbox.Spec, toolboxErr, err error) {
	limits, err := policy.LimitsFrom(cfg.Sandbox.Memory, cfg.Sandbox.CPUs, cfg.Sandbox.Pids, cfg.Sandbox.Tmpfs)
	if err != nil {
		return sandbox.Spec{}, nil, fmt.Errorf("sandbox configuration: %w", err)
	}
	var seccomp *specs.LinuxSeccomp
	engineSeccomp := false
	switch cfg.Sandbox.Seccomp {
	case "", "strict":
		seccomp = policy.StrictSeccomp()
	case "default":
		// The documented opt-out: the engine's own profile, which allows
		// io_uring, ptrace and every socket family.
		engineSeccomp = true
	default:
		return sandbox.Spec{}, nil, fmt.Errorf("configuration sandbox.seccomp is %q: want strict (the project's profile, the default) or default (the engine's)", cfg.Sandbox.Seccomp)
	}
	iso, err := sandbox.ParseIsolation(cfg.Sandbox.Isolation)
	if err != nil {
		return sandbox.Spec{}, nil, fmt.Errorf("configuration sandbox.isolation: %w", err)
	}
	if iso == sandbox.IsolationRunc && cfg.Sandbox.Runtime == sandbox.DefaultRunscRuntime {
		// Once, sandbox.runtime: runsc was how gVisor was asked for; the
		// hardening a sandbox is checked for depends on the isolation, so
		// the two must agree rather than one silently win.
		return sandbox.Spec{}, nil, errors.New("configuration sandbox.runtime is runsc (gVisor) but sandbox.isolation is runc: set sandbox.isolation: runsc (or --isolation runsc) and leave sandbox.runtime empty")
	}
	tb, toolboxErr := sandbox.FindToolbox(cfg.Sandbox.Toolbox)
	return sandbox.Spec{
		Image:         cfg.Sandbox.Image,
		Toolbox:       tb,
		Limits:        limits,
		Isolation:     iso,
		Runtime:       cfg.Sandbox.Runtime,
		Seccomp:       seccomp,
		EngineSeccomp: engineSeccomp,
		Shell:         cfg.Sandbox.Shell,
	}, toolboxErr, nil
}

// SandboxCreateOptions are the inputs of `agent sandbox create`.
type SandboxCreateOptions struct {
	IO        *IOStreams
	Factory   *Factory
	Workspace string
	Labels    []string
	User      string
	JSON      bool
	// ChownWorkspace allows handing a root-owned workspace to the
	// unprivileged sandbox uid when agent runs as root (never done unasked).
	ChownWorkspace bool
}

// NewCmdSandboxCreate builds `agent sandbox create`.
func NewCmdSandboxCreate(f *Factory, runF func(context.Context, *SandboxCreateOptions) error) *cobra.Command {
	opts := &SandboxCreateOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "create --workspace DIR [--image IMG] [--json]",
		Short: "Create a sandbox for a directory and print its id",
		Example: `  agent sandbox create --workspace ./repo
  agent sandbox create -w ./repo --isolation runsc
  agent sandbox create -w ./repo --image agent/busybox:latest --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Workspace == "" {
				return UsageErrorf("--workspace DIR is required")
			}
			if s, _ := cmd.Flags().GetString("isolation"); s != "" {
				if _, err := sandbox.ParseIsolation(s); err != nil {
					return UsageErrorf("--isolation: %v", err)
				}
			}
			if s, _ := cmd.Flags().GetString("seccomp"); s != "" && s != "default" && s != "strict" {
				return UsageErrorf("--seccomp %q must be default or strict", s)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return sandboxCreateRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Workspace, "workspace", "w", "", "host `DIR` to mount at /workspace")
	fl.BoolVar(&opts.JSON, "json", false, "print a JSON object instead of the id")
	fl.StringArrayVar(&opts.Labels, "label", nil, "extra container label `KEY=VALUE` (repeatable)")
	fl.StringVarP(&opts.User, "user", "u", "", "`UID:GID` to run as (default: yours; when you are root, the workspace owner or an unprivileged uid)")
	fl.BoolVar(&opts.ChownWorkspace, "chown-workspace", false, "when you are root and root owns the workspace, chown it recursively to the unprivileged sandbox uid (refused otherwise)")
	fl.String("image", "", "sandbox `IMAGE` (config sandbox.image)")
	fl.String("memory", "", "memory limit `SIZE`, e.g. 4g (config sandbox.memory)")
	fl.Float64("cpus", 0, "CPU limit in `CORES` (config sandbox.cpus)")
	fl.Int64("pids", 0, "process limit, `N` (config sandbox.pids)")
	fl.String("tmpfs", "", "`SIZE` of /tmp and the home tmpfs (config sandbox.tmpfs)")
	fl.String("isolation", "", "`runc|runsc`: namespaces and seccomp (the default), or gVisor's user-space kernel (config sandbox.isolation)")
	fl.String("runtime", "", "the engine's `NAME` of the runtime giving the isolation (config sandbox.runtime)")
	fl.String("toolbox", "", "`PATH` of the agent-toolbox binary (config sandbox.toolbox)")
	fl.String("seccomp", "", "seccomp profile, `strict|default`: the project's allowlist (the default) or the engine's (config sandbox.seccomp)")
	for _, k := range []string{"image", "memory", "cpus", "pids", "tmpfs", "isolation", "runtime", "toolbox", "seccomp"} {
		f.BindFlag("sandbox."+k, fl.Lookup(k))
	}
	return cmd
}

// parseLabelFlags reads repeated --label KEY=VALUE flags.
func parseLabelFlags(flags []string) (map[string]string, error) {
	labels := map[string]string{}
	for _, l := range flags {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, UsageErrorf("--label %q must be KEY=VALUE", l)
		}
		labels[k] = v
	}
	return labels, nil
}

func sandboxCreateRun(ctx context.Context, opts *SandboxCreateOptions) error {
	labels, err := parseLabelFlags(opts.Labels)
	if err != nil {
		return err
	}
	cfg, err := opts.Factory.Config()
	if err != nil {
		return err
	}
	// Check the directory before touching the engine: the most common
	// mistake should get the clearest answer.
	if fi, err := os.Stat(opts.Workspace); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("workspace %s does not exist: create it or pass an existing directory", opts.Workspace)
		}
		return fmt.Errorf("workspace %s: %w", opts.Workspace, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("workspace %s is not a directory", opts.Workspace)
	}
	spec, tbErr, err := sandboxSpec(cfg)
	if err != nil {
		return err
	}
	if tbErr != nil {
		return tbErr
	}
	spec.Workspace, spec.Labels, spec.User = opts.Workspace, labels, opts.User
	// The directory is the user's own, not a worktree made for a task: its
	// owner changes only when asked.
	spec.RefuseChown = !opts.ChownWorkspace
	e, err := sandboxEngine(ctx, opts.Factory)
	if err != nil {
		return err
	}
	sb, err := e.Create(ctx, spec)
	if err != nil {
		return err
	}
	sb.Close()
	if sb.Notice != "" {
		fmt.Fprintln(opts.IO.ErrOut, "agent: "+termtext.Text(sb.Notice))
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, newSandboxJSON(sb))
	}
	fmt.Fprintln(opts.IO.Out, sb.ID)
	return nil
}

// writeJSON writes v as one indented JSON document, safe to print
// (termtext.JSON).
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termtext.JSON(b), '\n'))
	return err
}

// SandboxExecOptions are the inputs of `agent sandbox exec`.
type SandboxExecOptions struct {
	IO      *IOStreams
	Factory *Factory
	ID      string
	Cmd     []string
	User    string
	Workdir string
}

// NewCmdSandboxExec builds `agent sandbox exec`.
func NewCmdSandboxExec(f *Factory, runF func(context.Context, *SandboxExecOptions) error) *cobra.Command {
	opts := &SandboxExecOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "exec ID -- CMD...",
		Short: "Run a command in a sandbox, streaming its output; exits with its code",
		Example: `  agent sandbox exec 3f2a -- go test ./...
  agent sandbox exec 3f2a -- sh`,
		Long: `Run a command in a sandbox through the Docker exec API. Standard input is
forwarded; a terminal is allocated when agent runs on one. The exit code is
the command's.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return UsageErrorf("exec takes one sandbox ID before --, got %q", args[:dash])
			}
			opts.ID, opts.Cmd = args[0], args[1:]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return sandboxExecRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.User, "user", "u", "", "`UID[:GID]` to run as (default: the sandbox user)")
	cmd.Flags().StringVar(&opts.Workdir, "workdir", "", "working `DIR` inside the sandbox (default /workspace)")
	return cmd
}

func sandboxExecRun(ctx context.Context, opts *SandboxExecOptions) error {
	e, err := sandboxEngine(ctx, opts.Factory)
	if err != nil {
		return err
	}
	sb, err := e.Get(ctx, opts.ID)
	if err != nil {
		return err
	}
	return execAttached(ctx, opts.IO, sb, sandbox.ExecOptions{Cmd: opts.Cmd, User: opts.User, WorkingDir: opts.Workdir})
}

// execAttached runs a command in sb on the user's streams, on a raw
// terminal that follows resizes when agent runs on one (then ttyArgs are
// added to the command). A non-zero exit becomes agent's own exit code.
func execAttached(ctx context.Context, ios *IOStreams, sb *sandbox.Sandbox, eo sandbox.ExecOptions, ttyArgs ...string) error {
	eo.Stdin, eo.Stdout, eo.Stderr = ios.In, ios.Out, ios.ErrOut
	if in, ok := ios.In.(*os.File); ok && ios.InTTY && ios.OutTTY {
		restore, resize, err := rawTerminal(ctx, in)
		if err != nil {
			return err
		}
		defer restore()
		eo.TTY, eo.Resize = true, resize
		eo.Cmd = append(eo.Cmd, ttyArgs...)
	}
	res, err := sb.Exec(ctx, eo)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &ExitCodeError{Code: res.ExitCode}
	}
	return nil
}

// rawTerminal puts the terminal in raw mode and reports its size now and
// on every SIGWINCH.
func rawTerminal(ctx context.Context, in *os.File) (restore func(), sizes <-chan [2]uint, err error) {
	fd := int(in.Fd())
	state, err := term.MakeRaw(fd)
	if err != nil {
		return nil, nil, fmt.Errorf("terminal: %w", err)
	}
	ch := make(chan [2]uint, 1)
	send := func() {
		if w, h, err := term.GetSize(fd); err == nil {
			select {
			case ch <- [2]uint{uint(h), uint(w)}:
			default:
			}
		}
	}
	send()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-winch:
				send()
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		close(done)
		_ = term.Restore(fd, state)
	}, ch, nil
}

// SandboxToolOptions are the inputs of `agent sandbox tool`.
type SandboxToolOptions struct {
	IO      *IOStreams
	Factory *Factory
	ID      string
	Tool    string
	Args    json.RawMessage
}

// callToolAsAgent runs one named tool with the model's JSON arguments in a
// sandbox through the agent's own tool layer (argument normalisation and
// schema validation, then the toolbox over the exec session), so the
// result is exactly what a model's call would get.
func callToolAsAgent(ctx context.Context, sb *sandbox.Sandbox, name string, args json.RawMessage) (toolbox.Response, error) {
	res, err := agent.RunTool(ctx, orchestrator.NewWorkspace(sb), name, args, agent.ToolOptions{})
	if err != nil {
		return toolbox.Response{}, err
	}
	return toolbox.Response{
		Output:     res.Output,
		IsError:    res.IsError,
		ExitCode:   res.ExitCode,
		TimedOut:   res.TimedOut,
		OOMKilled:  res.OOMKilled,
		Truncated:  res.Truncated,
		DurationMS: res.Duration.Milliseconds(),
	}, nil
}

// NewCmdSandboxTool builds `agent sandbox tool`.
func NewCmdSandboxTool(f *Factory, runF func(context.Context, *SandboxToolOptions) error) *cobra.Command {
	opts := &SandboxToolOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "tool ID NAME [JSON_ARGS]",
		Short: "Run one agent tool in a sandbox and print its result as JSON",
		Example: `  agent sandbox tool 3f2a read_file '{"path":"README.md","limit":20}'
  agent sandbox tool 3f2a bash '{"command":"go test ./...","timeout":300}'`,
		Long: `Run one agent tool (read_file, write_file, edit_file, multi_edit, list_dir,
glob, grep, bash) in a sandbox exactly as the agent does, and print the
result as a JSON object. Exits 1 when the tool reports an error.

  agent sandbox tool 3f2a read_file '{"path":"README.md","limit":20}'
  agent sandbox tool 3f2a bash '{"command":"go test ./...","timeout":300}'`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID, opts.Tool = args[0], args[1]
			opts.Args = json.RawMessage("{}")
			if len(args) == 3 {
				opts.Args = json.RawMessage(args[2])
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return sandboxToolRun(cmd.Context(), opts)
		},
	}
	return cmd
}

func sandboxToolRun(ctx context.Context, opts *SandboxToolOptions) error {
	e, err := sandboxEngine(ctx, opts.Factory)
	if err != nil {
		return err
	}
	sb, err := e.Get(ctx, opts.ID)
	if err != nil {
		return err
	}
	defer sb.Close()
	resp, err := callToolAsAgent(ctx, sb, opts.Tool, opts.Args)
	if err != nil {
		return err
	}
	if err := writeJSON(opts.IO.Out, resp); err != nil {
		return err
	}
	if resp.IsError {
		fmt.Fprintf(opts.IO.ErrOut, "agent: %s failed: %s\n", termtext.Line(opts.Tool), termtext.Line(firstLine(resp.Output)))
		return &ExitCodeError{Code: ExitError}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// SandboxListOptions are the inputs of `agent sandbox ls`.
type SandboxListOptions struct {
	IO      *IOStreams
	Factory *Factory
	JSON    bool
}

// NewCmdSandboxList builds `agent sandbox ls`.
func NewCmdSandboxList(f *Factory, runF func(context.Context, *SandboxListOptions) error) *cobra.Command {
	opts := &SandboxListOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Example: `  agent sandbox ls
  agent sandbox ls --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return sandboxListRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"sandboxes": [...]} as JSON`)
	return cmd
}

func sandboxListRun(ctx context.Context, opts *SandboxListOptions) error {
	raw, err := sandboxEngine(ctx, opts.Factory)
	if err != nil {
		return err
	}
	// Warm pool members of this state directory show as idle, or with
	// the workspace and task they were claimed for.
	var e sandbox.Backend = raw
	if cfg, err := opts.Factory.Config(); err == nil && cfg.StateDir != "" {
		e = sandbox.WithPoolClaims(raw, orchestrator.PoolDir(cfg.StateDir))
	}
	list, err := e.List(ctx, sandbox.ListOptions{})
	if err != nil {
		return err
	}
	if opts.JSON {
		out := make([]sandboxJSON, 0, len(list))
		for _, sb := range list {
			out = append(out, newSandboxJSON(sb))
		}
		return writeJSON(opts.IO.Out, map[string]any{"sandboxes": out})
	}
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tPOOL\tIMAGE\tUSER\tCREATED\tWORKSPACE")
	for _, sb := range list {
		pool := sb.Pool
		if pool == "" {
			pool = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(sb.ID), termtext.Line(sb.State), pool, termtext.Line(sb.Image), termtext.Line(sb.User), age(sb.Created)+" ago", termtext.Path(sb.Workspace))
	}
	return tw.Flush()
}

// SandboxRemoveOptions are the inputs of `agent sandbox rm`.
type SandboxRemoveOptions struct {
	IO      *IOStreams
	Factory *Factory
	IDs     []string
	JSON    bool
}

// NewCmdSandboxRemove builds `agent sandbox rm`.
func NewCmdSandboxRemove(f *Factory, runF func(context.Context, *SandboxRemoveOptions) error) *cobra.Command {
	opts := &SandboxRemoveOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Kill and remove sandboxes (the workspace directory is kept)",
		Example: `  agent sandbox rm 3f2a
  agent sandbox rm $(agent sandbox ls --json | jq -r '.sandboxes[].id')`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.IDs = args
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return sandboxRemoveRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"removed": [ids]} as JSON`)
	return cmd
}

func sandboxRemoveRun(ctx context.Context, opts *SandboxRemoveOptions) error {
	e, err := sandboxEngine(ctx, opts.Factory)
	if err != nil {
		return err
	}
	var errs []error
	removed := []string{}
	for _, id := range opts.IDs {
		sb, err := e.Get(ctx, id)
		if err == nil {
			err = sb.Remove(ctx)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, sb.ID)
		if !opts.JSON {
			fmt.Fprintln(opts.IO.Out, sb.ID)
		}
	}
	if opts.JSON && len(errs) == 0 {
		return writeJSON(opts.IO.Out, map[string]any{"removed": removed})
	}
	return errors.Join(errs...)
}
