package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/gguf/gguftest"
	"github.com/localagent/agent/orchestrator/llamaserver"
)

func TestGPUVerdict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       gpuFacts
		verdict string
		want    string
	}{
		{"cpu", gpuFacts{mode: llamaserver.GPUNone}, VerdictOK, "runs on the CPU"},
		{"no nvidia devices", gpuFacts{mode: llamaserver.GPUNvidia, runtimes: []string{"runc"}}, VerdictWarn, "shows none"},
		{"devices without runtime", gpuFacts{mode: llamaserver.GPUNvidia, nvidiaNodes: []string{"/dev/nvidia0"}, runtimes: []string{"runc"}}, VerdictFail, "cannot pass them"},
		{"nvidia runtime", gpuFacts{mode: llamaserver.GPUNvidia, nvidiaNodes: []string{"/dev/nvidia0"}, runtimes: []string{"nvidia", "runc"}}, VerdictOK, "via nvidia runtime"},
		{"toolkit hook", gpuFacts{mode: llamaserver.GPUNvidia, nvidiaNodes: []string{"/dev/nvidia0"}, hook: true}, VerdictOK, "container toolkit"},
		{"cdi", gpuFacts{mode: llamaserver.GPUNvidia, nvidiaNodes: []string{"/dev/nvidia0"}, cdiSpecs: []string{"/etc/cdi/nvidia.yaml"}}, VerdictOK, "CDI /etc/cdi/nvidia.yaml"},
		{"amd without nodes", gpuFacts{mode: llamaserver.GPUAMD}, VerdictWarn, "no /dev/kfd"},
		{"amd", gpuFacts{mode: llamaserver.GPUAMD, amdNodes: []string{"/dev/kfd", "/dev/dri"}}, VerdictOK, "/dev/kfd, /dev/dri"},
		{"nvidia asked, amd present", gpuFacts{mode: llamaserver.GPUNvidia, amdNodes: []string{"/dev/dri"}}, VerdictWarn, ""},
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

func TestDoctorHostChecks(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "dev")
	_ = os.MkdirAll(filepath.Join(dev, "dri"), 0o755)
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"} {
		_ = os.WriteFile(filepath.Join(dev, n), nil, 0o644)
	}
	model := filepath.Join(dir, "m.gguf")
	if err := gguftest.WriteLlama(model, gguftest.Options{ContextLength: 8192}); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "t.gguf")
	_ = os.WriteFile(text, []byte("text"), 0o644)

	check := func(d *doctor, name string) Check {
		for _, c := range d.checks {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no %s check in %+v", name, d.checks)
		return Check{}
	}
	cfg := &Config{StateDir: filepath.Join(dir, "state", "agent"), LLM: LLMConfig{GPUs: "all", Model: model, Ctx: 16384, Parallel: 2}}
	d := &doctor{cfg: cfg, devDir: dev}
	d.gpu()
	// fail here (no toolkit); ok where nvidia-ctk happens to be installed.
	if c := check(d, "gpu"); c.Verdict == VerdictWarn || !strings.Contains(c.Detail, "/dev/nvidia0, /dev/nvidia1") || strings.Contains(c.Detail, "nvidiactl") {
		t.Errorf("gpu: %+v", c)
	}
	d.model()
	if c := check(d, "model"); c.Verdict != VerdictWarn || !strings.Contains(c.Detail, "trained context 8192") || !strings.Contains(c.Detail, "exceeds") {
		t.Errorf("model: %+v", c)
	}
	d.disk()
	if c := check(d, "disk space"); c.Verdict == VerdictFail && !strings.Contains(c.Detail, "free in") {
		t.Errorf("disk: %+v", c)
	}
	d.git(t.Context())
	if c := check(d, "git"); c.Verdict != VerdictOK || !strings.HasPrefix(c.Detail, "git version") {
		t.Errorf("git: %+v", c)
	}

	cfg.LLM.Model = text
	d = &doctor{cfg: cfg, devDir: dev}
	d.model()
	if c := check(d, "model"); c.Verdict != VerdictFail || !strings.Contains(c.Detail, "not a GGUF") {
		t.Errorf("text model: %+v", c)
	}
}

// Against the real engine: one JSON object, the engine checks pass here,
// and the exit code follows the verdicts.
func TestDoctorJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the Docker engine")
	}
	llmIsolate(t)
	t.Setenv("AGENT_LLM_GPUS", "none")
	t.Setenv("AGENT_LLM_URL", "")
	ios, _, out, errOut := TestStreams()
	code := Main([]string{"doctor", "--json"}, ios)
	var rep DoctorReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("doctor --json (exit %d): %v\n%s\n%s", code, err, out, errOut)
	}
	names := map[string]Check{}
	for _, c := range rep.Checks {
		names[c.Name] = c
		if c.Verdict != VerdictOK && c.Verdict != VerdictWarn && c.Verdict != VerdictFail {
			t.Errorf("check %s: verdict %q", c.Name, c.Verdict)
		}
		if c.Verdict != VerdictOK && c.Fix == "" {
			t.Errorf("check %s has no fix: %+v", c.Name, c)
		}
	}
	for _, n := range []string{"engine", "api version", "seccomp", "cgroups", "image agent/sandbox:latest", "image agent/llama-server:cpu", "disk space", "git", "toolbox", "gpu", "model", "llm server"} {
		if _, ok := names[n]; !ok {
			t.Errorf("no %q check", n)
		}
	}
	for _, n := range []string{"engine", "api version", "seccomp", "gpu"} {
		if names[n].Verdict != VerdictOK {
			t.Errorf("%s: %+v", n, names[n])
		}
	}
	if (code == 0) != rep.OK {
		t.Errorf("exit %d but ok = %v", code, rep.OK)
	}
	// Human output says the same.
	ios, _, out, _ = TestStreams()
	Main([]string{"doctor"}, ios)
	if !strings.Contains(out.String(), "ok    engine") {
		t.Errorf("human output:\n%s", out)
	}
}

func TestMissingRunscArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--network=none --host-uds=open"},
		{[]string{"--network=none"}, "--host-uds=open"},
		{[]string{"-network=none", "--host-uds=all"}, ""},
		{[]string{"--network=none", "--fsgofer-host-uds"}, ""},
		{[]string{"--network=host", "--host-uds=open"}, "--network=none"},
	} {
		if got := strings.Join(missingRunscArgs(c.args), " "); got != c.want {
			t.Errorf("%q: missing %q, want %q", c.args, got, c.want)
		}
	}
}
