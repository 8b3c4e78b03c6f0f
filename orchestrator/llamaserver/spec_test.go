package llamaserver

import (
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

func testOptions(gpus string) Options {
	g, err := ParseGPUs(gpus)
	if err != nil {
		panic(err)
	}
	return Options{Model: "/home/u/models/qwen.gguf", Image: "agent/llama-server:cpu", Port: 18080, Ctx: 16384, Parallel: 2, GPUs: g}
}

func TestParseGPUs(t *testing.T) {
	for in, want := range map[string]string{
		"all": "all", "ALL": "all", "nvidia": "all", "none": "none", "cpu": "none", "": "auto", "auto": "auto", "AUTO": "auto",
		"amd": "amd", "vulkan": "amd", "0": "0", "0,1": "0,1", " 1 , 3 ": "1,3",
		"GPU-3f2a5b6c-aaaa-bbbb-cccc-0123456789ab": "GPU-3f2a5b6c-aaaa-bbbb-cccc-0123456789ab",
	} {
		g, err := ParseGPUs(in)
		if err != nil || g.String() != want {
			t.Errorf("ParseGPUs(%q) = %v, %v; want %s", in, g, err, want)
		}
	}
	for _, bad := range []string{"0,,1", "foo", "0;rm -rf /", "GPU-", "GPU-xyz", "1,all"} {
		if _, err := ParseGPUs(bad); err == nil || !strings.Contains(err.Error(), "use auto, all, none, amd") {
			t.Errorf("ParseGPUs(%q) err = %v", bad, err)
		}
	}
}

func TestSpecCommon(t *testing.T) {
	for _, gpus := range []string{"none", "all", "0,1", "amd"} {
		o := testOptions(gpus)
		cfg, hc := Spec(o, ImageFacts{ID: "sha256:abc"}, HostFacts{UID: 1000, GID: 1000})
		// Only 127.0.0.1: the server has no authentication.
		pb := hc.PortBindings["8080/tcp"]
		if len(pb) != 1 || pb[0].HostIP != "127.0.0.1" || pb[0].HostPort != "18080" || len(hc.PortBindings) != 1 {
			t.Errorf("%s: port bindings = %v", gpus, hc.PortBindings)
		}
		if _, ok := cfg.ExposedPorts["8080/tcp"]; !ok {
			t.Errorf("%s: exposed = %v", gpus, cfg.ExposedPorts)
		}
		want := []mount.Mount{{Type: mount.TypeBind, Source: "/home/u/models", Target: "/models", ReadOnly: true}}
		if !slices.Equal(hc.Mounts, want) || len(hc.Binds) != 0 {
			t.Errorf("%s: mounts = %+v binds = %v", gpus, hc.Mounts, hc.Binds)
		}
		for k, v := range map[string]string{
			LabelManaged: "true", LabelKind: "llm", LabelModel: o.Model, LabelPort: "18080",
			LabelCtx: "16384", LabelParallel: "2", LabelGPUs: o.GPUs.String(),
		} {
			if cfg.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", gpus, k, cfg.Labels[k], v)
			}
		}
		if len(cfg.Labels[LabelSettings]) != 16 {
			t.Errorf("%s: settings hash = %q", gpus, cfg.Labels[LabelSettings])
		}
		if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Contains(hc.SecurityOpt, "no-new-privileges") ||
			!hc.ReadonlyRootfs || hc.Privileged || hc.Tmpfs["/tmp"] == "" || hc.Init == nil || !*hc.Init {
			t.Errorf("%s: hardening missing: %+v", gpus, hc)
		}
		if hc.RestartPolicy.Name != container.RestartPolicyUnlessStopped {
			t.Errorf("%s: restart policy = %v", gpus, hc.RestartPolicy)
		}
		if hc.NetworkMode.IsHost() || hc.PidMode.IsHost() || hc.IpcMode.IsHost() {
			t.Errorf("%s: host namespaces", gpus)
		}
		if cfg.User != "1000:1000" {
			t.Errorf("%s: user = %q", gpus, cfg.User)
		}
		args := strings.Join(cfg.Cmd, " ")
		for _, want := range []string{
			"llama-server --host 0.0.0.0 --port 8080 --model /models/qwen.gguf --ctx-size 16384 --parallel 2 --jinja --metrics",
		} {
			if !strings.HasPrefix(args, want) {
				t.Errorf("%s: cmd = %q", gpus, args)
			}
		}
	}
}

func TestSpecGPUModes(t *testing.T) {
	img := ImageFacts{ID: "x"}
	host := HostFacts{UID: 1000, GID: 1000}

	_, hc := Spec(testOptions("none"), img, host)
	if len(hc.DeviceRequests) != 0 || len(hc.Devices) != 0 {
		t.Errorf("none: devices %v %v", hc.DeviceRequests, hc.Devices)
	}

	_, hc = Spec(testOptions("all"), img, host)
	if len(hc.DeviceRequests) != 1 {
		t.Fatalf("all: %v", hc.DeviceRequests)
	}
	r := hc.DeviceRequests[0]
	if r.Driver != "nvidia" || r.Count != -1 || len(r.DeviceIDs) != 0 || len(r.Capabilities) != 1 || !slices.Equal(r.Capabilities[0], []string{"gpu"}) {
		t.Errorf("all: %+v", r)
	}

	_, hc = Spec(testOptions("0,1"), img, host)
	r = hc.DeviceRequests[0]
	if r.Driver != "nvidia" || r.Count != 0 || !slices.Equal(r.DeviceIDs, []string{"0", "1"}) || !slices.Equal(r.Capabilities[0], []string{"gpu"}) {
		t.Errorf("ids: %+v", r)
	}

	o := testOptions("all")
	o.CDI = true
	_, hc = Spec(o, img, host)
	if r := hc.DeviceRequests[0]; r.Driver != "cdi" || !slices.Equal(r.DeviceIDs, []string{"nvidia.com/gpu=all"}) {
		t.Errorf("cdi all: %+v", r)
	}
	o = testOptions("1")
	o.CDI = true
	_, hc = Spec(o, img, host)
	if r := hc.DeviceRequests[0]; r.Driver != "cdi" || !slices.Equal(r.DeviceIDs, []string{"nvidia.com/gpu=1"}) {
		t.Errorf("cdi ids: %+v", r)
	}

	_, hc = Spec(testOptions("amd"), img, HostFacts{UID: 1000, GID: 1000, AMDDevices: []string{"/dev/kfd", "/dev/dri"}, DeviceGIDs: []int{44, 109}})
	if len(hc.DeviceRequests) != 0 || len(hc.Devices) != 2 || hc.Devices[0].PathOnHost != "/dev/kfd" || hc.Devices[1].PathInContainer != "/dev/dri" {
		t.Errorf("amd: %+v %+v", hc.DeviceRequests, hc.Devices)
	}
	if !slices.Equal(hc.GroupAdd, []string{"44", "109"}) {
		t.Errorf("amd groups: %v", hc.GroupAdd)
	}
}

func TestSpecEntrypointAndOffload(t *testing.T) {
	cfg, _ := Spec(testOptions("all"), ImageFacts{HasEntrypoint: true}, HostFacts{})
	if cfg.Cmd[0] != "--host" {
		t.Errorf("image with entrypoint: cmd = %v", cfg.Cmd)
	}
	if !strings.Contains(strings.Join(cfg.Cmd, " "), "--n-gpu-layers 999") {
		t.Errorf("gpu: %v", cfg.Cmd)
	}
	cfg, _ = Spec(testOptions("none"), ImageFacts{}, HostFacts{})
	if !strings.Contains(strings.Join(cfg.Cmd, " "), "--n-gpu-layers 0") {
		t.Errorf("cpu: %v", cfg.Cmd)
	}
}

func TestSettingsHash(t *testing.T) {
	img, host := ImageFacts{ID: "a"}, HostFacts{UID: 1}
	base := SettingsHash(testOptions("none"), img, host)
	if base != SettingsHash(testOptions("none"), img, host) {
		t.Fatal("hash is not stable")
	}
	o := testOptions("none")
	o.StartTimeout = 5 // not a setting of the server
	if SettingsHash(o, img, host) != base {
		t.Error("start timeout changed the hash")
	}
	for name, change := range map[string]func(*Options, *ImageFacts){
		"ctx":      func(o *Options, _ *ImageFacts) { o.Ctx = 8192 },
		"parallel": func(o *Options, _ *ImageFacts) { o.Parallel = 4 },
		"port":     func(o *Options, _ *ImageFacts) { o.Port = 9 },
		"gpus":     func(o *Options, _ *ImageFacts) { o.GPUs, _ = ParseGPUs("all") },
		"model":    func(o *Options, _ *ImageFacts) { o.Model = "/m/other.gguf" },
		"extra":    func(o *Options, _ *ImageFacts) { o.ExtraArgs = []string{"--flash-attn"} },
		"image id": func(_ *Options, i *ImageFacts) { i.ID = "b" },
	} {
		o, i := testOptions("none"), img
		change(&o, &i)
		if SettingsHash(o, i, host) == base {
			t.Errorf("changing %s kept the hash", name)
		}
	}
}

func TestValidate(t *testing.T) {
	o := testOptions("none")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]func(*Options){
		"no model":     func(o *Options) { o.Model = "" },
		"port":         func(o *Options) { o.Port = 70000 },
		"parallel":     func(o *Options) { o.Parallel = 0 },
		"ctx":          func(o *Options) { o.Ctx = -1 },
		"reserved":     func(o *Options) { o.ExtraArgs = []string{"--port=9999"} },
		"reserved -c":  func(o *Options) { o.ExtraArgs = []string{"-c", "10"} },
		"instance":     func(o *Options) { o.Instance = "a/b" },
		"image absent": func(o *Options) { o.Image = "" },
	} {
		o := testOptions("none")
		bad(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDiagnose(t *testing.T) {
	for text, want := range map[string]string{
		`Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]]`:  "no GPU runtime",
		"nvidia-container-cli: device error: 7: unknown device: unknown":                                  "does not exist",
		"Bind for 127.0.0.1:8080 failed: port is already allocated":                                       "port",
		"llama_model_load: error loading model: failed to open /models/x.gguf: No such file or directory": "model could not be loaded",
		"ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 9000000000":         "out of memory",
		`exec: "llama-server": executable file not found in $PATH: unknown`:                               "no llama-server",
		"error: invalid argument: --frobnicate":                                                           "rejected an argument",
	} {
		c, ok := Diagnose(text)
		if !ok || !strings.Contains(c.Reason, want) {
			t.Errorf("Diagnose(%q) = %+v, %v; want %q", text, c, ok, want)
		}
	}
	if _, ok := Diagnose("all is fine"); ok {
		t.Error("matched an innocent text")
	}
	e := newStartError("llama-server exited with code 1 while loading the model", nil, "line one\nggml: failed to allocate buffer\n")
	msg := e.Error()
	for _, want := range []string{"exited with code 1", "likely cause: out of memory", "fix: use a smaller --ctx", "  | ggml: failed to allocate buffer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("StartError text lacks %q:\n%s", want, msg)
		}
	}
}

func TestStackMatchesSpec(t *testing.T) {
	for _, gpus := range []string{"none", "all", "0,1", "amd"} {
		o := testOptions(gpus)
		host := HostFacts{UID: 1000, GID: 1000, AMDDevices: []string{"/dev/dri"}, DeviceGIDs: []int{44}}
		cfg, _ := Spec(o, ImageFacts{}, host)
		s := Stack(o, ImageFacts{}, host)
		if !slices.Equal(s.Command, cfg.Cmd) || s.HostPort != 18080 || s.ModelDir != "/home/u/models" || s.User != "1000:1000" {
			t.Errorf("%s: stack = %+v", gpus, s)
		}
		if _, ok := s.Labels[LabelSettings]; ok || s.Labels[LabelKind] != KindLLM {
			t.Errorf("%s: labels = %v", gpus, s.Labels)
		}
		if s.GPU.NVIDIA != (gpus == "all" || gpus == "0,1") || (gpus == "0,1") != (len(s.GPU.IDs) == 2) {
			t.Errorf("%s: gpu = %+v", gpus, s.GPU)
		}
		if gpus == "amd" && (len(s.GPU.Devices) != 1 || s.GPU.GroupAdd[0] != "44") {
			t.Errorf("amd: gpu = %+v", s.GPU)
		}
		if s.StartPeriod != "300s" {
			t.Errorf("start period = %s", s.StartPeriod)
		}
	}
}

// A model reached through a symlink (model caches link names to blobs
// elsewhere) is mounted from where it really lives.
func TestSpecSymlinkedModel(t *testing.T) {
	o := testOptions("none")
	o.Model = "/home/u/models/qwen.gguf"
	o.ModelFile = "/home/u/.cache/blobs/sha256-abc"
	cfg, hc := Spec(o, ImageFacts{}, HostFacts{})
	if hc.Mounts[0].Source != "/home/u/.cache/blobs" || !strings.Contains(strings.Join(cfg.Cmd, " "), "--model /models/sha256-abc") {
		t.Errorf("mount %+v cmd %v", hc.Mounts, cfg.Cmd)
	}
	if cfg.Labels[LabelModel] != "/home/u/models/qwen.gguf" {
		t.Errorf("model label = %s", cfg.Labels[LabelModel])
	}
	if s := Stack(o, ImageFacts{}, HostFacts{}); s.ModelDir != "/home/u/.cache/blobs" {
		t.Errorf("compose model dir = %s", s.ModelDir)
	}
}
