package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/localagent/agent/images"
)

func TestImagesBuildArgs(t *testing.T) {
	tests := []struct {
		args   []string
		env    map[string]string
		names  []string
		mirror string
		force  bool
	}{
		{args: nil, names: []string{"sandbox"}},
		{args: []string{"llama-server", "--force"}, names: []string{"llama-server"}, force: true},
		{args: []string{"agent/busybox:latest"}, names: []string{"busybox"}},
		{args: []string{"all"}, names: []string{"busybox", "sandbox", "llama-server"}},
		{args: []string{"--mirror", "http://flag.example/debian"}, env: map[string]string{"AGENT_IMAGES_MIRROR": "http://env.example/debian"}, names: []string{"sandbox"}, mirror: "http://flag.example/debian"},
		{args: nil, env: map[string]string{"AGENT_IMAGES_MIRROR": "http://env.example/debian"}, names: []string{"sandbox"}, mirror: "http://env.example/debian"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			t.Setenv("AGENT_IMAGES_MIRROR", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			ios, _, _, _ := TestStreams()
			f := NewFactory(ios)
			var got *ImagesBuildOptions
			cmd := NewCmdImagesBuild(f, func(_ context.Context, o *ImagesBuildOptions) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			if strings.Join(got.Names, ",") != strings.Join(tt.names, ",") || got.Mirror != tt.mirror || got.Force != tt.force {
				t.Errorf("options %+v", got)
			}
		})
	}
}

// Usage mistakes exit with 2 and say what to do, without touching the
// engine.
func TestImagesUsageErrors(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	for _, args := range [][]string{
		{"images", "build", "nginx"},
		{"images", "build", "sandbox", "busybox"},
		{"images", "save"},
		{"images", "load"},
		{"images", "list", "extra"},
	} {
		ios, _, _, errOut := TestStreams()
		if code := Main(args, ios); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", args, code, ExitUsage, errOut)
		}
		if strings.Contains(errOut.String(), "goroutine") {
			t.Errorf("%v: stack trace in output", args)
		}
	}
	ios, _, _, errOut := TestStreams()
	Main([]string{"images", "build", "nginx"}, ios)
	if !strings.Contains(errOut.String(), "sandbox, llama-server, busybox") && !strings.Contains(errOut.String(), "busybox, sandbox, llama-server") {
		t.Errorf("unknown image error does not list the choices:\n%s", errOut)
	}
}

func TestImagesSaveGzipByName(t *testing.T) {
	for name, want := range map[string]bool{"b.tar": false, "b.tar.gz": true, "b.tgz": true} {
		ios, _, _, _ := TestStreams()
		var got *ImagesSaveOptions
		cmd := NewCmdImagesSave(NewFactory(ios), func(_ context.Context, o *ImagesSaveOptions) error { got = o; return nil })
		cmd.SetArgs([]string{"-o", name, "sandbox"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got.Gzip != want || got.Output != name || strings.Join(got.Refs, ",") != "sandbox" {
			t.Errorf("%s: %+v", name, got)
		}
	}
}

func TestImagesLoadNonBundle(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the Docker engine")
	}
	bad := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(bad, []byte("hello, not a bundle\n"), 0o644)
	ios, _, _, errOut := TestStreams()
	if code := Main([]string{"images", "load", "-i", bad}, ios); code != ExitError {
		t.Fatalf("exit %d, want %d", code, ExitError)
	}
	if !strings.Contains(errOut.String(), "not an image bundle or a docker save archive") {
		t.Errorf("stderr:\n%s", errOut)
	}
	ios, _, _, errOut = TestStreams()
	if code := Main([]string{"images", "load", "-i", filepath.Join(t.TempDir(), "missing.tar")}, ios); code != ExitError || !strings.Contains(errOut.String(), "no such file") {
		t.Errorf("missing file: exit %d, stderr:\n%s", code, errOut)
	}
}

func TestImagesListJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the Docker engine")
	}
	ios, _, out, errOut := TestStreams()
	if code := Main([]string{"images", "list", "--json"}, ios); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v struct {
		Images []images.Info `json:"images"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if len(v.Images) < 3 || v.Images[0].Ref != images.Busybox {
		t.Errorf("images %+v", v.Images)
	}
}

// Save and load through the commands, with a busybox image built under a
// test tag so the shared images are untouched.
func TestImagesSaveLoadCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the Docker engine")
	}
	ctx := context.Background()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := "cli-save-load-" + strings.ReplaceAll(filepath.Base(t.TempDir()), "_", "-")
	ref := "agent/busybox:test-" + id
	t.Cleanup(func() { _, _ = c.ImageRemove(context.Background(), ref, imageRemoveOpts()) })
	if _, err := images.Build(ctx, c, images.NameBusybox, images.BuildOptions{Ref: ref, Labels: map[string]string{images.LabelTest: id}}); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "bundle.tgz")
	ios, _, _, errOut := TestStreams()
	if code := Main([]string{"images", "save", "-o", bundle, ref}, ios); code != ExitOK {
		t.Fatalf("save: exit %d\n%s", code, errOut)
	}
	if b, _ := os.ReadFile(bundle); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Error("a .tgz bundle is not gzip-compressed")
	}
	if _, err := c.ImageRemove(ctx, ref, imageRemoveOpts()); err != nil {
		t.Fatal(err)
	}
	ios, _, out, errOut := TestStreams()
	if code := Main([]string{"images", "load", "-i", bundle, "--json"}, ios); code != ExitOK {
		t.Fatalf("load: exit %d\n%s", code, errOut)
	}
	if !bytes.Contains(out.Bytes(), []byte(ref)) || !strings.Contains(errOut.String(), "bundle verified") {
		t.Errorf("load output:\n%s\n%s", out, errOut)
	}
}

func imageRemoveOpts() image.RemoveOptions { return image.RemoveOptions{PruneChildren: true} }

func TestTTYProgress(t *testing.T) {
	ios, _, _, errOut := TestStreams()
	ios.ErrTTY = true
	p, stop := newProgress(ios)
	p(images.Event{Image: "sandbox", Step: "debootstrap", Message: "starting"})
	p(images.Event{Image: "sandbox", Step: "debootstrap", Message: "Installing core packages", Elapsed: 3 * time.Second})
	p(images.Event{Image: "sandbox", Step: "debootstrap", Message: "ready", Elapsed: 70 * time.Second, Done: true})
	stop()
	stop() // idempotent
	out := errOut.String()
	for _, want := range []string{"[sandbox] debootstrap: starting\n", "Installing core packages (3s)\n", "ready (1m10s)\n", clearLine} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%q", want, out)
		}
	}

	ios, _, _, errOut = TestStreams()
	p, stop = newProgress(ios)
	p(images.Event{Image: "busybox", Step: "import", Message: "importing"})
	stop()
	if got := errOut.String(); got != "[busybox] import: importing\n" {
		t.Errorf("plain progress = %q", got)
	}
}
