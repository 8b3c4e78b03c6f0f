package cli

import (
	"context"
	"fmt"

	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/policy"
)

// sysDRM is where the host's AMD GPUs report their memory.
const sysDRM = "/sys/class/drm"

// gpuMemoryCheck decides whether `task --gpus` may give the sandbox its
// GPUs: a GPU the managed model server also uses must keep
// sandbox.gpu_reserve free. It returns a note (one line) when it could not
// tell, and an error when the GPU has too little free. A --gpus value the
// orchestrator will refuse anyway, or no GPUs, is not checked here.
func gpuMemoryCheck(ctx context.Context, gpus, reserve string,
	status func(context.Context) (*llamaserver.Status, error),
	memory func(context.Context) ([]llamaserver.GPUMemory, error)) (string, error) {
	if gpus == "" || gpus == "none" {
		return "", nil
	}
	g, err := llamaserver.ParseGPUs(gpus)
	if err != nil || g.Mode != llamaserver.GPUNvidia {
		return "", nil
	}
	res, err := policy.ParseSize(reserve)
	if err != nil {
		return "", fmt.Errorf("configuration sandbox.gpu_reserve: %w", err)
	}
	if res == 0 {
		return "", nil
	}
	s, err := status(ctx)
	if err != nil {
		return "could not read the model server's status (" + err.Error() + "): the sandbox gets the GPU without a VRAM check", nil
	}
	mem, memErr := memory(ctx)
	return llamaserver.CheckVRAM(g, s, mem, memErr, res>>20)
}

// hostGPUMemory reads the host's GPU memory for gpuMemoryCheck.
func hostGPUMemory(ctx context.Context) ([]llamaserver.GPUMemory, error) {
	return llamaserver.HostGPUMemory(ctx, sysDRM)
}
