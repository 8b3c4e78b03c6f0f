package llamaserver

import (
	"fmt"
	"strings"

	"github.com/localagent/agent/images"
)

// GPUMode says which kind of accelerator the server gets.
type GPUMode int

const (
	// GPUNone runs on the CPU.
	GPUNone GPUMode = iota
	// GPUNvidia passes NVIDIA GPUs through the engine's device requests
	// (nvidia-container-toolkit) or CDI.
	GPUNvidia
	// GPUAMD passes /dev/kfd and /dev/dri (ROCm and Vulkan builds).
	GPUAMD
	// GPUAuto uses every NVIDIA GPU when the engine can pass them and a
	// GPU build of llama-server is present, the CPU otherwise (with a
	// note saying why). ResolveGPUs turns it into one of the others.
	GPUAuto
)

// GPUs is a parsed --gpus value.
type GPUs struct {
	Mode GPUMode
	// All is set for every NVIDIA GPU; otherwise IDs lists indexes or UUIDs.
	All bool
	IDs []string
}

// ParseGPUs reads --gpus: "auto" (or ""), "all" (every NVIDIA GPU), "none" or "cpu",
// "amd" (also "rocm", "vulkan", "dri": device nodes), or a comma-separated
// list of NVIDIA indexes or UUIDs ("0,1", "GPU-3f2a...").
func ParseGPUs(s string) (GPUs, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "auto", "":
		return GPUs{Mode: GPUAuto}, nil
	case "none", "cpu", "0-gpus":
		return GPUs{Mode: GPUNone}, nil
	case "all", "nvidia":
		return GPUs{Mode: GPUNvidia, All: true}, nil
	case "amd", "rocm", "vulkan", "dri":
		return GPUs{Mode: GPUAMD}, nil
	}
	var ids []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return GPUs{}, fmt.Errorf("--gpus %q: empty GPU id; use auto, all, none, amd, or ids like 0,1", s)
		}
		if !isGPUID(p) {
			return GPUs{}, fmt.Errorf("--gpus %q: %q is not a GPU index or UUID; use auto, all, none, amd, or ids like 0,1", s, p)
		}
		ids = append(ids, p)
	}
	return GPUs{Mode: GPUNvidia, IDs: ids}, nil
}

// isGPUID accepts decimal indexes and NVIDIA UUIDs (GPU-/MIG- prefixed hex
// with dashes). Anything else would be passed to the driver verbatim.
func isGPUID(s string) bool {
	if s == "" {
		return false
	}
	digits := true
	for _, r := range s {
		if r < '0' || r > '9' {
			digits = false
		}
	}
	if digits {
		return true
	}
	rest, ok := strings.CutPrefix(s, "GPU-")
	if !ok {
		rest, ok = strings.CutPrefix(s, "MIG-")
	}
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
			return false
		}
	}
	return true
}

// String is the canonical --gpus spelling.
func (g GPUs) String() string {
	switch {
	case g.Mode == GPUAuto:
		return "auto"
	case g.Mode == GPUAMD:
		return "amd"
	case g.Mode == GPUNvidia && g.All:
		return "all"
	case g.Mode == GPUNvidia:
		return strings.Join(g.IDs, ",")
	}
	return "none"
}

// GPUFacts are what ResolveGPUs needs to know about the engine and the
// images.
type GPUFacts struct {
	// Runtime says the engine can pass NVIDIA GPUs to containers: it has
	// the nvidia runtime registered or an NVIDIA CDI spec.
	Runtime bool
	// ImageBackend is the backend label of Options.Image ("" unknown: an
	// image not built here, e.g. a vendor's CUDA or ROCm image).
	ImageBackend string
	// GPUImage is a present GPU build of llama-server (agent/llama-server:
	// cuda, else :vulkan); "" when there is none.
	GPUImage        string
	GPUImageBackend string
}

// ResolveGPUs decides the GPU mode and image before anything starts, so
// that a server never silently runs on the CPU while a GPU was asked for:
//   - auto takes every NVIDIA GPU when the engine can pass them and a GPU
//     image is present (switching from the default CPU image to it), else
//     the CPU, with o.GPUNote saying why;
//   - all or ids with an image that has only the CPU backend is refused:
//     the GPU would be reserved for a server that cannot use it;
//   - amd needs a Vulkan image (or an unlabelled ROCm one).
func ResolveGPUs(o Options, f GPUFacts) (Options, error) {
	o.GPUNote = ""
	switch o.GPUs.Mode {
	case GPUAuto:
		backend := f.ImageBackend
		switch {
		case !f.Runtime:
			o.GPUs = GPUs{Mode: GPUNone}
			o.GPUNote = "llm.gpus auto: the Docker engine has no GPU runtime (nvidia-container-toolkit or an NVIDIA CDI spec), so llama-server runs on the CPU"
			return o, nil
		case images.IsGPUBackend(backend), backend == "" && o.Image != images.LlamaServer:
			// A GPU image, or one not built here (vendor images are GPU
			// builds as a rule): give it the GPUs.
		case o.Image == images.LlamaServer && f.GPUImage != "":
			o.Image = f.GPUImage
			o.GPUNote = "llm.gpus auto: using the GPU image " + f.GPUImage + " instead of " + images.LlamaServer
		default:
			o.GPUs = GPUs{Mode: GPUNone}
			o.GPUNote = "llm.gpus auto: the engine can pass GPUs but " + o.Image + " has only the CPU backend, so llama-server runs on the CPU: build a GPU image with `agent images build llama-server --backend cuda` (or vulkan)"
			return o, nil
		}
		o.GPUs = GPUs{Mode: GPUNvidia, All: true}
		return o, nil
	case GPUNvidia:
		if f.ImageBackend == images.BackendCPU {
			return o, fmt.Errorf("--gpus %s: the image %s has only the CPU backend, so the GPU would sit unused: build a GPU image with `agent images build llama-server --backend cuda` (or --backend vulkan) and pass it with --image %s, or run on the CPU with --gpus none",
				o.GPUs, o.Image, images.LlamaServerRef(images.BackendCUDA))
		}
	case GPUAMD:
		if f.ImageBackend == images.BackendCPU || f.ImageBackend == images.BackendCUDA {
			return o, fmt.Errorf("--gpus amd: the image %s has the %s backend, which cannot use AMD GPUs: build the Vulkan image with `agent images build llama-server --backend vulkan` and pass --image %s, or run on the CPU with --gpus none",
				o.Image, f.ImageBackend, images.LlamaServerRef(images.BackendVulkan))
		}
	}
	return o, nil
}
