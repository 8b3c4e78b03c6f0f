package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// engineForTest returns a client for the local engine, skipping under
// -short (integration tier) and failing when the engine is unreachable.
func engineForTest(t *testing.T) *client.Client {
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
		t.Fatalf("the Docker engine is unreachable: %v", err)
	}
	c.NegotiateAPIVersion(ctx)
	t.Cleanup(func() { c.Close() })
	return c
}

// testID is a value unique to one test for LabelTest and test tags.
func testID(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	return name + "-" + hex.EncodeToString(b[:])
}

// removeTestImages deletes exactly the images and containers carrying this
// test's label, plus the given tags.
func removeTestImages(t *testing.T, c *client.Client, id string, refs ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		f := filters.NewArgs(filters.Arg("label", LabelTest+"="+id))
		cs, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		for _, ct := range cs {
			_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
		}
		for _, r := range refs {
			_, _ = c.ImageRemove(ctx, r, image.RemoveOptions{PruneChildren: true})
		}
		ims, _ := c.ImageList(ctx, image.ListOptions{Filters: f})
		for _, im := range ims {
			_, _ = c.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
}

type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *eventLog) add(e Event) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

func (l *eventLog) steps() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []string
	for _, e := range l.events {
		if e.Done {
			s = append(s, e.Step)
		}
	}
	return strings.Join(s, ",")
}

func TestBuildBusyboxAndRun(t *testing.T) {
	c := engineForTest(t)
	ctx := context.Background()
	id := testID(t)
	ref := "agent/busybox:test-" + id
	removeTestImages(t, c, id, ref)

	var log eventLog
	start := time.Now()
	res, err := Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Labels: map[string]string{LabelTest: id}, Progress: log.add, AgentVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("busybox build: %s, %d bytes, steps %s", took, res.Size, log.steps())
	if took > 10*time.Second {
		t.Errorf("busybox build took %s; it should take about a second", took)
	}
	if res.Skipped || res.ID == "" || !strings.HasPrefix(res.Verified, "ok from BusyBox") {
		t.Errorf("result %+v", res)
	}
	if got := log.steps(); got != "rootfs,import,verify,tag" {
		t.Errorf("progress steps = %s", got)
	}

	im, err := c.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if im.Config.Labels[LabelImage] != NameBusybox || !strings.Contains(im.Config.Labels[LabelBuild], "busybox-static") || im.Config.Labels[LabelTest] != id {
		t.Errorf("labels %v", im.Config.Labels)
	}
	// No temporary build tag is left behind.
	for _, tag := range im.RepoTags {
		if strings.Contains(tag, ":build-") {
			t.Errorf("temporary tag left: %s", tag)
		}
	}

	// Run a container from it as the sandbox would: unprivileged, no
	// network, read-only root.
	out := runInImage(t, c, ref, id, "sh", "-c", "id -u; ls -ld /tmp /workspace | cut -c1-10; grep -c root /etc/passwd; env | grep ^PATH=")
	for _, want := range []string{"65534", "drwxrwxrwt", "drwxr-xr-x", "PATH=/bin"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}

	// A second build is a no-op; --force rebuilds.
	again, err := Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Labels: map[string]string{LabelTest: id}})
	if err != nil || !again.Skipped || again.ID != res.ID {
		t.Errorf("second build: %+v, %v; want skipped with the same ID", again, err)
	}
	// Another version in the build label makes the rebuilt image differ
	// even within the same second (the label's time has second resolution).
	forced, err := Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Force: true, AgentVersion: "rebuild", Labels: map[string]string{LabelTest: id}})
	if err != nil || forced.Skipped || forced.ID == res.ID {
		t.Errorf("forced build: %+v, %v; want a new image", forced, err)
	}
	// The replaced image is gone, not left dangling.
	if _, err := c.ImageInspect(ctx, res.ID); !cerrdefs.IsNotFound(err) {
		t.Errorf("the replaced image %s is still present (%v)", res.ID, err)
	}
}

func runInImage(t *testing.T, c *client.Client, ref, id string, cmd ...string) string {
	t.Helper()
	out, err := runOnce(context.Background(), c, ref, append([]string{}, cmd...), map[string]string{LabelTest: id})
	if err != nil {
		t.Fatalf("running %v in %s: %v", cmd, ref, err)
	}
	return out
}

func TestBuildCancelledLeavesNothing(t *testing.T) {
	c := engineForTest(t)
	id := testID(t)
	ref := "agent/busybox:test-" + id
	removeTestImages(t, c, id, ref)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Labels: map[string]string{LabelTest: id}}); err == nil {
		t.Fatal("a cancelled build succeeded")
	}
	if ok, _ := Exists(context.Background(), c, ref); ok {
		t.Error("a cancelled build left the image")
	}
	ims, _ := c.ImageList(context.Background(), image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelTest+"="+id))})
	if len(ims) != 0 {
		t.Errorf("a cancelled build left %d image(s)", len(ims))
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	c := engineForTest(t)
	ctx := context.Background()
	id := testID(t)
	ref := "agent/busybox:test-" + id
	removeTestImages(t, c, id, ref)
	res, err := Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Labels: map[string]string{LabelTest: id}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	removeImage := func() {
		t.Helper()
		if _, err := c.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil {
			t.Fatal(err)
		}
		if ok, _ := Exists(ctx, c, ref); ok {
			t.Fatal("image still present after removal")
		}
	}

	for _, gz := range []bool{false, true} {
		var buf bytes.Buffer
		start := time.Now()
		m, err := Save(ctx, c, &buf, []string{ref}, SaveOptions{Gzip: gz, AgentVersion: "test", TempDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("save gzip=%v: %d bytes in %s", gz, buf.Len(), time.Since(start))
		if len(m.Images) != 1 || m.Images[0].ID != res.ID || m.Archive.SHA256 == "" || m.AgentVersion != "test" {
			t.Errorf("manifest %+v", m)
		}
		bundle := buf.Bytes()
		removeImage()
		start = time.Now()
		lr, err := Load(ctx, c, bytes.NewReader(bundle), LoadOptions{TempDir: dir})
		if err != nil {
			t.Fatalf("gzip=%v: %v", gz, err)
		}
		t.Logf("load gzip=%v: %s", gz, time.Since(start))
		if !lr.Bundle || len(lr.Images) != 1 || lr.Images[0] != ref {
			t.Errorf("load result %+v", lr)
		}
		im, err := c.ImageInspect(ctx, ref)
		if err != nil || im.ID != res.ID {
			t.Fatalf("after load: %v, ID %s want %s", err, im.ID, res.ID)
		}
	}
	runInImage(t, c, ref, id, "true")

	// A plain `docker save` archive (how vendor GPU images travel) loads too.
	rc, err := c.ImageSave(ctx, []string{ref})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	removeImage()
	lr, err := Load(ctx, c, bytes.NewReader(plain), LoadOptions{TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if lr.Bundle || len(lr.Images) != 1 || lr.Images[0] != ref {
		t.Errorf("plain load result %+v", lr)
	}

	// Nothing is left in the temporary directory.
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestSaveMissingImage(t *testing.T) {
	c := engineForTest(t)
	_, err := Save(context.Background(), c, io.Discard, []string{"agent/busybox:no-such-" + testID(t)}, SaveOptions{TempDir: t.TempDir()})
	var me *MissingError
	if err == nil || !strings.Contains(err.Error(), "not present") || !errorsAs(err, &me) {
		t.Fatalf("Save of a missing image = %v, want a MissingError", err)
	}
}

func TestListReportsMissing(t *testing.T) {
	c := engineForTest(t)
	list, err := List(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < len(Definitions()) {
		t.Fatalf("List returned %d entries", len(list))
	}
	for i, d := range Definitions() {
		if list[i].Name != d.Name || list[i].Ref != d.Ref {
			t.Errorf("entry %d = %+v, want %s", i, list[i], d.Ref)
		}
		ok, _ := Exists(context.Background(), c, d.Ref)
		if list[i].Present != ok {
			t.Errorf("%s: Present=%v, engine says %v", d.Ref, list[i].Present, ok)
		}
	}
}

// The Debian builds download ~100 MB and take a minute or more each; CI
// runs them through `agent images build all`. Set AGENT_TEST_BUILD_IMAGES=1
// to run them here (to unique tags; the shared images are not touched).
func TestBuildDebianImages(t *testing.T) {
	c := engineForTest(t)
	if os.Getenv("AGENT_TEST_BUILD_IMAGES") != "1" {
		t.Skip("set AGENT_TEST_BUILD_IMAGES=1 to build the Debian images (slow, needs a Debian mirror)")
	}
	if os.Geteuid() != 0 {
		t.Skip("debootstrap needs root")
	}
	for _, tc := range []struct{ name, check string }{
		{NameSandbox, "git version"},
		{NameLlamaServer, "version:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := testID(t)
			def, _ := Lookup(tc.name)
			ref := strings.Split(def.Ref, ":")[0] + ":test-" + id
			removeTestImages(t, c, id, ref)
			tmp := t.TempDir()
			var log eventLog
			res, err := Build(context.Background(), c, tc.name, BuildOptions{Ref: ref, TempDir: tmp, Labels: map[string]string{LabelTest: id}, Progress: log.add})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: built in %s, %d bytes, %s", tc.name, res.Duration, res.Size, res.Verified)
			if !strings.Contains(res.Verified, tc.check) {
				t.Errorf("verification output %q lacks %q", res.Verified, tc.check)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 0 {
				t.Errorf("build left %v", left)
			}
		})
	}
}

func errorsAs(err error, target **MissingError) bool { return errors.As(err, target) }

// A build whose image fails its check must leave the working image under
// the tag untouched and no temporary tag behind.
func TestFailedBuildKeepsWorkingImage(t *testing.T) {
	c := engineForTest(t)
	ctx := context.Background()
	id := testID(t)
	ref := "agent/busybox:test-" + id
	removeTestImages(t, c, id, ref)
	good, err := Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Labels: map[string]string{LabelTest: id}})
	if err != nil {
		t.Fatal(err)
	}

	orig := recipes[NameBusybox]
	t.Cleanup(func() { recipes[NameBusybox] = orig })
	recipes[NameBusybox] = func() recipe {
		r := orig()
		r.verify = []string{"sh", "-c", "echo broken >&2; exit 3"}
		return r
	}
	// A different build label (version), so a different image.
	_, err = Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Force: true, AgentVersion: "broken", Labels: map[string]string{LabelTest: id}})
	if err == nil || !strings.Contains(err.Error(), "does not work") || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Build with a failing check = %v", err)
	}
	im, err := c.ImageInspect(ctx, ref)
	if err != nil || im.ID != good.ID {
		t.Fatalf("the working image was replaced: %v, %s != %s", err, im.ID, good.ID)
	}
	ims, _ := c.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelTest+"="+id))})
	if len(ims) != 1 {
		t.Errorf("%d images carry the test label, want only the working one", len(ims))
	}
	for _, im := range ims {
		for _, tag := range im.RepoTags {
			if strings.Contains(tag, ":build-") {
				t.Errorf("temporary tag left: %s", tag)
			}
		}
	}

	// Control: with the check passing, the forced build does replace it.
	recipes[NameBusybox] = orig
	res, err := Build(ctx, c, NameBusybox, BuildOptions{Ref: ref, Force: true, AgentVersion: "control", Labels: map[string]string{LabelTest: id}})
	if err != nil || res.ID == good.ID {
		t.Fatalf("control build: %v, ID %s", err, res.ID)
	}
}
