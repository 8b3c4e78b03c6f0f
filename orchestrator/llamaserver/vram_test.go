package llamaserver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const smiTwoGPUs = "0, 81559, 70000, 11559\n1, 81559, 500, 81059\n"

func TestParseNvidiaSMI(t *testing.T) {
	g, err := ParseNvidiaSMI(smiTwoGPUs)
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 2 || g[0] != (GPUMemory{Index: "0", Total: 81559, Used: 70000, Free: 11559}) || g[1].Index != "1" || g[1].Free != 81059 {
		t.Fatalf("got %+v", g)
	}
	for _, bad := range []string{"", "0, 1, 2\n", "0, [N/A], 1, 2\n"} {
		if _, err := ParseNvidiaSMI(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestReadSysfsVRAM(t *testing.T) {
	drm := t.TempDir()
	card := func(name, total, used string) {
		d := filepath.Join(drm, name, "device")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if total != "" {
			os.WriteFile(filepath.Join(d, "mem_info_vram_total"), []byte(total+"\n"), 0o644)
			os.WriteFile(filepath.Join(d, "mem_info_vram_used"), []byte(used+"\n"), 0o644)
		}
	}
	card("card1", "17163091968", "1073741824") // 16368 MiB, 1024 used
	card("card1-DP-1", "", "")
	card("card0", "", "") // no VRAM files: an integrated or non-AMD card
	g, err := ReadSysfsVRAM(drm)
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 1 || g[0] != (GPUMemory{Index: "1", Total: 16368, Used: 1024, Free: 15344}) {
		t.Fatalf("got %+v", g)
	}
	if _, err := ReadSysfsVRAM(t.TempDir()); err == nil {
		t.Fatal("empty drm dir: no error")
	}
}

func TestCheckVRAM(t *testing.T) {
	mem, _ := ParseNvidiaSMI(smiTwoGPUs) // GPU 0: 11559 MiB free, GPU 1: 81059
	gpus := func(s string) GPUs {
		g, err := ParseGPUs(s)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	onGPU := &Offload{Known: true, Layers: 33, TotalLayers: 33, VRAMMiB: 65000}
	server := func(devs ...string) *Status {
		return &Status{State: StateReady, Devices: devs, Offload: onGPU}
	}
	const g1 = 1024
	cases := []struct {
		name    string
		task    GPUs
		server  *Status
		mem     []GPUMemory
		memErr  error
		reserve int64
		refuse  string // part of the error, "" none
		warn    string // part of the warning, "" none
	}{
		{"no server", gpus("0"), nil, mem, nil, g1, "", ""},
		{"server stopped", gpus("0"), &Status{State: StateStopped, Devices: []string{"nvidia: all"}}, mem, nil, g1, "", ""},
		{"server on cpu", gpus("0"), &Status{State: StateReady, Offload: &Offload{Known: true}}, mem, nil, g1, "", ""},
		{"server given a gpu, fell back to cpu", gpus("0"), &Status{State: StateReady, Devices: []string{"nvidia: 0"}, Offload: &Offload{Known: true}}, mem, nil, 20000, "", ""},
		{"other gpu than server", gpus("1"), server("nvidia: 0"), mem, nil, 20000, "", ""},
		{"same gpu, enough free", gpus("0"), server("nvidia: 0"), mem, nil, g1, "", ""},
		{"same gpu, too little free", gpus("0"), server("nvidia: 0"), mem, nil, 20000, "GPU 0 has 11559 MiB free of 81559 MiB (70000 MiB used, of which the model server allocated 65000 MiB)", ""},
		{"server on all, task on ids", gpus("1,0"), server("nvidia: all"), mem, nil, 20000, "GPU 0 has 11559 MiB free", ""},
		{"task all, server on 1 with room", gpus("all"), server("nvidia: 1"), mem, nil, 20000, "", ""},
		{"task all, server on 0", gpus("all"), server("nvidia: 0"), mem, nil, 20000, "GPU 0", ""},
		{"task all, server all", gpus("all"), server("nvidia: all"), mem, nil, 20000, "GPU 0", ""},
		{"unknown offload, given the gpu", gpus("0"), &Status{State: StateLoading, Devices: []string{"nvidia: 0"}}, mem, nil, 20000, "GPU 0", ""},
		{"amd server uses device nodes", gpus("0"), server("/dev/dri", "/dev/kfd"), mem, nil, 20000, "GPU 0", ""},
		{"memory unreadable", gpus("0"), server("nvidia: 0"), nil, errors.New("nvidia-smi: exit status 9"), g1, "", "could not read GPU memory (nvidia-smi: exit status 9)"},
		{"uuid not in the list", gpus("GPU-3f2a0000-1111-2222-3333-444455556666"), server("nvidia: all"), mem, nil, g1, "", "could not read the memory of GPU GPU-3f2a"},
		{"reserve zero", gpus("0"), server("nvidia: 0"), mem, nil, 0, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			warn, err := CheckVRAM(c.task, c.server, c.mem, c.memErr, c.reserve)
			switch {
			case c.refuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refuse != "" && err == nil:
				t.Fatalf("not refused (warning %q)", warn)
			case c.refuse != "" && !strings.Contains(err.Error(), c.refuse):
				t.Fatalf("error %q lacks %q", err, c.refuse)
			}
			if err != nil {
				for _, fix := range []string{"--gpus", "agent llm down", "sandbox.gpu_reserve"} {
					if !strings.Contains(err.Error(), fix) {
						t.Errorf("error %q does not name the fix %q", err, fix)
					}
				}
			}
			if (c.warn == "") != (warn == "") || !strings.Contains(warn, c.warn) {
				t.Fatalf("warning %q, want %q", warn, c.warn)
			}
		})
	}
}
