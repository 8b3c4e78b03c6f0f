package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator/llamaserver"

	"github.com/localagent/agent/policy"
)

// NewCmdLLM builds `agent llm`.
func NewCmdLLM(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "llm",
		Short: "Manage the local llama-server",
		Example: `  agent llm up --model ~/models/model.gguf
  agent llm status
  agent llm down`,
		Long: `Run llama.cpp's llama-server in a hardened container: the model's directory is
mounted read-only, the port is published on 127.0.0.1 only, GPUs are passed
through the engine's device requests. Images are never pulled: build the CPU
image with 'agent images build llama-server' or load a GPU build with
'agent images load'.`,
	}
	cmd.AddCommand(
		NewCmdLLMUp(f, nil),
		NewCmdLLMStatus(f, nil),
		NewCmdLLMDown(f, nil),
		NewCmdLLMLogs(f, nil),
	)
	return cmd
}

// llmFlags are the server settings shared by `llm up` and `compose render`.
// They are bound to the llm.* configuration keys when the command runs
// (not when it is built), because viper keeps one flag per key and both
// commands have these flags.
type llmFlags struct {
	instance string
	force    bool
	labels   []string
	fs       *pflag.FlagSet
}

func addLLMFlags(cmd *cobra.Command) *llmFlags {
	fl := cmd.Flags()
	fl.String("model", "", "the .gguf model `FILE` (config llm.model)")
	fl.String("gpus", "", "`auto|all|none|amd|IDS`: NVIDIA ids like 0,1 (config llm.gpus, default auto: the GPU when the engine can pass one and a GPU image is present)")
	fl.Int("ctx", 0, "total context in `TOKENS`, shared by the slots (config llm.ctx, default 16384)")
	fl.Int("parallel", 0, "`N` parallel slots, each gets ctx/parallel tokens (config llm.parallel, default 2)")
	fl.Int("port", 0, "`PORT` on 127.0.0.1 (config llm.port, default 8080)")
	fl.String("image", "", "llama-server `IMAGE` (config llm.image, default agent/llama-server:cpu)")
	fl.Duration("start-timeout", 0, "how long to wait for the model to load, e.g. `5m` (config llm.start_timeout, default 5m)")
	_ = cmd.RegisterFlagCompletionFunc("gpus", cobra.FixedCompletions([]string{"auto", "all", "none", "amd", "0", "0,1"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("model", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"gguf"}, cobra.ShellCompDirectiveFilterFileExt
	})
	lf := &llmFlags{fs: fl}
	fl.StringVar(&lf.instance, "instance", "", "run a second, separately named server `NAME` of this state directory (a second model)")
	fl.StringArrayVar(&lf.labels, "label", nil, "extra container label KEY=VALUE (repeatable)")
	_ = fl.MarkHidden("label")
	return lf
}

// instanceFlag adds the --instance flag to status, down and logs.
func instanceFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "instance", "", "the separately named server (llm up --instance NAME) to address")
}

// llmManager is the server manager of this state directory: the servers it
// starts, finds and removes are named and labelled after the state
// directory, so users sharing a Docker engine never touch each other's.
func llmManager(f *Factory, sink event.Sink) (*llamaserver.Manager, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	c, err := f.Docker()
	if err != nil {
		return nil, err
	}
	m := llamaserver.New(c, sink)
	m.Owner = llamaserver.OwnerOf(cfg.StateDir)
	return m, nil
}

// managedLLMAddress finds the running managed server's address from its
// container (the port it really publishes), so a server started with
// `llm up --port N` is found whatever llm.port says. It returns "" when
// there is no such server; the caller then falls back to llm.port.
func managedLLMAddress(f *Factory) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		m, err := llmManager(f, nil)
		if err != nil {
			return "", err
		}
		return m.Address(ctx, "")
	}
}

// options binds the flags and reads the configuration into server options.
func (lf *llmFlags) options(f *Factory, extra []string) (llamaserver.Options, error) {
	for key, name := range map[string]string{
		"llm.model": "model", "llm.gpus": "gpus", "llm.ctx": "ctx", "llm.parallel": "parallel",
		"llm.port": "port", "llm.image": "image", "llm.start_timeout": "start-timeout",
	} {
		f.BindFlag(key, lf.fs.Lookup(name))
	}
	cfg, err := f.Config()
	if err != nil {
		return llamaserver.Options{}, err
	}
	gpus, err := llamaserver.ParseGPUs(cfg.LLM.GPUs)
	if err != nil {
		return llamaserver.Options{}, UsageErrorf("%v", err)
	}
	model := cfg.LLM.Model
	if model != "" {
		model = expandHome(model)
		if model, err = filepath.Abs(model); err != nil {
			return llamaserver.Options{}, err
		}
	}
	labels, err := parseLabelFlags(lf.labels)
	if err != nil {
		return llamaserver.Options{}, err
	}
	for k := range labels {
		if strings.HasPrefix(k, policy.LabelLLMPrefix) || k == llamaserver.LabelManaged || k == llamaserver.LabelKind {
			return llamaserver.Options{}, UsageErrorf("--label %q: agent sets that key itself", k)
		}
	}
	o := llamaserver.Options{
		Labels: labels, Force: lf.force,
		Model: model, Image: cfg.LLM.Image, Port: cfg.LLM.Port, Ctx: cfg.LLM.Ctx, Parallel: cfg.LLM.Parallel,
		GPUs: gpus, ExtraArgs: extra, Instance: lf.instance, StartTimeout: cfg.LLM.StartTimeout,
	}
	if err := o.Validate(); err != nil {
		return o, UsageErrorf("%v", err)
	}
	return o, nil
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// LLMUpOptions are the inputs of `agent llm up`.
type LLMUpOptions struct {
	IO      *IOStreams
	Factory *Factory
	Server  llamaserver.Options
	JSON    bool
}

// NewCmdLLMUp builds `agent llm up`.
func NewCmdLLMUp(f *Factory, runF func(context.Context, *LLMUpOptions) error) *cobra.Command {
	opts := &LLMUpOptions{IO: f.IO, Factory: f}
	var lf *llmFlags
	cmd := &cobra.Command{
		Use:   "up --model FILE [--gpus auto|all|none|amd|IDS] [--ctx N] [--parallel N] [--port N] [--instance NAME] [--force] [-- LLAMA_ARGS...]",
		Short: "Start llama-server (or keep the running one) and wait until the model is loaded",
		Example: `  agent llm up --model ~/models/qwen3-coder.gguf
  agent llm up --model model.gguf --gpus none --ctx 8192 --parallel 2
  agent llm up --model model.gguf -- --flash-attn on`,
		Long: `Start llama-server in a container and wait until /health says the model is
loaded. A server already running with the same settings is kept; one with other
settings is replaced. Arguments after -- are passed to llama-server.

The server belongs to this state directory: its container is named and labelled
after it, so another user's (or another state directory's) server on the same
Docker engine is never replaced or removed; --force replaces one that holds the
requested port. --instance NAME runs a second server of this state directory.

--gpus auto (the default) uses every NVIDIA GPU when the engine has a GPU
runtime (nvidia-container-toolkit or CDI) and a GPU image is present
(agent/llama-server:cuda or :vulkan), and the CPU otherwise, saying why.
--gpus all with an image that has only the CPU backend is refused. After the
start, the server's log says which devices hold the model: see 'agent llm status'.`,
		Args: llamaServerArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Server, err = lf.options(f, args); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return llmUpRun(cmd.Context(), opts)
		},
	}
	lf = addLLMFlags(cmd)
	cmd.Flags().BoolVar(&lf.force, "force", false, "replace a server of another state directory that holds the port")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as one JSON object")
	return cmd
}

func llmUpRun(ctx context.Context, opts *LLMUpOptions) error {
	r := newProgressRenderer(opts.IO)
	defer r.stop()
	m, err := llmManager(opts.Factory, r)
	if err != nil {
		return err
	}
	res, err := m.Up(ctx, opts.Server)
	r.stop()
	if err != nil {
		return err
	}
	if opts.JSON {
		// The status's fields, then what up adds to them.
		b, err := json.Marshal(newLLMStatusJSON(&res.Status))
		if err != nil {
			return err
		}
		m := map[string]any{}
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		m["reused"], m["replaced"], m["restarted"] = res.Reused, res.Replaced, res.Restarted
		m["warnings"], m["load_time_ns"] = nonNil(res.Warnings), res.LoadTime
		return writeJSON(opts.IO.Out, m)
	}
	verb := "started"
	switch {
	case res.Reused:
		verb = "already running"
	case res.Replaced:
		verb = "restarted with new settings"
	case res.Restarted:
		verb = "restarted (it had stopped)"
	}
	fmt.Fprintf(opts.IO.Out, "llama-server %s: %s\n", verb, termtext.Line(res.URL))
	fmt.Fprintf(opts.IO.Out, "  model  %s\n", termtext.Path(res.Model))
	fmt.Fprintf(opts.IO.Out, "  slots  %d x %d tokens (ctx %d), gpus %s\n", res.TotalSlots, res.SlotCtx, res.Ctx, termtext.Line(res.GPUs))
	if line := offloadLine(res.Backend, res.Offload); line != "" {
		fmt.Fprintf(opts.IO.Out, "  device %s\n", line)
	}
	if res.LoadTime > 0 {
		fmt.Fprintf(opts.IO.Out, "  ready  in %s\n", res.LoadTime.Round(10*time.Millisecond))
	}
	return nil
}

// LLMStatusOptions are the inputs of `agent llm status`.
type LLMStatusOptions struct {
	IO       *IOStreams
	Factory  *Factory
	Instance string
	JSON     bool
}

// NewCmdLLMStatus builds `agent llm status`.
func NewCmdLLMStatus(f *Factory, runF func(context.Context, *LLMStatusOptions) error) *cobra.Command {
	opts := &LLMStatusOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the server's state, model, slots and context",
		Long: `Show the managed llama-server's state, model, slots and context. Exits 0
when the server is ready, 1 when it is absent, stopped or still loading.`,
		Example: `  agent llm status
  until agent llm status >/dev/null; do sleep 2; done`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return llmStatusRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the status as one JSON object")
	instanceFlag(cmd, &opts.Instance)
	return cmd
}

func llmStatusRun(ctx context.Context, opts *LLMStatusOptions) error {
	m, err := llmManager(opts.Factory, nil)
	if err != nil {
		return err
	}
	s, err := m.Status(ctx, opts.Instance)
	if err != nil {
		return err
	}
	if cfg, err := opts.Factory.Config(); err == nil && cfg.LLM.URL != "" && opts.Instance == "" {
		// Say so, or a user would wonder why tasks ignore this server.
		fmt.Fprintf(opts.IO.ErrOut, "note: llm.url is set, so tasks use %s, not the managed server\n", cfg.LLM.URL)
	}
	if opts.JSON {
		if err := writeJSON(opts.IO.Out, newLLMStatusJSON(s)); err != nil {
			return err
		}
		markJSONWritten(opts.IO)
	} else {
		writeStatus(opts.IO.Out, s)
	}
	// Like `gh auth status`: scripts can wait on the exit code.
	if s.State != llamaserver.StateReady {
		return &ExitCodeError{Code: ExitError}
	}
	return nil
}

func writeStatus(w io.Writer, s *llamaserver.Status) {
	if s.State == llamaserver.StateAbsent {
		fmt.Fprintf(w, "llama-server is not running (no container %s): start it with `agent llm up --model FILE`\n", s.Name)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	state := s.State
	switch s.State {
	case llamaserver.StateStopped, llamaserver.StateRestarting:
		state += fmt.Sprintf(" (exit code %d", s.ExitCode)
		if s.OOMKilled {
			state += ", out of memory"
		}
		state += "): see `agent llm logs`, then `agent llm up` again"
	case llamaserver.StateStarting, llamaserver.StateLoading, llamaserver.StateUnhealthy:
		if s.Health != "" {
			state += " (" + s.Health + ")"
		}
	}
	row("state", "%s", termtext.Line(state))
	row("url", "%s", termtext.Line(s.URL))
	row("model", "%s", termtext.Path(s.Model))
	row("image", "%s", termtext.Line(s.Image))
	if s.TotalSlots > 0 {
		row("slots", "%d/%d busy, %d tokens of context each (ctx %d)", s.BusySlots, s.TotalSlots, s.SlotCtx, s.Ctx)
	} else {
		row("slots", "%d configured, ctx %d", s.Parallel, s.Ctx)
	}
	gpus := s.GPUs
	if len(s.Devices) > 0 {
		gpus += " (" + strings.Join(s.Devices, "; ") + ")"
	}
	row("gpus", "%s", termtext.Line(gpus))
	if s.Backend != "" {
		row("backend", "%s", termtext.Line(s.Backend))
	}
	if line := offloadLine("", s.Offload); line != "" {
		row("device", "%s", line)
	}
	if s.Build != "" {
		row("build", "%s", termtext.Line(s.Build))
	}
	row("container", "%s (%s)", s.Name, shortID(s.ID))
	_ = tw.Flush()
}

// LLMDownOptions are the inputs of `agent llm down`.
type LLMDownOptions struct {
	IO       *IOStreams
	Factory  *Factory
	Instance string
	JSON     bool
}

// NewCmdLLMDown builds `agent llm down`.
func NewCmdLLMDown(f *Factory, runF func(context.Context, *LLMDownOptions) error) *cobra.Command {
	opts := &LLMDownOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:     "down",
		Short:   "Stop and remove the server's container",
		Example: "  agent llm down",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			m, err := llmManager(f, nil)
			if err != nil {
				return err
			}
			name := m.Name(opts.Instance)
			existed, err := m.Down(cmd.Context(), opts.Instance)
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(opts.IO.Out, map[string]any{"name": name, "removed": existed})
			}
			if existed {
				fmt.Fprintf(opts.IO.ErrOut, "removed %s\n", name)
			} else {
				fmt.Fprintf(opts.IO.ErrOut, "no %s to remove\n", name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"name", "removed"} as JSON`)
	instanceFlag(cmd, &opts.Instance)
	return cmd
}

// LLMLogsOptions are the inputs of `agent llm logs`.
type LLMLogsOptions struct {
	IO       *IOStreams
	Factory  *Factory
	Instance string
	Follow   bool
	Tail     string
	JSON     bool
}

// NewCmdLLMLogs builds `agent llm logs`.
func NewCmdLLMLogs(f *Factory, runF func(context.Context, *LLMLogsOptions) error) *cobra.Command {
	opts := &LLMLogsOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "logs [-f]",
		Short: "Print the server's log",
		Example: `  agent llm logs --tail 50
  agent llm logs -f`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Tail != "all" {
				if n, err := strconv.Atoi(opts.Tail); err != nil || n < 0 {
					return UsageErrorf("--tail %q: want a number of lines or all", opts.Tail)
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			m, err := llmManager(f, nil)
			if err != nil {
				return err
			}
			// The log holds what the server was sent (prompts, file
			// contents): escaped like everything else shown.
			out, errOut := newLineWriter(opts.IO.Out, termtext.Text), newLineWriter(opts.IO.ErrOut, termtext.Text)
			if opts.JSON {
				out = newLineWriter(opts.IO.Out, logLineJSON("stdout"))
				errOut = newLineWriter(opts.IO.Out, logLineJSON("stderr"))
			}
			err = m.Logs(cmd.Context(), opts.Instance,
				llamaserver.LogsOptions{Follow: opts.Follow, Tail: opts.Tail}, out, errOut)
			_ = out.Flush()
			_ = errOut.Flush()
			return err
		},
	}
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new lines")
	cmd.Flags().StringVar(&opts.Tail, "tail", "all", "number of `LINES` from the end, or all")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print one {"stream", "line"} object per line (JSON lines)`)
	instanceFlag(cmd, &opts.Instance)
	return cmd
}

// logLineJSON formats a log line as a JSON line (without its newline: the
// line writer adds it).
func logLineJSON(stream string) func(string) string {
	return func(l string) string {
		var b strings.Builder
		_ = writeJSONLine(&b, map[string]string{"stream": stream, "line": l})
		return strings.TrimSuffix(b.String(), "\n")
	}
}

// progressRenderer shows the server's start on stderr: a spinner line
// that updates in place on a terminal (redrawn every 100 ms), plain lines
// otherwise (at most one "still loading" line every 10 s, so logs stay
// readable).
type progressRenderer struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	status   statusLine
	stopTick func()
	lastText string
	lastLine time.Time
	frame    int

	// The phase on the spinner line and when its clock started.
	phase string
	since time.Time
}

func newProgressRenderer(ios *IOStreams) *progressRenderer {
	r := &progressRenderer{w: ios.ErrOut, tty: ios.ErrTTY && !ios.Dumb, status: statusLine{w: ios.ErrOut, width: ios.ErrWidth}}
	if r.tty {
		r.stopTick = redrawEvery(100*time.Millisecond, &r.mu, func() {
			if r.status.up {
				r.draw()
			}
		})
	}
	return r
}

func (r *progressRenderer) Emit(e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Kind == event.Progress && e.State == "loading" {
		if r.tty {
			r.phase, r.since = termtext.Line(e.Text), time.Now().Add(-e.Duration)
			r.draw()
			return
		}
		if e.Text == r.lastText && time.Since(r.lastLine) < 10*time.Second {
			return
		}
		r.lastText, r.lastLine = e.Text, time.Now()
		fmt.Fprintf(r.w, "%s (%s)\n", termtext.Line(e.Text), e.Duration.Round(time.Second))
		return
	}
	r.status.clear()
	switch e.Kind {
	case event.Progress, event.Notice:
		fmt.Fprintln(r.w, termtext.Text(e.Text))
	case event.Error:
		fmt.Fprintln(r.w, "error: "+termtext.Text(e.Text))
	}
}

// draw writes the spinner line; r.mu is held.
func (r *progressRenderer) draw() {
	r.frame++
	r.status.draw(fmt.Sprintf("%s %s %s", spinner[r.frame%len(spinner)], r.phase, time.Since(r.since).Truncate(time.Second)))
}

// stop ends the spinner and clears its line; it may be called more than
// once.
func (r *progressRenderer) stop() {
	if r.stopTick != nil {
		r.stopTick()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.clear()
}

// llamaServerArgs accepts arguments only after --: they are passed to
// llama-server unchanged.
func llamaServerArgs(cmd *cobra.Command, args []string) error {
	if dash := cmd.ArgsLenAtDash(); dash != 0 && len(args) > 0 {
		return UsageErrorf("unexpected argument %q: llama-server arguments go after --", args[0])
	}
	return nil
}

// llmStatusJSON is the status with every field present: lists [], a
// start time of null when the server never started.
type llmStatusJSON struct {
	*llamaserver.Status
	StartedAt *time.Time `json:"started_at"`
}

func newLLMStatusJSON(s *llamaserver.Status) llmStatusJSON {
	s.Devices, s.Slots = nonNil(s.Devices), nonNil(s.Slots)
	return llmStatusJSON{Status: s, StartedAt: timePtr(s.StartedAt)}
}

// offloadLine says in one line where the model runs, from the server's
// log: "Vulkan0 (llvmpipe ...), 3/3 layers offloaded, 2.1 MiB VRAM". The
// device names come from the server: they are escaped.
func offloadLine(backend string, off *llamaserver.Offload) string {
	if off == nil {
		return ""
	}
	var parts []string
	if backend != "" {
		parts = append(parts, termtext.Line(backend)+" image")
	}
	if len(off.Devices) > 0 {
		parts = append(parts, termtext.Line(strings.Join(off.Devices, "; ")))
	} else {
		parts = append(parts, "CPU")
	}
	if off.Known {
		parts = append(parts, fmt.Sprintf("%d/%d layers offloaded", off.Layers, off.TotalLayers))
	}
	if off.VRAMMiB > 0 {
		parts = append(parts, fmt.Sprintf("%.1f MiB VRAM", off.VRAMMiB))
	}
	return strings.Join(parts, ", ")
}
