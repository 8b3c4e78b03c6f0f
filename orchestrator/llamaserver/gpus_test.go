package llamaserver

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/localagent/agent/images"
)

// Every --gpus mode against every kind of image, with and without a GPU
// runtime in the engine: what runs, on which image, with which devices,
// and what is refused.
func TestResolveGPUsAndSpec(t *testing.T) {
	cpu, cuda, vulkan := images.LlamaServer, images.LlamaServerRef(images.BackendCUDA), images.LlamaServerRef(images.BackendVulkan)
	backendOf := map[string]string{cpu: images.BackendCPU, cuda: images.BackendCUDA, vulkan: images.BackendVulkan, "vendor/llama:cuda": ""}
	cases := []struct {
		name     string
		gpus     string
		image    string
		runtime  bool
		gpuImage string // present GPU image auto may switch to
		// want
		image2   string
		mode     string // resolved GPUs.String()
		request  string // "" none, "nvidia", "nvidia+graphics"
		note     string
		errWants string
	}{
		{name: "auto, no runtime, cpu image", gpus: "auto", image: cpu, image2: cpu, mode: "none", note: "has no GPU runtime"},
		{name: "auto, no runtime, cuda image present", gpus: "auto", image: cpu, gpuImage: cuda, image2: cpu, mode: "none", note: "has no GPU runtime"},
		{name: "auto, runtime, only cpu image", gpus: "auto", image: cpu, runtime: true, image2: cpu, mode: "none", note: "has only the CPU backend"},
		{name: "auto, runtime, cuda image present", gpus: "auto", image: cpu, runtime: true, gpuImage: cuda, image2: cuda, mode: "all", request: "nvidia", note: "using the GPU image"},
		{name: "auto, runtime, vulkan image named", gpus: "auto", image: vulkan, runtime: true, image2: vulkan, mode: "all", request: "nvidia+graphics"},
		{name: "auto, runtime, vendor image", gpus: "auto", image: "vendor/llama:cuda", runtime: true, image2: "vendor/llama:cuda", mode: "all", request: "nvidia"},
		{name: "all, cpu image", gpus: "all", image: cpu, runtime: true, errWants: "has only the CPU backend"},
		{name: "ids, cpu image", gpus: "0,1", image: cpu, runtime: true, errWants: "agent images build llama-server --backend cuda"},
		{name: "all, cuda image", gpus: "all", image: cuda, image2: cuda, mode: "all", request: "nvidia"},
		{name: "ids, cuda image", gpus: "1", image: cuda, image2: cuda, mode: "1", request: "nvidia"},
		{name: "all, vulkan image", gpus: "all", image: vulkan, image2: vulkan, mode: "all", request: "nvidia+graphics"},
		{name: "all, vendor image", gpus: "all", image: "vendor/llama:cuda", image2: "vendor/llama:cuda", mode: "all", request: "nvidia"},
		{name: "none, cpu image", gpus: "none", image: cpu, image2: cpu, mode: "none"},
		{name: "none, cuda image", gpus: "none", image: cuda, runtime: true, image2: cuda, mode: "none"},
		{name: "amd, cpu image", gpus: "amd", image: cpu, errWants: "cannot use AMD GPUs"},
		{name: "amd, cuda image", gpus: "amd", image: cuda, errWants: "--backend vulkan"},
		{name: "amd, vulkan image", gpus: "amd", image: vulkan, image2: vulkan, mode: "amd", request: "dri"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(tc.gpus)
			o.Image = tc.image
			f := GPUFacts{Runtime: tc.runtime, ImageBackend: backendOf[tc.image], GPUImage: tc.gpuImage, GPUImageBackend: backendOf[tc.gpuImage]}
			got, err := ResolveGPUs(o, f)
			if tc.errWants != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWants) || !strings.Contains(err.Error(), "--gpus none") {
					t.Fatalf("err = %v, want one with %q and the CPU way out", err, tc.errWants)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Image != tc.image2 || got.GPUs.String() != tc.mode {
				t.Errorf("resolved to image %s gpus %s, want %s %s", got.Image, got.GPUs, tc.image2, tc.mode)
			}
			if (tc.note == "") != (got.GPUNote == "") || !strings.Contains(got.GPUNote, tc.note) {
				t.Errorf("note = %q, want %q", got.GPUNote, tc.note)
			}
			cfg, hc := Spec(got, ImageFacts{ID: "x", HasEntrypoint: true, Backend: backendOf[got.Image]}, HostFacts{UID: 1000, GID: 1000})
			args := strings.Join(cfg.Cmd, " ")
			var req string
			switch {
			case len(hc.DeviceRequests) == 1 && hc.DeviceRequests[0].Driver == "nvidia":
				req = "nvidia"
				if slices.Contains(hc.DeviceRequests[0].Capabilities[0], "graphics") {
					req += "+graphics"
					if !slices.Contains(cfg.Env, "NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics") {
						t.Errorf("vulkan on nvidia without the graphics capability env: %v", cfg.Env)
					}
				}
				if !strings.Contains(args, "--n-gpu-layers 999") {
					t.Errorf("GPU server does not offload: %s", args)
				}
			case len(hc.Devices) > 0:
				req = "dri"
			case len(hc.DeviceRequests) > 0:
				t.Fatalf("unexpected requests %+v", hc.DeviceRequests)
			default:
				if !strings.Contains(args, "--n-gpu-layers 0") {
					t.Errorf("CPU server offloads: %s", args)
				}
			}
			if req != tc.request {
				t.Errorf("device request = %q, want %q (%+v)", req, tc.request, hc.DeviceRequests)
			}
			if want := backendOf[got.Image]; cfg.Labels[LabelBackend] != want {
				t.Errorf("backend label = %q, want %q", cfg.Labels[LabelBackend], want)
			}
			// Images built here log their device lines (verbosity 4);
			// vendor images keep their own defaults.
			if has := strings.Contains(args, "--log-verbosity 4"); has != (backendOf[got.Image] != "") {
				t.Errorf("log verbosity in %q", args)
			}
		})
	}
}

func TestParseOffload(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// Recorded from agent/llama-server:vulkan on lavapipe (Mesa's Vulkan
	// on the CPU) with the test's tiny model.
	vk := ParseOffload(read("vulkan-lavapipe.log"))
	if !vk.Known || vk.Layers != 3 || vk.TotalLayers != 3 || !slices.Equal(vk.Devices, []string{"Vulkan0 (llvmpipe (LLVM 22.1.8, 256 bits))"}) || !vk.OnGPU() {
		t.Errorf("vulkan: %+v", vk)
	}
	// 0.38 model + 0.25 KV + 1.51 compute on Vulkan0; host buffers not.
	if vk.VRAMMiB < 2.13 || vk.VRAMMiB > 2.15 {
		t.Errorf("vulkan VRAM = %v MiB", vk.VRAMMiB)
	}
	cu := ParseOffload(read("cuda.log"))
	if cu.Layers != 33 || cu.TotalLayers != 33 || !slices.Equal(cu.Backends, []string{"CUDA", "CPU"}) ||
		!slices.Equal(cu.Devices, []string{"CUDA0 (NVIDIA GeForce RTX 4090)"}) || cu.VRAMMiB != 4403.49+2048+560 {
		t.Errorf("cuda: %+v", cu)
	}
	// A GPU build that found no GPU says so in any verbosity.
	cpu := ParseOffload("warning: no usable GPU found, --gpu-layers option will be ignored\nsrv load_model: loading model\n")
	if !cpu.NoGPU || cpu.OnGPU() {
		t.Errorf("cpu: %+v", cpu)
	}
	all, _ := ParseGPUs("all")
	if w := offloadWarning(all, &cpu); !strings.Contains(w, "runs on the CPU") {
		t.Errorf("no warning for a GPU server on the CPU: %q", w)
	}
	if w := offloadWarning(all, &cu); w != "" {
		t.Errorf("warning for a fully offloaded server: %q", w)
	}
	part := cu
	part.Layers = 20
	if w := offloadWarning(all, &part); !strings.Contains(w, "20 of 33") {
		t.Errorf("partial offload: %q", w)
	}
	none, _ := ParseGPUs("none")
	if w := offloadWarning(none, &cpu); w != "" {
		t.Errorf("warning for a CPU server: %q", w)
	}
}

func TestOwnerNames(t *testing.T) {
	a, b := OwnerOf("/home/a/.local/state/agent"), OwnerOf("/home/b/.local/state/agent")
	if a.ID == b.ID || len(a.ID) != 8 || OwnerOf("/home/a/.local/state/agent/.").ID != a.ID {
		t.Errorf("owner ids: %q %q", a.ID, b.ID)
	}
	if n := ContainerName(a, ""); n != "agent-llm-"+a.ID {
		t.Errorf("default name %q", n)
	}
	if n := ContainerName(a, "coder"); n != "agent-llm-"+a.ID+"-coder" {
		t.Errorf("instance name %q", n)
	}
	if n := ContainerName(Owner{}, "x"); n != "agent-llm-x" {
		t.Errorf("unowned name %q", n)
	}
	o := testOptions("none")
	o.Owner = a
	cfg, _ := Spec(o, ImageFacts{}, HostFacts{})
	if cfg.Labels[LabelOwner] != a.ID || cfg.Labels[LabelStateDir] != a.StateDir {
		t.Errorf("owner labels: %v", cfg.Labels)
	}
}
