package compose

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func stack(gpu GPU) Stack {
	return Stack{
		Image:         "agent/llama-server:cpu",
		Command:       []string{"llama-server", "--host", "0.0.0.0", "--port", "8080", "--model", "/models/m $x.gguf", "--jinja"},
		ContainerPort: 8080,
		HostPort:      18080,
		ModelDir:      "/home/u/my models",
		ModelTarget:   "/models",
		User:          "1000:1000",
		GPU:           gpu,
		Labels:        map[string]string{"example.managed": "true", "example.kind": "llm"},
		PidsLimit:     4096,
	}
}

var gpuModes = map[string]GPU{
	"cpu":        {},
	"nvidia all": {NVIDIA: true},
	"nvidia ids": {NVIDIA: true, IDs: []string{"0", "1"}},
	"amd":        {Devices: []string{"/dev/kfd", "/dev/dri"}, GroupAdd: []string{"44"}},
}

func TestRenderValidates(t *testing.T) {
	for name, gpu := range gpuModes {
		t.Run(name, func(t *testing.T) {
			data, err := Render(stack(gpu))
			if err != nil {
				t.Fatal(err)
			}
			p, err := Validate(context.Background(), data)
			if err != nil {
				t.Fatalf("%v\n%s", err, data)
			}
			svc := p.Services[ServiceName]
			if len(svc.Ports) != 1 || svc.Ports[0].HostIP != "127.0.0.1" || svc.Ports[0].Published != "18080" || svc.Ports[0].Target != 8080 {
				t.Errorf("ports = %+v", svc.Ports)
			}
			if len(svc.Volumes) != 1 || svc.Volumes[0].Source != "/home/u/my models" || !svc.Volumes[0].ReadOnly || svc.Volumes[0].Target != "/models" {
				t.Errorf("volumes = %+v", svc.Volumes)
			}
			// "$" survives interpolation unchanged.
			if got := strings.Join(svc.Command, " "); !strings.Contains(got, "/models/m $x.gguf") {
				t.Errorf("command = %q", got)
			}
			if svc.Labels["example.kind"] != "llm" || svc.User != "1000:1000" || svc.Restart != "unless-stopped" {
				t.Errorf("service = %+v", svc)
			}
			if svc.HealthCheck == nil || svc.HealthCheck.Test[0] != "CMD" {
				t.Errorf("healthcheck = %+v", svc.HealthCheck)
			}
			var devs int
			if svc.Deploy != nil && svc.Deploy.Resources.Reservations != nil {
				devs = len(svc.Deploy.Resources.Reservations.Devices)
			}
			switch name {
			case "cpu", "amd":
				if devs != 0 {
					t.Errorf("gpu reservation on %s", name)
				}
			case "nvidia all":
				d := svc.Deploy.Resources.Reservations.Devices[0]
				if d.Driver != "nvidia" || d.Count != -1 || d.Capabilities[0] != "gpu" {
					t.Errorf("reservation = %+v", d)
				}
			case "nvidia ids":
				d := svc.Deploy.Resources.Reservations.Devices[0]
				if d.Driver != "nvidia" || strings.Join(d.IDs, ",") != "0,1" {
					t.Errorf("reservation = %+v", d)
				}
			}
			if name == "amd" && (len(svc.Devices) != 2 || svc.Devices[0].Source != "/dev/kfd" || svc.GroupAdd[0] != "44") {
				t.Errorf("amd devices = %+v groups %v", svc.Devices, svc.GroupAdd)
			}
		})
	}
}

// The reference implementation (docker-compose v1 here) must accept the
// file too, where it is installed.
func TestDockerComposeConfigAccepts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the external docker-compose tool (about a second per file)")
	}
	tool, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose is not installed")
	}
	for name, gpu := range gpuModes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := Render(stack(gpu))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "compose.yaml")
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(tool, "-f", file, "config", "-q").CombinedOutput()
			if err != nil {
				t.Errorf("docker-compose config rejects the file: %v\n%s\n%s", err, out, data)
			}
		})
	}
}

func TestValidateCatchesUnsafeFiles(t *testing.T) {
	good, _ := Render(stack(GPU{}))
	for name, edit := range map[string]func(string) string{
		"public port":    func(s string) string { return strings.Replace(s, `"127.0.0.1:18080:8080"`, `"18080:8080"`, 1) },
		"writable model": func(s string) string { return strings.Replace(s, "read_only: true\n", "read_only: false\n", 2) },
		"not yaml":       func(s string) string { return s + "\n  : : [" },
	} {
		if _, err := Validate(context.Background(), []byte(edit(string(good)))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Render(Stack{}); err == nil {
		t.Error("empty stack rendered")
	}
}
