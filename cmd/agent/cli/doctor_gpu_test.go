package cli

import (
	"strings"
	"testing"

	"github.com/localagent/agent/images"
	"github.com/localagent/agent/orchestrator/llamaserver"
)

// llm.gpus auto and the image's backend, as doctor judges them.
func TestGPUVerdictAutoAndImage(t *testing.T) {
	nodes := []string{"/dev/nvidia0"}
	for _, tc := range []struct {
		name    string
		f       gpuFacts
		verdict string
		want    string
	}{
		{"auto without GPU", gpuFacts{mode: llamaserver.GPUAuto}, VerdictOK, "runs on the CPU"},
		{"auto, GPU without runtime", gpuFacts{mode: llamaserver.GPUAuto, nvidiaNodes: nodes}, VerdictWarn, "cannot pass them"},
		{"auto, runtime without GPU image", gpuFacts{mode: llamaserver.GPUAuto, nvidiaNodes: nodes, runtimes: []string{"nvidia"}}, VerdictWarn, "no GPU image"},
		{"auto, runtime and GPU image", gpuFacts{mode: llamaserver.GPUAuto, nvidiaNodes: nodes, runtimes: []string{"nvidia"}, gpuImage: images.LlamaServerRef(images.BackendCUDA)}, VerdictOK, "agent/llama-server:cuda"},
		{"all with the CPU image", gpuFacts{mode: llamaserver.GPUNvidia, nvidiaNodes: nodes, runtimes: []string{"nvidia"}, image: images.LlamaServer, imageBackend: images.BackendCPU}, VerdictFail, "only the CPU backend"},
		{"all with the CUDA image", gpuFacts{mode: llamaserver.GPUNvidia, nvidiaNodes: nodes, runtimes: []string{"nvidia"}, imageBackend: images.BackendCUDA}, VerdictOK, "via nvidia runtime"},
	} {
		c := gpuVerdict(tc.f)
		if c.Verdict != tc.verdict || !strings.Contains(c.Detail, tc.want) {
			t.Errorf("%s: %+v", tc.name, c)
		}
		if c.Verdict != VerdictOK && c.Fix == "" {
			t.Errorf("%s: no fix", tc.name)
		}
	}
}

// A running server given GPUs that holds no layer on one fails doctor.
func TestOffloadVerdict(t *testing.T) {
	cpu := &llamaserver.Offload{Known: true, Layers: 0, TotalLayers: 33}
	gpu := &llamaserver.Offload{Known: true, Layers: 33, TotalLayers: 33, Devices: []string{"CUDA0 (NVIDIA \x1b[31mRTX)"}, VRAMMiB: 7000}
	part := &llamaserver.Offload{Known: true, Layers: 20, TotalLayers: 33, Devices: []string{"CUDA0 (x)"}, VRAMMiB: 7000}
	for _, tc := range []struct {
		name    string
		s       llamaserver.Status
		verdict string
		want    string
	}{
		{"gpu server on the CPU", llamaserver.Status{GPUs: "all", Backend: "cuda", Offload: cpu}, VerdictFail, "runs on the CPU"},
		{"gpu server on the GPU", llamaserver.Status{GPUs: "all", Backend: "cuda", Offload: gpu}, VerdictOK, `33/33 layers offloaded, 7000.0 MiB VRAM`},
		{"partly offloaded", llamaserver.Status{GPUs: "0", Offload: part}, VerdictWarn, "20/33"},
		{"cpu server", llamaserver.Status{GPUs: "none", Offload: cpu}, VerdictOK, "CPU"},
	} {
		c := offloadVerdict(&tc.s)
		if c.Verdict != tc.verdict || !strings.Contains(c.Detail, tc.want) {
			t.Errorf("%s: %+v", tc.name, c)
		}
		if strings.Contains(c.Detail, "\x1b") {
			t.Errorf("%s: a device name from the server reached the terminal unescaped: %q", tc.name, c.Detail)
		}
	}
}
