package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/llamaserver"
)

// task --gpus consults the managed server and the host's GPU memory only
// when the sandbox gets NVIDIA GPUs and a reserve is configured; an
// unreadable server or memory is a note, too little memory a refusal.
func TestGPUMemoryCheck(t *testing.T) {
	server := &llamaserver.Status{State: llamaserver.StateReady, Devices: []string{"nvidia: 0"},
		Offload: &llamaserver.Offload{Known: true, Layers: 10, TotalLayers: 10, VRAMMiB: 7000}}
	mem := []llamaserver.GPUMemory{{Index: "0", Total: 8192, Used: 7500, Free: 692}, {Index: "1", Total: 8192, Used: 0, Free: 8192}}
	cases := []struct {
		gpus, reserve string
		statusErr     error
		memErr        error
		asked         bool // the server and memory were consulted
		refuse, note  string
	}{
		{"", "1g", nil, nil, false, "", ""},
		{"none", "1g", nil, nil, false, "", ""},
		{"amd", "1g", nil, nil, false, "", ""},
		{"0", "0", nil, nil, false, "", ""},
		{"0", "1g", nil, nil, true, "GPU 0 has 692 MiB free of 8192 MiB", ""},
		{"0", "512m", nil, nil, true, "", ""},
		{"1", "1g", nil, nil, true, "", ""},
		{"all", "1g", nil, nil, true, "GPU 0", ""},
		{"0", "1g", errors.New("engine down"), nil, true, "", "could not read the model server's status (engine down)"},
		{"0", "1g", nil, errors.New("no GPU memory in /sys/class/drm"), true, "", "could not read GPU memory"},
	}
	for _, c := range cases {
		asked := false
		status := func(context.Context) (*llamaserver.Status, error) {
			asked = true
			if c.statusErr != nil {
				return nil, c.statusErr
			}
			return server, nil
		}
		memory := func(context.Context) ([]llamaserver.GPUMemory, error) {
			if c.memErr != nil {
				return nil, c.memErr
			}
			return mem, nil
		}
		note, err := gpuMemoryCheck(context.Background(), c.gpus, c.reserve, status, memory)
		if asked != c.asked {
			t.Errorf("--gpus %q reserve %s: consulted the server = %v", c.gpus, c.reserve, asked)
		}
		if (c.refuse == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.refuse) {
			t.Errorf("--gpus %q reserve %s: error %v, want %q", c.gpus, c.reserve, err, c.refuse)
		}
		if (c.note == "") != (note == "") || !strings.Contains(note, c.note) {
			t.Errorf("--gpus %q reserve %s: note %q, want %q", c.gpus, c.reserve, note, c.note)
		}
	}
	if _, err := gpuMemoryCheck(context.Background(), "0", "lots", nil, nil); err == nil || !strings.Contains(err.Error(), "sandbox.gpu_reserve") {
		t.Errorf("a bad reserve: %v", err)
	}
}
