package llamaserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/images"
)

// Manager starts, inspects and removes managed llama-server containers.
type Manager struct {
	eng  engine
	sink event.Sink

	// Owner is whose servers this manager starts, finds and removes (the
	// zero Owner: the unowned names BaseName and BaseName-INSTANCE).
	Owner Owner

	// Poll is how often /health and the container are checked while the
	// server loads (default 200 ms).
	Poll time.Duration
	// hostDevDir is where device nodes are looked up ("/dev") and
	// meminfo where free memory is read ("/proc/meminfo"); tests point
	// them at fakes.
	hostDevDir string
	meminfo    string
}

// New returns a Manager over the engine client c (a *client.Client with
// API version negotiation). Progress and warnings go to sink (nil: none).
func New(c engine, sink event.Sink) *Manager {
	if sink == nil {
		sink = event.Discard
	}
	return &Manager{eng: c, sink: sink, Poll: 200 * time.Millisecond, hostDevDir: "/dev", meminfo: "/proc/meminfo"}
}

// Result is what Up did.
type Result struct {
	Status
	// Reused is set when a running server with the same settings was kept.
	Reused bool `json:"reused"`
	// Replaced is set when a server with other settings was removed first.
	Replaced bool `json:"replaced"`
	// Restarted is set when a stopped server with the same settings was
	// replaced by a fresh one (after a crash or `docker kill`).
	Restarted bool `json:"restarted"`
	// Warnings about the model or the settings.
	Warnings []string `json:"warnings"`
	// LoadTime is how long the server took to become ready.
	LoadTime time.Duration `json:"load_time_ns"`
}

// Up makes a server with the settings o run and answer /health. A running
// server with the same settings is reused; one with other settings is
// replaced. On any failure the container Up created is removed again, so
// a failed Up leaves nothing behind.
func (m *Manager) Up(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	mc, err := CheckModel(o.Model, o.Ctx, o.Parallel)
	if err != nil {
		return nil, err
	}
	o.StartTimeout = o.timeout()
	res := &Result{Warnings: mc.Warnings}
	if o.GPUs.Mode == GPUNone && m.local() {
		if w := memoryWarning(mc.Header.Size, m.meminfo); w != "" {
			res.Warnings = append(res.Warnings, w)
		}
	}
	for _, w := range res.Warnings {
		m.emit(event.Notice, "warning: "+w)
	}

	o, img, host, err := m.Facts(ctx, o)
	if err != nil {
		return nil, err
	}
	if o.GPUNote != "" {
		m.emit(event.Notice, "note: "+o.GPUNote)
	}
	if o.GPUs.Mode == GPUNvidia && !o.CDI {
		o.CDI = m.CDIAvailable(ctx)
	}
	o.Owner = m.Owner
	name := m.Name(o.Instance)
	hash := SettingsHash(o, img, host)

	// Never replace someone else's server without being told to: on a
	// shared engine it may be another user's loaded model.
	foreign, err := m.foreignOnPort(ctx, o.Port, name)
	if err != nil {
		return nil, err
	}
	if foreign != nil {
		if !o.Force {
			return nil, foreignError(foreign, o.Port)
		}
		m.emit(event.Progress, fmt.Sprintf("replacing %s, which held port %d (--force)", strings.TrimPrefix(firstName(foreign.Names), "/"), o.Port))
		if err := m.remove(ctx, foreign.ID); err != nil {
			return nil, err
		}
	}

	existing, err := m.eng.ContainerInspect(ctx, name)
	switch {
	case err == nil:
		st := existing.State
		if existing.Config != nil && existing.Config.Labels[LabelSettings] == hash && st != nil && st.Running && !st.Restarting {
			m.emit(event.Progress, fmt.Sprintf("reusing %s (same settings)", name))
			if err := m.waitReady(ctx, o, existing.ID, existing.RestartCount, false); err != nil {
				return nil, err
			}
			s, err := m.Status(ctx, o.Instance)
			if err != nil {
				return nil, err
			}
			res.Status, res.Reused = *s, true
			return res, nil
		}
		if existing.Config == nil || existing.Config.Labels[LabelKind] != KindLLM {
			return nil, fmt.Errorf("a container named %s exists but was not created by agent: remove or rename it (`docker rm -f %s`)", name, name)
		}
		if owner := existing.Config.Labels[LabelOwner]; owner != m.Owner.ID && !o.Force {
			return nil, fmt.Errorf("the llama-server %s belongs to the agent with state directory %q, not this one: use another --instance, or replace it with --force", name, existing.Config.Labels[LabelStateDir])
		}
		if existing.Config.Labels[LabelSettings] == hash {
			m.emit(event.Progress, fmt.Sprintf("replacing %s (it had stopped)", name))
			res.Restarted = true
		} else {
			m.emit(event.Progress, fmt.Sprintf("replacing %s (settings changed)", name))
			res.Replaced = true
		}
		if err := m.remove(ctx, existing.ID); err != nil {
			return nil, err
		}
	case cerrdefs.IsNotFound(err):
	default:
		return nil, m.engineError("inspecting "+name, err)
	}

	if m.local() {
		if err := portFree(o.Port); err != nil {
			return nil, err
		}
	}

	cfg, hc := Spec(o, img, host)
	created, err := m.eng.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("another `agent llm up` is creating %s right now: wait for it, then run `agent llm status`: %w", name, err)
		}
		return nil, m.engineError("creating "+name, err)
	}
	started := time.Now()
	m.emit(event.Progress, fmt.Sprintf("starting %s (%s, %s, gpus %s)", name, filepath.Base(o.Model), o.Image, o.GPUs))
	if err := m.eng.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		m.cleanup(ctx, created.ID)
		return nil, newStartError("the engine could not start llama-server", err, "")
	}
	if err := m.waitReady(ctx, o, created.ID, 0, true); err != nil {
		return nil, err
	}
	res.LoadTime = time.Since(started)
	s, err := m.Status(ctx, o.Instance)
	if err != nil {
		return nil, err
	}
	res.Status = *s
	if w := offloadWarning(o.GPUs, s.Offload); w != "" {
		res.Warnings = append(res.Warnings, w)
		m.emit(event.Notice, "warning: "+w)
	}
	return res, nil
}

// ResolveModel makes Model absolute and sets ModelFile (symlinks followed).
func (o *Options) ResolveModel() error {
	abs, err := filepath.Abs(o.Model)
	if err != nil {
		return fmt.Errorf("model path %s: %w", o.Model, err)
	}
	o.Model = abs
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("model path %s: %w", abs, err)
	}
	o.ModelFile = real
	return nil
}

// waitReady polls /health until it answers 200. It fails when the
// container stops or restarts (llama-server exited: the restart policy
// would loop), when StartTimeout passes, or when ctx ends; if removeOnFail
// is set the container is then removed.
func (m *Manager) waitReady(ctx context.Context, o Options, id string, restarts int, removeOnFail bool) error {
	start := time.Now()
	deadline := time.NewTimer(o.StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(m.Poll)
	defer tick.Stop()
	lastReport := time.Time{}
	fail := func(what string, cause error) error {
		tail := m.logTail(ctx, id, 30)
		if removeOnFail {
			m.cleanup(ctx, id)
		}
		return newStartError(what, cause, tail)
	}
	// /health alone: /v1/models answers before the model is loaded.
	health, err := llm.NewHTTP(llm.Options{BaseURL: URL(o.Port), MaxRetries: -1})
	if err != nil {
		return fail("llama-server's address", err)
	}
	for {
		insp, err := m.eng.ContainerInspect(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fail("llama-server's container went away while loading", err)
		}
		if st := insp.State; st != nil && (!st.Running || st.Restarting || insp.RestartCount > restarts) {
			what := fmt.Sprintf("llama-server exited with code %d while loading the model", st.ExitCode)
			if st.OOMKilled {
				what += " (OOM-killed)"
			}
			return fail(what, nil)
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, herr := health.ProbeHealth(hctx)
		cancel()
		if herr == nil && h.Ready {
			m.emit(event.Progress, fmt.Sprintf("llama-server is ready (%s)", time.Since(start).Round(10*time.Millisecond)))
			return nil
		}
		if time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			phase := "waiting for llama-server to listen"
			if herr == nil && h.Loading {
				phase = "loading model " + filepath.Base(o.Model)
			}
			m.sink.Emit(event.Event{Time: time.Now(), Kind: event.Progress, Text: phase, State: "loading", Duration: time.Since(start)})
		}
		select {
		case <-ctx.Done():
		case <-deadline.C:
			return fail(fmt.Sprintf("llama-server did not become ready within %s", o.StartTimeout),
				errors.New("still loading: a big model from a slow disk can take longer; raise llm.start_timeout (AGENT_LLM_START_TIMEOUT)"))
		case <-tick.C:
			continue
		}
		break
	}
	if removeOnFail {
		m.cleanup(ctx, id)
	}
	return fmt.Errorf("waiting for llama-server: %w", ctx.Err())
}

// offloadWarning says when a server given GPUs holds no layer on one:
// the GPU is reserved for a server that runs on the CPU.
func offloadWarning(g GPUs, off *Offload) string {
	if g.Mode != GPUNvidia && g.Mode != GPUAMD {
		return ""
	}
	switch {
	case off == nil:
		return ""
	case off.NoGPU || (off.Known && off.Layers == 0) || (!off.Known && len(off.Devices) == 0 && len(off.Backends) > 0):
		return fmt.Sprintf("llama-server was given GPUs (--gpus %s) but runs on the CPU: its log shows no GPU device or offloaded layer (see `agent llm logs`); the image may lack the GPU backend, or the driver library may be missing", g)
	case off.Known && off.Layers < off.TotalLayers:
		return fmt.Sprintf("only %d of %d layers are on the GPU: the model does not fit; expect CPU speed for the rest", off.Layers, off.TotalLayers)
	}
	return ""
}

// cleanup removes a container even when ctx was cancelled (Ctrl-C during
// a load must not leave a half-started server behind).
func (m *Manager) cleanup(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = m.remove(cctx, id)
}

func (m *Manager) remove(ctx context.Context, id string) error {
	err := m.eng.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing llama-server container %s: %w", id, err)
	}
	return nil
}

// Down removes the server's container. It reports whether one existed.
func (m *Manager) Down(ctx context.Context, instance string) (bool, error) {
	name := m.Name(instance)
	insp, err := m.eng.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, m.engineError("inspecting "+name, err)
	}
	if insp.Config == nil || insp.Config.Labels[LabelKind] != KindLLM {
		return false, fmt.Errorf("the container named %s was not created by agent; not removing it", name)
	}
	return true, m.remove(ctx, insp.ID)
}

// LogsOptions select what Logs prints.
type LogsOptions struct {
	Follow bool
	// Tail is the number of lines from the end ("" or "all": everything).
	Tail string
}

// Logs copies the server's log to stdout and stderr (llama-server logs to
// stderr). With Follow it returns when ctx ends or the container stops.
func (m *Manager) Logs(ctx context.Context, instance string, o LogsOptions, stdout, stderr io.Writer) error {
	name := m.Name(instance)
	rc, err := m.eng.ContainerLogs(ctx, name, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: o.Follow, Tail: o.Tail})
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("no llama-server is running (no container %s): start one with `agent llm up --model FILE`", name)
	}
	if err != nil {
		return m.engineError("reading the log of "+name, err)
	}
	defer rc.Close()
	if _, err := stdcopy.StdCopy(stdout, stderr, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading the log of %s: %w", name, err)
	}
	return nil
}

func (m *Manager) logTail(ctx context.Context, id string, n int) string {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rc, err := m.eng.ContainerLogs(lctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: fmt.Sprint(n)})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, _ = stdcopy.StdCopy(&buf, &buf, io.LimitReader(rc, 256<<10))
	return buf.String()
}

func (m *Manager) emit(k event.Kind, text string) {
	m.sink.Emit(event.Event{Time: time.Now(), Kind: k, Text: text})
}

// CDIAvailable reports whether NVIDIA GPUs should be requested as CDI
// devices: the engine speaks API >= 1.44 (where device requests accept
// the "cdi" driver), has CDI spec directories, and one of them holds an
// NVIDIA spec. Older engines, like Debian's 20.10, get the nvidia device
// driver request instead.
func (m *Manager) CDIAvailable(ctx context.Context) bool {
	if versions.LessThan(m.eng.ClientVersion(), "1.44") || !m.local() {
		return false
	}
	info, err := m.eng.Info(ctx)
	if err != nil {
		return false
	}
	for _, dir := range info.CDISpecDirs {
		for _, spec := range globs(filepath.Join(dir, "*")) {
			if strings.Contains(filepath.Base(spec), "nvidia") {
				return true
			}
		}
	}
	return false
}

// GPURuntime reports whether the engine can pass NVIDIA GPUs to
// containers: the nvidia runtime is registered (nvidia-container-toolkit
// configures it) or an NVIDIA CDI spec is present.
func (m *Manager) GPURuntime(ctx context.Context) bool {
	info, err := m.eng.Info(ctx)
	if err != nil {
		return false
	}
	if _, ok := info.Runtimes["nvidia"]; ok || info.DefaultRuntime == "nvidia" {
		return true
	}
	return m.CDIAvailable(ctx)
}

// gpuImage is the first present GPU build of llama-server (CUDA, then
// Vulkan).
func (m *Manager) gpuImage(ctx context.Context) (ref, backend string) {
	for _, b := range []string{images.BackendCUDA, images.BackendVulkan} {
		ref := images.LlamaServerRef(b)
		if ii, err := m.eng.ImageInspect(ctx, ref); err == nil {
			if ii.Config != nil && ii.Config.Labels[images.LabelBackend] != "" {
				b = ii.Config.Labels[images.LabelBackend]
			}
			return ref, b
		}
	}
	return "", ""
}

// engineError adds what was being done to an engine error and, when the
// engine cannot be reached at all, says how to fix that.
func (m *Manager) engineError(what string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s: cannot reach the Docker engine at %s: start it (`sudo systemctl start docker`) or set DOCKER_HOST: %w", what, m.eng.DaemonHost(), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// local reports whether the engine runs on this machine, so that host
// checks (ports, device nodes) describe what the container will see.
func (m *Manager) local() bool {
	h := m.eng.DaemonHost()
	return strings.HasPrefix(h, "unix://") || strings.HasPrefix(h, "npipe://")
}

func (m *Manager) imageFacts(ctx context.Context, ref string) (ImageFacts, error) {
	ii, err := m.eng.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return ImageFacts{}, fmt.Errorf("image %s is not present: build it with `agent images build llama-server`, or load a GPU build with `agent images load -i FILE` and pass it with --image (images are never pulled)", ref)
	}
	if err != nil {
		return ImageFacts{}, m.engineError("inspecting image "+ref, err)
	}
	f := ImageFacts{ID: ii.ID}
	if ii.Config != nil && len(ii.Config.Entrypoint) > 0 {
		f.HasEntrypoint = true
	}
	if ii.Config != nil {
		f.Backend = ii.Config.Labels[images.LabelBackend]
		if f.Backend == "" && ii.Config.Labels[images.LabelImage] == images.NameLlamaServer {
			// Built here before images carried their backend: those
			// builds were CPU-only.
			f.Backend = images.BackendCPU
		}
	}
	return f, nil
}

var nvidiaNode = regexp.MustCompile(`^nvidia([0-9]+)$`)

// hostFacts decides the user the server runs as and checks the requested
// devices exist (when the engine is local: a remote engine's devices are
// not ours to see).
func (m *Manager) hostFacts(o Options) (HostFacts, error) {
	h := DefaultHostFacts(o.modelFile())
	if !m.local() {
		return h, nil
	}
	switch o.GPUs.Mode {
	case GPUNvidia:
		if o.GPUs.All {
			break // the engine's answer ("could not select device driver") is clearer than ours
		}
		have := m.nvidiaIndexes()
		for _, id := range o.GPUs.IDs {
			if strings.HasPrefix(id, "GPU-") || strings.HasPrefix(id, "MIG-") {
				continue // UUIDs: only the driver knows them
			}
			if !slices.Contains(have, id) {
				if len(have) == 0 {
					return h, fmt.Errorf("--gpus %s: GPU %s not found: this machine shows no NVIDIA GPU (no %s/nvidia0 ...): use --gpus none to run on the CPU", o.GPUs, id, m.hostDevDir)
				}
				return h, fmt.Errorf("--gpus %s: GPU %s not found: this machine has NVIDIA GPUs %s (see `nvidia-smi -L`)", o.GPUs, id, strings.Join(have, ","))
			}
		}
	case GPUAMD:
		nodes, gids := m.amdNodes()
		if len(nodes) == 0 {
			return h, fmt.Errorf("--gpus amd: no %s/dri or %s/kfd device nodes on this machine: install the GPU driver, or use --gpus none", m.hostDevDir, m.hostDevDir)
		}
		h.AMDDevices, h.DeviceGIDs = nodes, gids
	}
	return h, nil
}

func (m *Manager) nvidiaIndexes() []string {
	entries, _ := os.ReadDir(m.hostDevDir)
	var out []string
	for _, e := range entries {
		if sm := nvidiaNode.FindStringSubmatch(e.Name()); sm != nil {
			out = append(out, sm[1])
		}
	}
	slices.Sort(out)
	return out
}

// amdNodes lists /dev/kfd and /dev/dri (as the container should see them)
// and the groups owning the nodes, which the server must join: the nodes
// are usually mode 0660 root:render / root:video.
func (m *Manager) amdNodes() (nodes []string, gids []int) {
	add := func(p string) {
		if _, err := os.Stat(p); err == nil {
			nodes = append(nodes, filepath.Join("/dev", strings.TrimPrefix(p, m.hostDevDir)))
		}
	}
	add(filepath.Join(m.hostDevDir, "kfd"))
	add(filepath.Join(m.hostDevDir, "dri"))
	for _, p := range append([]string{filepath.Join(m.hostDevDir, "kfd")}, globs(filepath.Join(m.hostDevDir, "dri", "*"))...) {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && st.Gid != 0 && !slices.Contains(gids, int(st.Gid)) {
			gids = append(gids, int(st.Gid))
		}
	}
	return nodes, gids
}

func firstName(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

func globs(p string) []string { m, _ := filepath.Glob(p); return m }

// rootRunAs picks the user for a server started by root: never root when
// avoidable (cap-drop ALL already removes root's power, this removes its
// file ownership too). The model's owner can read it; a model owned by
// root that everyone may read, in a directory everyone may enter, is read
// as nobody. Otherwise root it is, still without capabilities.
func rootRunAs(model string) (uid, gid int) {
	var st, dir syscall.Stat_t
	if syscall.Stat(model, &st) != nil || syscall.Stat(filepath.Dir(model), &dir) != nil {
		return 65534, 65534
	}
	if st.Uid != 0 && dir.Uid == st.Uid {
		return int(st.Uid), int(st.Gid)
	}
	if st.Mode&0o004 != 0 && dir.Mode&0o005 == 0o005 {
		return 65534, 65534
	}
	return 0, 0
}

// memoryWarning warns when a model served from the CPU is larger than the
// memory available now: the server would swap or be OOM-killed while
// loading, which otherwise shows only as a slow start and a bare exit.
func memoryWarning(modelSize int64, meminfo string) string {
	data, err := os.ReadFile(meminfo)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "MemAvailable:")
		if !ok {
			continue
		}
		var kb int64
		if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb); err != nil {
			return ""
		}
		if avail := kb << 10; modelSize > avail {
			return fmt.Sprintf("the model (%.1f GiB) is larger than the memory available now (%.1f GiB): expect heavy swapping or an out-of-memory kill; free memory or use a smaller model",
				float64(modelSize)/(1<<30), float64(avail)/(1<<30))
		}
		return ""
	}
	return ""
}

// portFree fails when something already listens on 127.0.0.1:port.
func portFree(port int) error {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("port %d on 127.0.0.1 is already in use: stop what listens there or pick another port with --port", port)
		}
		return fmt.Errorf("checking port %d: %w", port, err)
	}
	return l.Close()
}
