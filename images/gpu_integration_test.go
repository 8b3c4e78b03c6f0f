package images

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// The GPU builds of llama-server download hundreds of MB (CUDA: ~1 GB) and
// need a Debian mirror with contrib and non-free; set
// AGENT_TEST_GPU_IMAGES=cuda,vulkan (or 1 for both) to build them here, to
// unique tags. Each image must carry its backend library and label, run
// `llama-server --version`, and contain no GPU driver library (the NVIDIA
// runtime mounts the host's; a copy in the image would shadow it).
func TestBuildGPUImages(t *testing.T) {
	c := engineForTest(t)
	want := os.Getenv("AGENT_TEST_GPU_IMAGES")
	if want == "" {
		t.Skip("set AGENT_TEST_GPU_IMAGES=cuda,vulkan to build the GPU llama-server images (slow, ~1.5 GB of downloads, needs a Debian mirror)")
	}
	if os.Geteuid() != 0 {
		t.Skip("debootstrap needs root")
	}
	for _, tc := range []struct{ backend, lib string }{
		{BackendVulkan, "libggml-vulkan.so"},
		{BackendCUDA, "libggml-cuda.so"},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			if want != "1" && !slices.Contains(strings.Split(want, ","), tc.backend) {
				t.Skipf("not in AGENT_TEST_GPU_IMAGES=%s", want)
			}
			id := testID(t)
			ref := "agent/llama-server:test-" + tc.backend + "-" + id
			removeTestImages(t, c, id, ref)
			res, err := Build(context.Background(), c, NameLlamaServer, BuildOptions{
				Ref: ref, TempDir: t.TempDir(), Labels: map[string]string{LabelTest: id}, Backend: tc.backend,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: built in %s, %d MB, %s", tc.backend, res.Duration.Round(100e6), res.Size>>20, res.Verified)
			if !strings.Contains(res.Verified, "version:") {
				t.Errorf("llama-server --version said %q", res.Verified)
			}
			im, err := c.ImageInspect(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			if im.Config.Labels[LabelBackend] != tc.backend || im.Config.Labels[LabelImage] != NameLlamaServer {
				t.Errorf("labels %v", im.Config.Labels)
			}
			files := imageFiles(t, ref, id)
			var backendLib, driver []string
			for _, f := range files {
				base := path.Base(f)
				if base == tc.lib {
					backendLib = append(backendLib, f)
				}
				for _, p := range nvidiaDriverLibs {
					if ok, _ := path.Match(p, base); ok {
						driver = append(driver, f)
					}
				}
			}
			if len(backendLib) == 0 {
				t.Errorf("no %s in the image", tc.lib)
			}
			if len(driver) != 0 {
				t.Errorf("driver libraries inside the image: %v", driver)
			}
			t.Logf("%s: %s present; %d files, no driver library", tc.backend, strings.Join(backendLib, ", "), len(files))
		})
	}
}

// imageFiles lists every path in the image's file system (links too), read
// from an export of a created, never started container.
func imageFiles(t *testing.T, ref, id string) []string {
	t.Helper()
	c := engineForTest(t)
	ctx := context.Background()
	ct, err := c.ContainerCreate(ctx, &container.Config{Image: ref, Labels: map[string]string{LabelTest: id}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
	rc, err := c.ContainerExport(ctx, ct.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "/"+strings.TrimPrefix(h.Name, "./"))
	}
}

// The control for the driver check: a root holding libcuda is found, and
// the check fails when no package owns the file (so it cannot be purged).
func TestDriverLibsAreFound(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/lib/x86_64-linux-gnu/ggml/backends0", "usr/lib/x86_64-linux-gnu/nvidia/current"} {
		if err := os.MkdirAll(root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(root+"/usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-cuda.so", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	img := debianImage{suite: "sid", mustFind: []string{"libggml-cuda.so*"}, driverLibs: nvidiaDriverLibs}
	if _, err := img.checkLibs(context.Background(), root); err != nil {
		t.Fatalf("clean root: %v", err)
	}
	if err := os.Symlink("libcuda.so.550.1", root+"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1"); err != nil {
		t.Fatal(err)
	}
	_, err := img.checkLibs(context.Background(), root)
	if err == nil || !strings.Contains(err.Error(), "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1") {
		t.Fatalf("root with libcuda: %v", err)
	}
	img.mustFind = []string{"libggml-vulkan.so*"}
	img.driverLibs = nil
	if _, err := img.checkLibs(context.Background(), root); err == nil || !strings.Contains(err.Error(), "no file named libggml-vulkan.so*") {
		t.Fatalf("root without the backend: %v", err)
	}
}
