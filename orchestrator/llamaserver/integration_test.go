package llamaserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/images"
	"github.com/localagent/agent/orchestrator/gguf"
	"github.com/localagent/agent/orchestrator/gguf/gguftest"
	"github.com/localagent/agent/policy"
)

// labelTest marks what one test created, so its cleanup removes exactly
// that (other people's tests share the engine).
const labelTest = policy.LabelTest

type itest struct {
	t    *testing.T
	cli  *client.Client
	id   string
	m    *Manager
	dir  string
	tiny string
}

func newITest(t *testing.T) *itest {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the Docker engine")
	}
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("the Docker engine is not reachable: %v", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	it := &itest{t: t, cli: c, id: "llm-" + hex.EncodeToString(b), dir: t.TempDir()}
	it.m = New(c, nil)
	it.tiny = filepath.Join(it.dir, "tiny.gguf")
	if err := gguftest.WriteLlama(it.tiny, gguftest.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range it.containers(ctx) {
			_ = c.ContainerRemove(ctx, s.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
		_ = c.Close()
	})
	return it
}

func (it *itest) containers(ctx context.Context) []container.Summary {
	list, err := it.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelTest+"="+it.id))})
	if err != nil {
		it.t.Fatalf("listing containers: %v", err)
	}
	return list
}

// options for one server of this test; the instance name is unique.
func (it *itest) options(image, gpus string) Options {
	g, err := ParseGPUs(gpus)
	if err != nil {
		it.t.Fatal(err)
	}
	return Options{
		Model: it.tiny, Image: image, Port: freePort(it.t), Ctx: 4096, Parallel: 2, GPUs: g,
		Instance: it.id, StartTimeout: 60 * time.Second, Labels: map[string]string{labelTest: it.id},
	}
}

func (it *itest) assertNothingLeft() {
	it.t.Helper()
	if left := it.containers(context.Background()); len(left) != 0 {
		it.t.Errorf("containers left behind: %v", left[0].Names)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func requireImage(t *testing.T, c *client.Client, ref, build string) {
	t.Helper()
	if _, err := c.ImageInspect(context.Background(), ref); err != nil {
		t.Fatalf("image %s is not present (%v): build it with `agent images build %s`", ref, err, build)
	}
}

// Bad input gets a clear error and leaves no container behind.
func TestUpBadInput(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.Busybox, "busybox")
	ctx := context.Background()

	text := filepath.Join(it.dir, "notes.gguf")
	if err := os.WriteFile(text, []byte("not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	cases := []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{"missing model", func(o *Options) { o.Model = filepath.Join(it.dir, "nope.gguf") }, []string{"does not exist", "--model"}},
		{"text file named .gguf", func(o *Options) { o.Model = text }, []string{"not a GGUF model file", "notes.gguf"}},
		{"port in use", func(o *Options) { o.Port = busy.Addr().(*net.TCPAddr).Port }, []string{"already in use", "--port"}},
		{"unknown GPU id", func(o *Options) { o.GPUs, _ = ParseGPUs("7") }, []string{"GPU 7 not found"}},
		{"no GPU runtime", func(o *Options) { o.GPUs, _ = ParseGPUs("all") }, []string{"no GPU runtime", "--gpus none"}},
		{"image missing", func(o *Options) { o.Image = "agent/no-such-image:" + it.id }, []string{"is not present", "agent images build llama-server"}},
		{"image without llama-server", func(o *Options) {}, []string{"the image has no llama-server"}},
		{"reserved extra arg", func(o *Options) { o.ExtraArgs = []string{"--port", "1"} }, []string{"set by agent itself"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := it.options(images.Busybox, "none")
			tc.edit(&o)
			_, err := it.m.Up(ctx, o)
			if err == nil {
				t.Fatal("Up succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			it.assertNothingLeft()
		})
	}
	s, err := it.m.Status(ctx, it.id)
	if err != nil || s.State != StateAbsent {
		t.Errorf("status after failures: %+v, %v", s, err)
	}
	if existed, err := it.m.Down(ctx, it.id); existed || err != nil {
		t.Errorf("down of nothing: %v, %v", existed, err)
	}
}

// A server that exits while loading is reported with its log and a cause,
// and removed.
func TestUpServerExitsWhileLoading(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	// A well-formed GGUF file that is no usable model (no hyperparameters,
	// no tensors): the header check passes, llama-server fails to load it.
	broken := filepath.Join(it.dir, "broken.gguf")
	f, err := os.Create(broken)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Write(f, []gguf.KV{{Key: "general.architecture", Value: "llama"}}, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	o := it.options(images.LlamaServer, "none")
	o.Model = broken
	_, err = it.m.Up(context.Background(), o)
	if err == nil {
		t.Fatal("Up of a broken model succeeded")
	}
	msg := err.Error()
	for _, w := range []string{"exited with code", "likely cause: the model could not be loaded", "last lines of the server's log"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	it.assertNothingLeft()
}

// Ctrl-C while the model loads: Up returns the cancellation and removes
// the container it started.
func TestUpInterruptedWhileLoading(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := New(it.cli, event.SinkFunc(func(e event.Event) {
		if strings.HasPrefix(e.Text, "starting ") {
			cancel()
		}
	}))
	_, err := m.Up(ctx, it.options(images.LlamaServer, "none"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Up after cancel: %v", err)
	}
	it.assertNothingLeft()
}

// Up with the same settings reuses the server; status reports it; Down
// removes it.
func TestUpReuseStatusDown(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	ctx := context.Background()
	// Through a symlink from another directory, as model caches do.
	links := filepath.Join(it.dir, "links")
	if err := os.Mkdir(links, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(it.tiny, filepath.Join(links, "model.gguf")); err != nil {
		t.Fatal(err)
	}
	o := it.options(images.LlamaServer, "none")
	o.Model = filepath.Join(links, "model.gguf")
	o.Ctx, o.Parallel = 8192, 1
	first, err := it.m.Up(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if first.Reused || first.State != StateReady || first.TotalSlots != 1 || first.SlotCtx != 8192 || len(first.Warnings) != 0 || first.Model != o.Model {
		t.Errorf("first up: %+v", first)
	}
	second, err := it.m.Up(ctx, o)
	if err != nil || !second.Reused || second.ID != first.ID {
		t.Fatalf("second up: %+v, %v", second, err)
	}
	var out, errOut strings.Builder
	if err := it.m.Logs(ctx, it.id, LogsOptions{Tail: "20"}, &out, &errOut); err != nil || !strings.Contains(out.String()+errOut.String(), "srv") {
		t.Errorf("logs: %v\n%s%s", err, out.String(), errOut.String())
	}
	if existed, err := it.m.Down(ctx, it.id); !existed || err != nil {
		t.Fatalf("down: %v, %v", existed, err)
	}
	it.assertNothingLeft()
}

// A server that does not become ready in time is removed, and the error
// says which setting to raise.
func TestUpStartTimeout(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	o := it.options(images.LlamaServer, "none")
	o.StartTimeout = time.Millisecond
	_, err := it.m.Up(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "did not become ready within 1ms") || !strings.Contains(err.Error(), "llm.start_timeout") {
		t.Fatalf("Up with a 1 ms timeout: %v", err)
	}
	it.assertNothingLeft()
}

// Two state directories on one engine each run their own server side by
// side; llm down of one leaves the other; a third cannot take the port of
// either without --force; the address comes from the published port.
func TestServersOfTwoStateDirectories(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	ctx := context.Background()
	manager := func(dir string) *Manager {
		m := New(it.cli, nil)
		m.Owner = OwnerOf(filepath.Join(it.dir, dir))
		return m
	}
	a, b := manager("a"), manager("b")
	oa, ob := it.options(images.LlamaServer, "none"), it.options(images.LlamaServer, "none")
	oa.Instance, ob.Instance = "", ""
	ra, err := a.Up(ctx, oa)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Up(ctx, ob)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Name == rb.Name || ra.ID == rb.ID || ra.Owner != a.Owner.ID || rb.StateDir != b.Owner.StateDir {
		t.Fatalf("servers not apart: %+v / %+v", ra.Status, rb.Status)
	}
	for m, port := range map[*Manager]int{a: oa.Port, b: ob.Port} {
		if u, err := m.Address(ctx, ""); err != nil || u != URL(port) {
			t.Errorf("address of %s: %q, %v; want %s", m.Name(""), u, err, URL(port))
		}
	}

	// A third state directory asking for b's port is refused, and b's
	// server is untouched; with --force it replaces it.
	c := manager("c")
	oc := it.options(images.LlamaServer, "none")
	oc.Instance, oc.Port = "", ob.Port
	if _, err := c.Up(ctx, oc); err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), b.Owner.StateDir) {
		t.Fatalf("up on another state directory's port: %v", err)
	}
	if s, err := b.Status(ctx, ""); err != nil || s.State != StateReady || s.ID != rb.ID {
		t.Fatalf("b after the refused up: %+v, %v", s, err)
	}

	// Down in a leaves b serving.
	if existed, err := a.Down(ctx, ""); !existed || err != nil {
		t.Fatalf("down a: %v, %v", existed, err)
	}
	if s, _ := a.Status(ctx, ""); s.State != StateAbsent {
		t.Errorf("a after down: %s", s.State)
	}
	if s, err := b.Status(ctx, ""); err != nil || s.State != StateReady || s.ID != rb.ID {
		t.Fatalf("b after a's down: %+v, %v", s, err)
	}
	if _, err := a.Address(ctx, ""); !errors.Is(err, ErrNotRunning) {
		t.Errorf("address of a removed server: %v", err)
	}

	oc.Force = true
	rc, err := c.Up(ctx, oc)
	if err != nil {
		t.Fatalf("forced up: %v", err)
	}
	if s, _ := b.Status(ctx, ""); s.State != StateAbsent {
		t.Errorf("b after c's forced up: %s", s.State)
	}
	if rc.Port != ob.Port || rc.Owner != c.Owner.ID {
		t.Errorf("c: %+v", rc.Status)
	}
}

// The Vulkan build offloads the model to a Vulkan device; on a machine
// without a GPU that is lavapipe (Mesa's Vulkan on the CPU), which
// exercises the same backend and the same log lines. Status reads them.
func TestVulkanImageOffloadsOnLavapipe(t *testing.T) {
	it := newITest(t)
	ref := images.LlamaServerRef(images.BackendVulkan)
	if _, err := it.cli.ImageInspect(context.Background(), ref); err != nil {
		t.Skipf("%s is not present (`agent images build llama-server --backend vulkan`)", ref)
	}
	o := it.options(ref, "none")
	// lavapipe is a CPU-type device, which ggml only lists when asked.
	o.Env = []string{"GGML_VK_VISIBLE_DEVICES=0"}
	o.ExtraArgs = []string{"--n-gpu-layers", "999"}
	res, err := it.m.Up(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	off := res.Offload
	if res.Backend != images.BackendVulkan || off == nil || !off.Known || off.Layers == 0 || off.Layers != off.TotalLayers ||
		len(off.Devices) != 1 || !strings.HasPrefix(off.Devices[0], "Vulkan0 (llvmpipe") || off.VRAMMiB <= 0 {
		t.Fatalf("status of the Vulkan server: backend %q offload %+v", res.Backend, off)
	}
	t.Logf("vulkan: %s, %d/%d layers, %.2f MiB", strings.Join(off.Devices, "; "), off.Layers, off.TotalLayers, off.VRAMMiB)
}
