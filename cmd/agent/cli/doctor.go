package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/charmbracelet/x/ansi"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/images"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/sandbox"
)

// Verdicts of a doctor check.
const (
	VerdictOK   = "ok"
	VerdictWarn = "warn"
	VerdictFail = "fail"
)

// Check is one doctor finding.
type Check struct {
	Name    string `json:"name"`
	Verdict string `json:"verdict"`
	Detail  string `json:"detail"`
	// Fix says what to do; empty when the verdict is ok.
	Fix string `json:"fix"`
}

// DoctorReport is what `agent doctor --json` prints.
type DoctorReport struct {
	// OK is false when any check failed (warnings do not count).
	OK bool `json:"ok"`
	// Warnings counts the checks whose verdict is warn.
	Warnings int     `json:"warnings"`
	Checks   []Check `json:"checks"`
}

// DoctorOptions are the inputs of `agent doctor`.
type DoctorOptions struct {
	IO      *IOStreams
	Factory *Factory
	JSON    bool
}

// NewCmdDoctor builds `agent doctor`.
func NewCmdDoctor(f *Factory) *cobra.Command {
	return newCmdDoctor(f, nil)
}

func newCmdDoctor(f *Factory, runF func(context.Context, *DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can run tasks and the local model",
		Example: `  agent doctor
  agent doctor --json | jq '.checks[] | select(.verdict != "ok")'`,
		Long: `Check the Docker engine (reachable, API version, seccomp, cgroups), the images,
disk space, git, the toolbox binary, GPU readiness, the configured model file
and the LLM server. Each check has a verdict (ok, warn, fail) and a fix.
Exits 1 when any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return doctorRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the report as one JSON object")
	return cmd
}

func doctorRun(ctx context.Context, opts *DoctorOptions) error {
	// A broken configuration is one of the findings: the other checks run
	// on the defaults.
	var configCheck Check
	cfg, err := opts.Factory.Config()
	switch {
	case err != nil:
		configCheck = Check{Name: "config", Verdict: VerdictFail, Detail: err.Error(),
			Fix: "fix the file named above (`agent config` shows every key and where its value comes from)"}
		if cfg, err = defaultConfig(); err != nil {
			return err
		}
	case len(cfg.Warnings) > 0:
		configCheck = Check{Name: "config", Verdict: VerdictWarn, Detail: strings.Join(cfg.Warnings, "; "),
			Fix: "remove or correct those keys"}
	default:
		configCheck = Check{Name: "config", Verdict: VerdictOK, Detail: configFilesDetail(opts.Factory.conf)}
	}
	d := &doctor{cfg: cfg, devDir: "/dev", cdiDirs: []string{"/etc/cdi", "/var/run/cdi"}}
	d.checks = append(d.checks, configCheck)
	if c, err := opts.Factory.Docker(); err == nil {
		d.docker = c
	} else {
		d.dockerErr = err
	}
	rep := d.run(ctx)
	if opts.JSON {
		if err := writeJSON(opts.IO.Out, rep); err != nil {
			return err
		}
		markJSONWritten(opts.IO)
	} else {
		writeDoctor(opts.IO, rep)
	}
	if !rep.OK {
		return &ExitCodeError{Code: ExitError}
	}
	return nil
}

func writeDoctor(ios *IOStreams, rep DoctorReport) {
	w, width := ios.Out, ios.Width()
	c := colors{on: ios.Color(ios.OutTTY)}
	nameW := 0
	for _, ch := range rep.Checks {
		nameW = max(nameW, ansi.StringWidth(termtext.Line(ch.Name)))
	}
	indent := strings.Repeat(" ", 4+2+nameW+2)
	// On a narrow terminal the detail goes under the name instead of
	// beside it.
	stacked := width > 0 && width-len(indent) < 40
	if stacked {
		indent = strings.Repeat(" ", 6)
	}
	for _, ch := range rep.Checks {
		name := termtext.Line(ch.Name)
		head := c.Verdict(fmt.Sprintf("%-4s", ch.Verdict)) + "  " + name + strings.Repeat(" ", nameW-ansi.StringWidth(name)) + "  "
		if stacked {
			fmt.Fprintln(w, fit(strings.TrimRight(head, " "), width))
			head = indent
		}
		writeWrapped(w, head, indent, termtext.Line(ch.Detail), width)
		if ch.Fix != "" {
			writeWrapped(w, indent+"fix: ", indent+"     ", termtext.Line(ch.Fix), width)
		}
	}
	var warns int
	for _, ch := range rep.Checks {
		if ch.Verdict == VerdictWarn {
			warns++
		}
	}
	switch {
	case !rep.OK:
		fmt.Fprintln(w, "\n"+c.Red("some checks failed")+": see the fixes above")
	case warns > 0:
		fmt.Fprintf(w, "\nall checks passed, with %d warning(s): see the fixes above\n", warns)
	default:
		fmt.Fprintln(w, "\n"+c.Green("all checks passed"))
	}
}

// writeWrapped writes head+text, wrapping text at width (0: no limit) onto
// lines that start with indent. Text longer than a line with no space in
// it is broken.
func writeWrapped(w io.Writer, head, indent, text string, width int) {
	if width <= 0 {
		fmt.Fprintln(w, head+text)
		return
	}
	limit := max(width-max(ansi.StringWidth(indent), ansi.StringWidth(head)), 10)
	for i, l := range strings.Split(ansi.Wrap(text, limit, " "), "\n") {
		if i == 0 {
			fmt.Fprintln(w, fit(head+l, width))
		} else {
			fmt.Fprintln(w, fit(indent+l, width))
		}
	}
}

// defaultConfig is the configuration with nothing but the defaults (for
// doctor, when the real one cannot be read).
func defaultConfig() (*Config, error) {
	v := viper.New()
	setDefaults(v)
	var c Config
	if err := v.Unmarshal(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

func configFilesDetail(l *configLoader) string {
	var parts []string
	if l.userFile != "" {
		parts = append(parts, "user "+l.userFile)
	}
	if l.projectFile != "" {
		parts = append(parts, "project "+l.projectFile)
	}
	if len(parts) == 0 {
		return "no config files: defaults and AGENT_* variables"
	}
	return strings.Join(parts, ", ")
}

// doctor runs the checks. Host paths are fields so tests can point them
// at fake trees.
type doctor struct {
	cfg       *Config
	docker    *client.Client
	dockerErr error
	devDir    string
	cdiDirs   []string

	checks []Check
	info   *system.Info
}

func (d *doctor) add(name, verdict, detail, fix string) {
	d.checks = append(d.checks, Check{Name: name, Verdict: verdict, Detail: detail, Fix: fix})
}

func (d *doctor) run(ctx context.Context) DoctorReport {
	if d.engine(ctx) {
		d.images(ctx)
		d.pool(ctx)
	}
	d.disk()
	d.git(ctx)
	d.toolbox()
	d.gpu()
	d.model()
	d.server(ctx)
	rep := DoctorReport{OK: true, Checks: nonNil(d.checks)}
	for _, c := range d.checks {
		switch c.Verdict {
		case VerdictFail:
			rep.OK = false
		case VerdictWarn:
			rep.Warnings++
		}
	}
	return rep
}

// engine checks reachability, API version, seccomp and cgroups; it
// reports whether the engine can be asked further questions.
func (d *doctor) engine(ctx context.Context) bool {
	if d.dockerErr != nil {
		d.add("engine", VerdictFail, d.dockerErr.Error(), "check DOCKER_HOST and that Docker is installed")
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ping, err := d.docker.Ping(pctx)
	if err != nil {
		fix := "start it (`sudo systemctl start docker`) or point DOCKER_HOST at a running engine"
		if errors.Is(err, fs.ErrPermission) {
			fix = "add your user to the docker group (`sudo usermod -aG docker $USER`, then log in again)"
		}
		d.add("engine", VerdictFail, fmt.Sprintf("cannot reach the Docker engine at %s: %v", d.docker.DaemonHost(), err), fix)
		return false
	}
	info, err := d.docker.Info(pctx)
	if err != nil {
		d.add("engine", VerdictFail, fmt.Sprintf("the engine at %s answered ping but not info: %v", d.docker.DaemonHost(), err), "restart Docker")
		return false
	}
	d.info = &info
	d.add("engine", VerdictOK, fmt.Sprintf("Docker %s at %s (%s, runtime %s)", info.ServerVersion, d.docker.DaemonHost(), info.Driver, info.DefaultRuntime), "")

	api := ping.APIVersion
	if versions.LessThan(api, sandbox.MinAPIVersion) {
		d.add("api version", VerdictFail, fmt.Sprintf("engine API %s is older than %s", api, sandbox.MinAPIVersion), "upgrade Docker to 19.03 or newer")
	} else {
		detail := fmt.Sprintf("engine API %s (client uses %s)", api, d.docker.ClientVersion())
		if versions.LessThan(api, "1.44") {
			detail += "; CDI GPU requests need 1.44, the nvidia device driver is used instead"
		}
		d.add("api version", VerdictOK, detail, "")
	}

	if sandbox.SeccompEnabled(info.SecurityOptions) {
		d.add("seccomp", VerdictOK, "enabled ("+strings.Join(info.SecurityOptions, "; ")+")", "")
	} else {
		d.add("seccomp", VerdictFail, "not enabled on the engine (security options: "+strings.Join(info.SecurityOptions, "; ")+")",
			`sandboxes rely on it: use a Docker built with seccomp and do not set "seccomp-profile": "unconfined" in daemon.json`)
	}

	cg := fmt.Sprintf("cgroup v%s, driver %s", orDefault(info.CgroupVersion, "1"), info.CgroupDriver)
	var missing []string
	if !info.MemoryLimit {
		missing = append(missing, "memory")
	}
	if !info.PidsLimit {
		missing = append(missing, "pids")
	}
	if !info.CPUCfsQuota {
		missing = append(missing, "cpu quota")
	}
	// Podman's Docker-compatible info claims limits that a rootless
	// container without a delegated cgroup never gets; the sandbox
	// package asks Podman's own info.
	eng, engErr := sandbox.New(pctx, d.docker)
	if engErr == nil && eng.Podman {
		for i := range d.checks {
			if d.checks[i].Name == "engine" {
				kind := "Podman"
				if eng.Rootless {
					kind = "rootless Podman"
				}
				d.checks[i].Detail = kind + strings.TrimPrefix(d.checks[i].Detail, "Docker")
			}
		}
	}
	switch {
	case engErr == nil && eng.NoCgroupLimits:
		d.add("cgroups", VerdictWarn, fmt.Sprintf("%s; %s: sandboxes get NO memory or CPU limit, only a process cap (RLIMIT_NPROC)", cg, sandbox.NoCgroupLimitsReason),
			"use cgroup v2 with systemd delegating memory, pids and cpu to your user (docs/engines.md), or rootful Docker")
	case len(missing) > 0:
		d.add("cgroups", VerdictWarn, cg+"; no "+strings.Join(missing, ", ")+" limit support: sandbox limits will not apply",
			"enable the missing cgroup controllers (kernel command line, e.g. cgroup_enable=memory) and restart")
	default:
		d.add("cgroups", VerdictOK, cg+" with memory, pids and cpu limits", "")
	}
	if engErr == nil && eng.SignalFreeze {
		d.add("freeze", VerdictOK, "the engine cannot pause a container: sandboxes are frozen for host git steps by stopping their processes with signals from inside (docs/engines.md says what differs)", "")
	}
	d.isolation(ctx, info)
	return true
}

// isolation reports which isolations the engine offers (Docker: its
// registered runtimes; Podman: its default runtime only, since its
// Docker-compatible API ignores the runtime a request names), whether the
// runsc binary is on this machine, and whether the configured isolation
// can run.
func (d *doctor) isolation(ctx context.Context, info system.Info) {
	e := &sandbox.Engine{Host: d.docker.DaemonHost(), DefaultRuntime: info.DefaultRuntime}
	for name := range info.Runtimes {
		e.Runtimes = append(e.Runtimes, name)
	}
	slices.Sort(e.Runtimes)
	if v, err := d.docker.ServerVersion(ctx); err == nil {
		for _, c := range v.Components {
			if strings.HasPrefix(c.Name, "Podman") {
				e.Podman = true
			}
		}
	}
	var offered []string
	for _, i := range e.OfferedIsolations() {
		offered = append(offered, string(i))
	}
	detail := "engine offers " + orDefault(strings.Join(offered, ", "), "none") + " (runtimes: " + strings.Join(e.Runtimes, ", ") + ", default " + e.DefaultRuntime + ")"
	if e.Podman {
		detail += "; Podman runs every container with its default runtime"
	}
	runsc, err := exec.LookPath("runsc")
	if err == nil {
		detail += "; runsc binary: " + runsc
	} else {
		detail += "; no runsc binary on this machine"
	}
	want, runtime := sandbox.IsolationRunc, ""
	if d.cfg != nil {
		var err error
		if want, err = sandbox.ParseIsolation(d.cfg.Sandbox.Isolation); err != nil {
			d.add("isolation", VerdictFail, detail, "sandbox.isolation: "+err.Error())
			return
		}
		runtime = d.cfg.Sandbox.Runtime
	}
	detail += "; configured: " + string(want)
	if err := e.CheckIsolation(want, runtime); err != nil {
		d.add("isolation", VerdictFail, detail, err.Error())
		return
	}
	if want == sandbox.IsolationRunsc && !e.Podman {
		// Docker shows the flags it runs runsc with: without these two a
		// sandbox fails to start here, or cannot reach the egress proxy.
		name := runtime
		if name == "" {
			name = sandbox.DefaultRunscRuntime
		}
		if missing := missingRunscArgs(info.Runtimes[name].Args); len(missing) > 0 {
			d.add("isolation", VerdictWarn, detail+"; runtime "+name+" runs without "+strings.Join(missing, " "),
				`add them to its "runtimeArgs" in /etc/docker/daemon.json: ["--network=none", "--host-uds=open"] (README: Isolation)`)
			return
		}
	}
	d.add("isolation", VerdictOK, detail, "")
}

// missingRunscArgs lists the runsc flags a sandbox needs that args lack:
// --network=none (sandboxes have no network, and gVisor's network stack
// fails to start on some hosts) and --host-uds=open (the egress proxy's
// socket). Both spellings of a flag count.
func missingRunscArgs(args []string) []string {
	var missing []string
	for _, want := range []string{"--network=none", "--host-uds=open"} {
		found := false
		for _, a := range args {
			if strings.TrimPrefix(a, "-") == strings.TrimPrefix(want, "-") || a == strings.TrimPrefix(want, "-") {
				found = true
			}
		}
		if want == "--host-uds=open" {
			for _, a := range args {
				if strings.HasSuffix(a, "host-uds=all") || strings.HasSuffix(a, "fsgofer-host-uds") {
					found = true
				}
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	return missing
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (d *doctor) images(ctx context.Context) {
	type want struct {
		ref, build, why string
		required        bool
	}
	wants := []want{
		{d.cfg.Sandbox.Image, "sandbox", "tasks run in it", true},
		{images.Busybox, "busybox", "fast tests use it", false},
		{d.cfg.LLM.Image, "llama-server", "`agent llm up` runs it", false},
	}
	if d.cfg.Sandbox.Image != images.Sandbox {
		wants = append(wants, want{images.Sandbox, "sandbox", "the default sandbox", false})
	}
	if d.cfg.LLM.Image != images.LlamaServer {
		wants = append(wants, want{images.LlamaServer, "llama-server", "the default CPU server", false})
	}
	for _, w := range wants {
		ii, err := d.docker.ImageInspect(ctx, w.ref)
		name := "image " + w.ref
		switch {
		case err == nil:
			d.add(name, VerdictOK, fmt.Sprintf("present (%s, %s)", shortID(ii.ID), humanBytes(ii.Size)), "")
		case cerrdefs.IsNotFound(err):
			verdict := VerdictWarn
			if w.required {
				verdict = VerdictFail
			}
			fix := fmt.Sprintf("`agent images build %s`, or `agent images load -i FILE` on an air-gapped machine (images are never pulled)", w.build)
			if w.ref != images.Sandbox && w.ref != images.Busybox && w.ref != images.LlamaServer {
				fix = "load it with `agent images load -i FILE` or `docker load`, or change the configured image"
			}
			d.add(name, verdict, "missing ("+w.why+")", fix)
		default:
			d.add(name, VerdictFail, err.Error(), "check the engine")
		}
	}
}

// disk checks free space where state, worktrees and logs go.
func (d *doctor) disk() {
	dir := d.cfg.StateDir
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		d.add("disk space", VerdictWarn, fmt.Sprintf("cannot read free space of %s: %v", dir, err), "check the state_dir setting")
		return
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	detail := fmt.Sprintf("%s free in %s (state dir %s)", humanBytes(free), dir, d.cfg.StateDir)
	switch {
	case free < 1<<30:
		d.add("disk space", VerdictFail, detail, "free space or move state_dir (AGENT_STATE_DIR) to a larger disk: worktrees and logs need room")
	case free < 5<<30:
		d.add("disk space", VerdictWarn, detail, "worktrees of big repositories need several GiB: free some space")
	default:
		d.add("disk space", VerdictOK, detail, "")
	}
}

var gitVersionRe = regexp.MustCompile(`git version (\d+)\.(\d+)`)

func (d *doctor) git(ctx context.Context) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(gctx, "git", "version").Output()
	if err != nil {
		d.add("git", VerdictFail, "git not found: "+err.Error(), "install git (`sudo apt-get install git`)")
		return
	}
	v := strings.TrimSpace(string(out))
	m := gitVersionRe.FindStringSubmatch(v)
	if m == nil {
		d.add("git", VerdictWarn, "unrecognised version: "+v, "install a git from your distribution")
		return
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	// worktree add --no-checkout, -c core.hooksPath and sparse checkout
	// behave as relied upon from 2.25 on.
	if major < 2 || major == 2 && minor < 25 {
		d.add("git", VerdictWarn, v+" is older than 2.25", "upgrade git")
		return
	}
	d.add("git", VerdictOK, v, "")
}

func (d *doctor) toolbox() {
	p, err := sandbox.FindToolbox(d.cfg.Sandbox.Toolbox)
	if err != nil {
		d.add("toolbox", VerdictFail, err.Error(), "run `make build` (it puts agent-toolbox next to agent), or set sandbox.toolbox")
		return
	}
	d.add("toolbox", VerdictOK, p+" (static)", "")
}

// gpu reports whether the configured --gpus can work: device nodes, the
// engine's NVIDIA support (a registered nvidia runtime, the toolkit's hook
// that serves device requests, or CDI specs).
func (d *doctor) gpu() {
	g, err := llamaserver.ParseGPUs(d.cfg.LLM.GPUs)
	if err != nil {
		d.add("gpu", VerdictFail, err.Error(), "set llm.gpus to all, none, amd or GPU ids")
		return
	}
	f := gpuFacts{mode: g.Mode}
	entries, _ := os.ReadDir(d.devDir)
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "nvidia") && strings.TrimLeft(strings.TrimPrefix(n, "nvidia"), "0123456789") == "" && n != "nvidia" {
			f.nvidiaNodes = append(f.nvidiaNodes, "/dev/"+n)
		}
	}
	if _, err := os.Stat(filepath.Join(d.devDir, "kfd")); err == nil {
		f.amdNodes = append(f.amdNodes, "/dev/kfd")
	}
	if _, err := os.Stat(filepath.Join(d.devDir, "dri")); err == nil {
		f.amdNodes = append(f.amdNodes, "/dev/dri")
	}
	if d.info != nil {
		for name := range d.info.Runtimes {
			f.runtimes = append(f.runtimes, name)
		}
		slices.Sort(f.runtimes)
		f.cdiDirs = d.info.CDISpecDirs
	}
	for _, dir := range d.cdiDirs {
		specs, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, s := range specs {
			if strings.Contains(filepath.Base(s), "nvidia") {
				f.cdiSpecs = append(f.cdiSpecs, s)
			}
		}
	}
	if _, err := exec.LookPath("nvidia-container-runtime-hook"); err == nil {
		f.hook = true
	} else if _, err := exec.LookPath("nvidia-ctk"); err == nil {
		f.hook = true
	}
	if d.docker != nil && d.info != nil {
		f.image = d.cfg.LLM.Image
		if ii, err := d.docker.ImageInspect(context.Background(), f.image); err == nil && ii.Config != nil {
			f.imageBackend = ii.Config.Labels[images.LabelBackend]
		}
		for _, b := range []string{images.BackendCUDA, images.BackendVulkan} {
			if _, err := d.docker.ImageInspect(context.Background(), images.LlamaServerRef(b)); err == nil {
				f.gpuImage = images.LlamaServerRef(b)
				break
			}
		}
	}
	c := gpuVerdict(f)
	d.checks = append(d.checks, c)
}

type gpuFacts struct {
	mode        llamaserver.GPUMode
	nvidiaNodes []string
	amdNodes    []string
	runtimes    []string
	cdiDirs     []string
	cdiSpecs    []string
	hook        bool
	// imageBackend is the backend label of llm.image ("" unknown);
	// gpuImage a present GPU build of llama-server.
	image        string
	imageBackend string
	gpuImage     string
}

func gpuVerdict(f gpuFacts) Check {
	c := Check{Name: "gpu"}
	nvidiaSupport := f.hook || slices.Contains(f.runtimes, "nvidia") || len(f.cdiSpecs) > 0
	switch f.mode {
	case llamaserver.GPUNone:
		c.Verdict, c.Detail = VerdictOK, "llm.gpus is none: llama-server runs on the CPU"
	case llamaserver.GPUAuto:
		switch {
		case len(f.nvidiaNodes) == 0:
			c.Verdict, c.Detail = VerdictOK, "llm.gpus is auto and this machine shows no NVIDIA GPU: llama-server runs on the CPU"
		case !nvidiaSupport:
			c.Verdict = VerdictWarn
			c.Detail = fmt.Sprintf("llm.gpus is auto: NVIDIA devices %s exist but the engine cannot pass them, so llama-server runs on the CPU", strings.Join(f.nvidiaNodes, ", "))
			c.Fix = "install nvidia-container-toolkit (`nvidia-ctk runtime configure --runtime=docker`) and restart Docker"
		case f.gpuImage == "":
			c.Verdict = VerdictWarn
			c.Detail = fmt.Sprintf("llm.gpus is auto: NVIDIA devices %s can be passed, but no GPU image is present, so llama-server runs on the CPU", strings.Join(f.nvidiaNodes, ", "))
			c.Fix = "build one: `agent images build llama-server --backend cuda` (or --backend vulkan)"
		default:
			c.Verdict, c.Detail = VerdictOK, fmt.Sprintf("llm.gpus is auto: NVIDIA devices %s with %s", strings.Join(f.nvidiaNodes, ", "), f.gpuImage)
		}
	case llamaserver.GPUAMD:
		if len(f.amdNodes) == 0 {
			c.Verdict, c.Detail = VerdictWarn, "llm.gpus is amd but there is no /dev/kfd or /dev/dri"
			c.Fix = "install the amdgpu driver, or set llm.gpus to none"
		} else {
			c.Verdict, c.Detail = VerdictOK, "AMD/Vulkan device nodes: "+strings.Join(f.amdNodes, ", ")
		}
	default:
		switch {
		case f.imageBackend == images.BackendCPU:
			c.Verdict = VerdictFail
			c.Detail = fmt.Sprintf("llm.gpus asks for NVIDIA GPUs but llm.image %s has only the CPU backend: `agent llm up` refuses it", f.image)
			c.Fix = "build a GPU image (`agent images build llama-server --backend cuda`) and set llm.image to it, or set llm.gpus: auto"
		case len(f.nvidiaNodes) == 0:
			c.Verdict, c.Detail = VerdictWarn, "llm.gpus asks for NVIDIA GPUs but this machine shows none (no /dev/nvidia0 ...)"
			c.Fix = "run on the CPU: `agent llm up --gpus none` or set llm.gpus: none (AGENT_LLM_GPUS=none)"
			if len(f.amdNodes) > 0 {
				c.Fix = "this machine has " + strings.Join(f.amdNodes, ", ") + ": use --gpus amd with a ROCm or Vulkan image"
			}
		case !nvidiaSupport:
			c.Verdict = VerdictFail
			c.Detail = fmt.Sprintf("NVIDIA devices %s exist but the engine cannot pass them: no nvidia runtime (runtimes: %s), no nvidia-container-runtime-hook, no CDI spec",
				strings.Join(f.nvidiaNodes, ", "), strings.Join(f.runtimes, ", "))
			c.Fix = "install nvidia-container-toolkit (`nvidia-ctk runtime configure --runtime=docker`) and restart Docker"
		default:
			var how []string
			if slices.Contains(f.runtimes, "nvidia") {
				how = append(how, "nvidia runtime")
			}
			if f.hook {
				how = append(how, "container toolkit")
			}
			if len(f.cdiSpecs) > 0 {
				how = append(how, "CDI "+strings.Join(f.cdiSpecs, ","))
			}
			c.Verdict = VerdictOK
			c.Detail = fmt.Sprintf("NVIDIA devices %s via %s", strings.Join(f.nvidiaNodes, ", "), strings.Join(how, ", "))
		}
	}
	return c
}

func (d *doctor) model() {
	if d.cfg.LLM.Model == "" {
		d.add("model", VerdictOK, "no llm.model configured (pass --model to `agent llm up`)", "")
		return
	}
	path := expandHome(d.cfg.LLM.Model)
	mc, err := llamaserver.CheckModel(path, d.cfg.LLM.Ctx, d.cfg.LLM.Parallel)
	if err != nil {
		d.add("model", VerdictFail, err.Error(), "point llm.model at a complete .gguf file")
		return
	}
	h := mc.Header
	detail := fmt.Sprintf("%s: GGUF v%d, %s, trained context %d, %s", path, h.Version, h.Architecture, h.ContextLength, humanBytes(h.Size))
	if len(mc.Warnings) > 0 {
		d.add("model", VerdictWarn, detail+"; "+strings.Join(mc.Warnings, "; "), "adjust llm.ctx and llm.parallel")
		return
	}
	d.add("model", VerdictOK, detail, "")
}

// server checks the LLM endpoint: the configured URL, or the managed
// llama-server. A server that is simply not started is a warning.
func (d *doctor) server(ctx context.Context) {
	if d.cfg.LLM.URL != "" {
		c, err := llm.NewHTTP(llm.Options{BaseURL: d.cfg.LLM.URL, APIKey: d.cfg.LLM.APIKey, MaxRetries: -1})
		if err != nil {
			d.add("llm server", VerdictFail, err.Error(), "fix llm.url")
			return
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		h, err := c.Health(hctx)
		switch {
		case err != nil:
			d.add("llm server", VerdictFail, err.Error(), "start the server at "+d.cfg.LLM.URL+" or fix llm.url")
		case h.Ready:
			info, _ := c.Info(hctx)
			d.add("llm server", VerdictOK, fmt.Sprintf("%s ready: %d slots x %d tokens", d.cfg.LLM.URL, info.Slots, info.ContextWindow), "")
		default:
			d.add("llm server", VerdictWarn, fmt.Sprintf("%s not ready: HTTP %d %s", d.cfg.LLM.URL, h.StatusCode, h.Message), "wait for the model to load")
		}
		return
	}
	if d.docker == nil || d.info == nil {
		return
	}
	m := llamaserver.New(d.docker, nil)
	m.Owner = llamaserver.OwnerOf(d.cfg.StateDir)
	s, err := m.Status(ctx, "")
	if err != nil {
		d.add("llm server", VerdictFail, err.Error(), "remove the conflicting container or set llm.url")
		return
	}
	switch s.State {
	case llamaserver.StateReady:
		d.add("llm server", VerdictOK, fmt.Sprintf("%s ready at %s: %d slots x %d tokens, %s", s.Name, s.URL, s.TotalSlots, s.SlotCtx, filepath.Base(s.Model)), "")
		d.checks = append(d.checks, offloadVerdict(s))
	case llamaserver.StateAbsent:
		d.add("llm server", VerdictWarn, "no managed llama-server is running and llm.url is not set", "`agent llm up --model FILE.gguf`, or set llm.url to an OpenAI-compatible server")
	case llamaserver.StateLoading, llamaserver.StateStarting:
		d.add("llm server", VerdictWarn, fmt.Sprintf("%s is %s", s.Name, s.State), "wait for the model to load (`agent llm status`)")
	default:
		d.add("llm server", VerdictFail, fmt.Sprintf("%s is %s (exit code %d)", s.Name, s.State, s.ExitCode), "see `agent llm logs`, then `agent llm up` again")
	}
}

// offloadVerdict checks, from the running server's log, that a server
// given GPUs holds its layers on one.
func offloadVerdict(s *llamaserver.Status) Check {
	c := Check{Name: "llm offload", Verdict: VerdictOK}
	line := offloadLine(s.Backend, s.Offload)
	gpu := s.GPUs != "" && s.GPUs != "none" && s.GPUs != "auto"
	switch off := s.Offload; {
	case off == nil:
		c.Detail = "the server's log says nothing about devices (see `agent llm logs`)"
	case gpu && !off.OnGPU():
		c.Verdict, c.Detail = VerdictFail, "the server was given GPUs ("+s.GPUs+") but runs on the CPU: "+line
		c.Fix = "check `agent llm logs` for the backend's errors; use a GPU image (`agent images build llama-server --backend cuda`)"
	case gpu && off.Known && off.Layers < off.TotalLayers:
		c.Verdict, c.Detail = VerdictWarn, "part of the model is on the CPU: "+line
		c.Fix = "use a smaller model or context, or a GPU with more memory"
	default:
		c.Detail = line
	}
	return c
}

// pool reports the warm sandbox pool of the state directory: its size and
// its members, idle and claimed, and idle ones that gc would remove.
func (d *doctor) pool(ctx context.Context) {
	if d.cfg.StateDir == "" {
		return
	}
	e, err := sandbox.New(ctx, d.docker)
	if err != nil {
		return // the engine check already says why
	}
	p, err := sandbox.NewPool(e, orchestrator.PoolDir(d.cfg.StateDir), d.cfg.Sandbox.Pool)
	if err != nil {
		return
	}
	members, err := p.Members(ctx)
	if err != nil {
		d.add("warm pool", VerdictWarn, "cannot list the pool's sandboxes: "+err.Error(), "")
		return
	}
	idle, claimed, stale := 0, 0, 0
	for _, m := range members {
		switch {
		case m.Pool == sandbox.PoolClaimed:
			claimed++
		case p.Stale(ctx, m) != "":
			stale++
		default:
			idle++
		}
	}
	detail := fmt.Sprintf("%d started sandbox(es) kept per image and settings in use (sandbox.pool); %d waiting, %d claimed by tasks", d.cfg.Sandbox.Pool, idle, claimed)
	if d.cfg.Sandbox.Pool == 0 {
		detail = fmt.Sprintf("off (sandbox.pool: 0); %d claimed by tasks", claimed)
	}
	if stale > 0 {
		d.add("warm pool", VerdictWarn, fmt.Sprintf("%s; %d idle that should go (pool off, image or toolbox changed, or stopped)", detail, stale), "`agent gc` removes them")
		return
	}
	d.add("warm pool", VerdictOK, detail, "")
}
