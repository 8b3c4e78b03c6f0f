package llamaserver

import (
	"fmt"
	"strings"
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
)

// GPUs is a parsed --gpus value.
type GPUs struct {
	Mode GPUMode
	// All is set for every NVIDIA GPU; otherwise IDs lists indexes or UUIDs.
	All bool
	IDs []string
}

// ParseGPUs reads --gpus: "all" (every NVIDIA GPU), "none" or "cpu",
// "amd" (also "rocm", "vulkan", "dri": device nodes), or a comma-separated
// list of NVIDIA indexes or UUIDs ("0,1", "GPU-3f2a...").
func ParseGPUs(s string) (GPUs, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "none", "cpu", "", "0-gpus":
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
			return GPUs{}, fmt.Errorf("--gpus %q: empty GPU id; use all, none, amd, or ids like 0,1", s)
		}
		if !isGPUID(p) {
			return GPUs{}, fmt.Errorf("--gpus %q: %q is not a GPU index or UUID; use all, none, amd, or ids like 0,1", s, p)
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
	case g.Mode == GPUAMD:
		return "amd"
	case g.Mode == GPUNvidia && g.All:
		return "all"
	case g.Mode == GPUNvidia:
		return strings.Join(g.IDs, ",")
	}
	return "none"
}
