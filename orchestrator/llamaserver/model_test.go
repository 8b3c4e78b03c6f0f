package llamaserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/system"

	"github.com/localagent/agent/orchestrator/gguf/gguftest"
)

func TestCheckModel(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := gguftest.WriteLlama(model, gguftest.Options{ContextLength: 16384}); err != nil {
		t.Fatal(err)
	}
	mc, err := CheckModel(model, 16384, 2)
	if err != nil || len(mc.Warnings) != 0 || mc.Header.Architecture != "llama" {
		t.Fatalf("good model: %+v, %v", mc, err)
	}
	mc, err = CheckModel(model, 32768, 8)
	if err != nil || len(mc.Warnings) != 2 {
		t.Fatalf("want two warnings, got %+v, %v", mc, err)
	}
	if !strings.Contains(mc.Warnings[0], "exceeds the context the model was trained with (16384)") ||
		!strings.Contains(mc.Warnings[1], "each of the 8 slots gets 4096 tokens") {
		t.Errorf("warnings = %q", mc.Warnings)
	}

	text := filepath.Join(dir, "notes.gguf")
	_ = os.WriteFile(text, []byte("hello\n"), 0o644)
	data, _ := os.ReadFile(model)
	trunc := filepath.Join(dir, "trunc.gguf")
	_ = os.WriteFile(trunc, data[:1000], 0o644)
	cut := filepath.Join(dir, "cut.gguf")
	_ = os.WriteFile(cut, data[:len(data)-100], 0o644)
	for path, want := range map[string]string{
		filepath.Join(dir, "missing.gguf"): "does not exist",
		text:                               "not a GGUF model file",
		trunc:                              "probably incomplete",
		cut:                                "past the end of the file",
		dir:                                "is a directory",
	} {
		if _, err := CheckModel(path, 8192, 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckModel(%s) = %v, want %q", filepath.Base(path), err, want)
		}
	}
}

type localHost struct{ engine }

func (localHost) DaemonHost() string { return "unix:///var/run/docker.sock" }

func TestHostFactsDevices(t *testing.T) {
	dev := t.TempDir()
	m := &Manager{eng: localHost{}, hostDevDir: dev}
	model := filepath.Join(t.TempDir(), "m.gguf")

	o := testOptions("3")
	o.Model = model
	if _, err := m.hostFacts(o); err == nil || !strings.Contains(err.Error(), "no NVIDIA GPU") {
		t.Errorf("no gpus: err = %v", err)
	}
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		_ = os.WriteFile(filepath.Join(dev, n), nil, 0o644)
	}
	if _, err := m.hostFacts(o); err == nil || !strings.Contains(err.Error(), "has NVIDIA GPUs 0,1") {
		t.Errorf("gpu 3 of 0,1: err = %v", err)
	}
	o = testOptions("1,0")
	if _, err := m.hostFacts(o); err != nil {
		t.Errorf("gpus 1,0: %v", err)
	}
	o = testOptions("GPU-0123abcd")
	if _, err := m.hostFacts(o); err != nil {
		t.Errorf("uuid: %v", err)
	}

	o = testOptions("amd")
	if _, err := m.hostFacts(o); err == nil || !strings.Contains(err.Error(), "no ") {
		t.Errorf("amd without nodes: err = %v", err)
	}
	_ = os.Mkdir(filepath.Join(dev, "dri"), 0o755)
	h, err := m.hostFacts(o)
	if err != nil || len(h.AMDDevices) != 1 || h.AMDDevices[0] != "/dev/dri" {
		t.Errorf("amd with /dev/dri: %+v, %v", h, err)
	}
}

type cdiEngine struct {
	localHost
	api  string
	dirs []string
}

func (e cdiEngine) ClientVersion() string { return e.api }
func (e cdiEngine) Info(context.Context) (system.Info, error) {
	return system.Info{CDISpecDirs: e.dirs}, nil
}

func TestCDIAvailable(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		api   string
		dirs  []string
		files []string
		want  bool
	}{
		{"1.41", []string{"D"}, []string{"nvidia.yaml"}, false}, // engine too old
		{"1.44", nil, nil, false},                               // CDI off
		{"1.44", []string{"D"}, []string{"amd.yaml"}, false},    // no NVIDIA spec
		{"1.45", []string{"D"}, []string{"nvidia.yaml"}, true},
	} {
		dir := t.TempDir()
		if tc.dirs != nil {
			tc.dirs = []string{dir}
		}
		for _, f := range tc.files {
			_ = os.WriteFile(filepath.Join(dir, f), nil, 0o644)
		}
		m := &Manager{eng: cdiEngine{api: tc.api, dirs: tc.dirs}}
		if got := m.CDIAvailable(ctx); got != tc.want {
			t.Errorf("api %s dirs %v files %v: %v", tc.api, tc.dirs, tc.files, got)
		}
	}
}

func TestRootRunAs(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create files owned by others")
	}
	base := t.TempDir()
	mk := func(name string, dirMode, fileMode os.FileMode, uid int) string {
		d := filepath.Join(base, name)
		_ = os.Mkdir(d, dirMode)
		_ = os.Chmod(d, dirMode)
		f := filepath.Join(d, "m.gguf")
		_ = os.WriteFile(f, nil, fileMode)
		_ = os.Chmod(f, fileMode)
		_ = os.Lchown(d, uid, uid)
		_ = os.Lchown(f, uid, uid)
		return f
	}
	for _, tc := range []struct {
		name      string
		dir, file os.FileMode
		owner     int
		want      int
	}{
		{"user's model", 0o700, 0o600, 1234, 1234},
		{"root's public model", 0o755, 0o644, 0, 65534},
		{"root's private dir", 0o700, 0o644, 0, 0},
		{"root's private file", 0o755, 0o600, 0, 0},
	} {
		if uid, gid := rootRunAs(mk(tc.name, tc.dir, tc.file, tc.owner)); uid != tc.want || gid != tc.want {
			t.Errorf("%s: runs as %d:%d, want %d", tc.name, uid, gid, tc.want)
		}
	}
}

func TestMemoryWarning(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "meminfo")
	_ = os.WriteFile(mi, []byte("MemTotal:       24000000 kB\nMemAvailable:    1048576 kB\n"), 0o644)
	if w := memoryWarning(2<<30, mi); !strings.Contains(w, "2.0 GiB) is larger than the memory available now (1.0 GiB)") {
		t.Errorf("big model: %q", w)
	}
	if w := memoryWarning(512<<20, mi); w != "" {
		t.Errorf("small model: %q", w)
	}
	if w := memoryWarning(2<<30, filepath.Join(t.TempDir(), "none")); w != "" {
		t.Errorf("no meminfo: %q", w)
	}
}
