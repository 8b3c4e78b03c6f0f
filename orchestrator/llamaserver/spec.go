package llamaserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"

	"github.com/localagent/agent/images"
	"github.com/localagent/agent/policy"
)

// Label keys on the managed container. LabelManaged and LabelKind are the
// project's common labels; the llm.* keys let status, reuse and gc read the
// settings back from the engine, so no state file can drift from reality.
const (
	LabelManaged  = policy.LabelManaged
	LabelKind     = policy.LabelKind
	LabelInstance = policy.LabelLLMInstance
	LabelSettings = policy.LabelLLMSettings
	LabelModel    = policy.LabelLLMModel
	LabelPort     = policy.LabelLLMPort
	LabelCtx      = policy.LabelLLMCtx
	LabelParallel = policy.LabelLLMParallel
	LabelGPUs     = policy.LabelLLMGPUs
	LabelOwner    = policy.LabelLLMOwner    // Owner.ID: whose server this is
	LabelStateDir = policy.LabelLLMStateDir // state directory that started it
	// LabelBackend is the image's backend (images.LabelBackend), copied
	// to the container so status needs no image inspect.
	LabelBackend = images.LabelBackend
)

// KindLLM is the LabelKind value of the managed llama-server.
const KindLLM = "llm"

// ContainerPort is where llama-server listens inside the container; the
// host port is chosen by Options.Port.
const ContainerPort = 8080

// ModelDir is where the model's directory is mounted (read-only).
const ModelDir = "/models"

// BaseName is the container name of the default managed server; other
// instances (tests, a second model) get BaseName-INSTANCE.
const BaseName = "agent-llm"

// Name returns the container name of instance ("" = the default server).
func Name(instance string) string {
	if instance == "" {
		return BaseName
	}
	return BaseName + "-" + instance
}

// URL is the base URL of a managed server published on port.
func URL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// Options say how to run the server. Zero values are invalid except where
// noted; the command layer fills them from flags and configuration.
type Options struct {
	// Model is the host path of the .gguf file. Its directory is mounted
	// read-only at ModelDir (so split models find their other parts).
	Model string
	// ModelFile is Model with symlinks resolved (Up and Facts set it). A
	// symlink would dangle inside the container when it points out of
	// Model's directory, as model caches' links do, so the real file's
	// directory is mounted. Empty means Model.
	ModelFile string
	// Image runs llama-server; it must already be present (no pulls).
	Image string
	// Port is the host port, bound on 127.0.0.1 only.
	Port int
	// Ctx is the total context (-c); each of Parallel slots gets Ctx/Parallel.
	Ctx      int
	Parallel int
	GPUs     GPUs
	// ExtraArgs are appended to llama-server's arguments. They may not
	// repeat the flags this package sets (ReservedFlags).
	ExtraArgs []string
	// Instance suffixes the container name (tests run several servers).
	Instance string
	// StartTimeout bounds the wait for /health; 0 means 300 s.
	StartTimeout time.Duration
	// CDI requests NVIDIA GPUs as CDI devices (nvidia.com/gpu=...), which
	// engines speaking API >= 1.44 with CDI enabled support; otherwise the
	// nvidia device driver request is used. See UseCDI.
	CDI bool
	// Labels are added to the container's (tests set a per-test label).
	Labels map[string]string
	// Env is added to the server's environment (GGML_VK_VISIBLE_DEVICES,
	// CUDA_VISIBLE_DEVICES, ...).
	Env []string
	// Owner is set by Up from the Manager: it names and labels the
	// container.
	Owner Owner
	// Force lets Up replace a server of another owner that holds Port.
	Force bool
	// GPUNote is set when llm.gpus auto chose the CPU: the one line that
	// says why (no GPU runtime, no GPU image).
	GPUNote string
}

// DefaultStartTimeout is long enough for a big model from a slow disk.
const DefaultStartTimeout = 300 * time.Second

// ReservedFlags are llama-server flags this package always sets; repeating
// them in ExtraArgs would silently change the port, bind address or slot
// layout everything else relies on.
var ReservedFlags = []string{"--host", "--port", "-m", "--model", "-c", "--ctx-size", "-np", "--parallel"}

// Validate checks what can be checked without touching the disk or engine.
func (o Options) Validate() error {
	var errs []error
	if o.Model == "" {
		errs = append(errs, errors.New("no model: pass --model FILE.gguf (or set llm.model)"))
	}
	if o.Image == "" {
		errs = append(errs, errors.New("no llama-server image: set --image or llm.image"))
	}
	if o.Port < 1 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is out of range 1-65535", o.Port))
	}
	if o.Parallel < 1 {
		errs = append(errs, fmt.Errorf("--parallel %d: need at least one slot", o.Parallel))
	}
	if o.Ctx < 1 {
		errs = append(errs, fmt.Errorf("--ctx %d: the context must be positive", o.Ctx))
	}
	for _, a := range o.ExtraArgs {
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains(ReservedFlags, name) {
			errs = append(errs, fmt.Errorf("extra argument %s is set by agent itself; use agent's own flag (--port, --ctx, --parallel, --model) instead", name))
		}
	}
	if strings.ContainsAny(o.Instance, "/: ") {
		errs = append(errs, fmt.Errorf("instance %q may not contain '/', ':' or spaces", o.Instance))
	}
	return errors.Join(errs...)
}

func (o Options) modelFile() string {
	if o.ModelFile != "" {
		return o.ModelFile
	}
	return o.Model
}

// Args are llama-server's arguments. Every setting whose default moved
// between llama.cpp versions is explicit.
func (o Options) Args() []string {
	args := []string{
		"--host", "0.0.0.0",
		"--port", strconv.Itoa(ContainerPort),
		"--model", ModelDir + "/" + filepath.Base(o.modelFile()),
		"--ctx-size", strconv.Itoa(o.Ctx),
		"--parallel", strconv.Itoa(o.Parallel),
		"--jinja",
		"--metrics",
	}
	if o.GPUs.Mode == GPUNvidia || o.GPUs.Mode == GPUAMD {
		// Offload every layer; llama-server caps the number at the model's.
		args = append(args, "--n-gpu-layers", "999")
	} else {
		args = append(args, "--n-gpu-layers", "0")
	}
	return append(args, o.ExtraArgs...)
}

// ImageFacts are what the spec needs to know about the image.
type ImageFacts struct {
	// ID is the image's content id; it is part of the settings hash, so a
	// rebuilt image replaces the running server.
	ID string
	// HasEntrypoint says the image starts llama-server itself (vendor
	// images do); otherwise the command is "llama-server ARGS".
	HasEntrypoint bool
	// Backend is the image's LabelBackend (images.BackendCPU, ...); ""
	// for an image not built here, whose backend is unknown.
	Backend string
}

// HostFacts are what the spec needs to know about the host.
type HostFacts struct {
	// UID and GID run the server: the caller's, so it reads the model the
	// caller can read (see RunAs).
	UID, GID int
	// AMDDevices are the device nodes passed with --gpus amd (/dev/kfd for
	// ROCm, /dev/dri for ROCm and Vulkan); empty means both.
	AMDDevices []string
	// DeviceGIDs are the groups owning those nodes, added to the server's
	// groups (the nodes are group-accessible only).
	DeviceGIDs []int
}

// Spec builds the container's configuration. It is pure: the same inputs
// give the same spec, which unit tests pin down for every GPU mode.
func Spec(o Options, img ImageFacts, host HostFacts) (*container.Config, *container.HostConfig) {
	port := nat.Port(strconv.Itoa(ContainerPort) + "/tcp")
	cmd := o.Args()
	if img.Backend != "" && !hasFlag(o.ExtraArgs, "--slot-save-path") {
		// Slot files let a waiting agent's prompt cache be saved and
		// restored instead of recomputed (in a tmpfs: they are caches).
		cmd = append(cmd, "--slot-save-path", SlotDir)
	}
	if img.Backend != "" && !hasVerbosity(o.ExtraArgs) {
		// The lines that say which device holds the model and how many
		// layers were offloaded are logged at verbosity 4 by the Debian
		// build; status reads them (a vendor image keeps its default).
		cmd = append(cmd, "--log-verbosity", "4")
	}
	if !img.HasEntrypoint {
		cmd = append([]string{"llama-server"}, cmd...)
	}
	labels := map[string]string{}
	for k, v := range o.Labels {
		labels[k] = v
	}
	for k, v := range map[string]string{
		LabelManaged:  "true",
		LabelKind:     KindLLM,
		LabelInstance: o.Instance,
		LabelSettings: SettingsHash(o, img, host),
		LabelModel:    o.Model,
		LabelPort:     strconv.Itoa(o.Port),
		LabelCtx:      strconv.Itoa(o.Ctx),
		LabelParallel: strconv.Itoa(o.Parallel),
		LabelGPUs:     o.GPUs.String(),
		LabelOwner:    o.Owner.ID,
		LabelStateDir: o.Owner.StateDir,
		LabelBackend:  img.Backend,
	} {
		labels[k] = v
	}
	cfg := &container.Config{
		Image:        o.Image,
		Cmd:          cmd,
		User:         fmt.Sprintf("%d:%d", host.UID, host.GID),
		Env:          append([]string{"HOME=/tmp"}, o.Env...), // read-only root: anything cached goes to the tmpfs
		ExposedPorts: nat.PortSet{port: struct{}{}},
		Labels:       labels,
	}
	initOn := true
	pids := int64(4096)
	hc := &container.HostConfig{
		// Only the model's directory, read-only: the server cannot modify or
		// plant files in the user's model store.
		Mounts: []mount.Mount{{
			Type:     mount.TypeBind,
			Source:   filepath.Dir(o.modelFile()),
			Target:   ModelDir,
			ReadOnly: true,
		}},
		// 127.0.0.1 only: the server has no authentication, so it must not
		// be reachable from the network.
		PortBindings:  nat.PortMap{port: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(o.Port)}}},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		// llama-server needs no privilege: it reads a file and serves HTTP.
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=256m", SlotDir: "rw,nosuid,nodev,noexec,mode=1777,size=" + slotDirSize},
		Init:           &initOn, // signals reach llama-server; stop takes ms, not 10 s
		Resources:      container.Resources{PidsLimit: &pids},
	}
	switch o.GPUs.Mode {
	case GPUNvidia:
		hc.DeviceRequests = nvidiaRequests(o.GPUs, o.CDI, img.Backend == images.BackendVulkan)
		if img.Backend == images.BackendVulkan {
			// Vulkan reaches NVIDIA GPUs through the driver's graphics
			// libraries (and its ICD file), which the runtime mounts only
			// when asked for the graphics capability.
			cfg.Env = append(cfg.Env, "NVIDIA_DRIVER_CAPABILITIES="+strings.Join(vulkanCaps, ","))
		}
	case GPUAMD:
		devs := host.AMDDevices
		if len(devs) == 0 {
			devs = []string{"/dev/kfd", "/dev/dri"}
		}
		for _, dev := range devs {
			hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: dev, PathInContainer: dev, CgroupPermissions: "rwm"})
		}
		for _, g := range host.DeviceGIDs {
			hc.GroupAdd = append(hc.GroupAdd, strconv.Itoa(g))
		}
	}
	return cfg, hc
}

// DeviceRequests are the engine's device requests for NVIDIA GPUs g
// (nil for any other mode), as CDI devices when cdi is set.
func DeviceRequests(g GPUs, cdi bool) []container.DeviceRequest {
	if g.Mode != GPUNvidia {
		return nil
	}
	return nvidiaRequests(g, cdi, false)
}

// vulkanCaps are the NVIDIA driver capabilities a Vulkan build needs.
var vulkanCaps = []string{"compute", "utility", "graphics"}

func nvidiaRequests(g GPUs, cdi, vulkan bool) []container.DeviceRequest {
	if cdi {
		// CDI names the devices the NVIDIA toolkit's spec generator wrote.
		ids := []string{"nvidia.com/gpu=all"}
		if !g.All {
			ids = ids[:0]
			for _, id := range g.IDs {
				ids = append(ids, "nvidia.com/gpu="+id)
			}
		}
		return []container.DeviceRequest{{Driver: "cdi", DeviceIDs: ids}}
	}
	req := container.DeviceRequest{Driver: "nvidia", Capabilities: [][]string{{"gpu"}}}
	if vulkan {
		req.Capabilities = [][]string{append([]string{"gpu"}, vulkanCaps...)}
	}
	if g.All {
		req.Count = -1
	} else {
		req.DeviceIDs = append([]string(nil), g.IDs...)
	}
	return []container.DeviceRequest{req}
}

// SettingsHash identifies everything that shapes the running server. Up
// reuses a container whose hash matches and replaces one whose does not.
func SettingsHash(o Options, img ImageFacts, host HostFacts) string {
	b, _ := json.Marshal(struct {
		Model, File, Image, ImageID string
		Port                        int
		Args                        []string
		GPUs                        string
		CDI                         bool
		UID, GID                    int
		Labels                      map[string]string
		Env                         []string `json:",omitempty"`
	}{o.Model, o.modelFile(), o.Image, img.ID, o.Port, o.Args(), o.GPUs.String(), o.CDI, host.UID, host.GID, o.Labels, o.Env})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// SlotDir holds the server's slot files (--slot-save-path); slotDirSize
// bounds them: a save that does not fit fails and the prompt is
// recomputed.
const (
	SlotDir     = "/slots"
	slotDirSize = "2g"
)

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if name, _, _ := strings.Cut(a, "="); name == flag {
			return true
		}
	}
	return false
}

func hasVerbosity(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains([]string{"-lv", "--verbosity", "--log-verbosity", "-v", "--verbose", "--log-verbose"}, name) {
			return true
		}
	}
	return false
}
