package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// loadRecorder is a unit-test stand-in for the engine: it records what
// reaches ImageLoad and answers ImageInspect from a map.
type loadRecorder struct {
	Engine // nil: any other call panics, which would fail the test
	loaded [][]byte
	ids    map[string]string
}

func (f *loadRecorder) ImageLoad(_ context.Context, r io.Reader, _ ...client.ImageLoadOption) (image.LoadResponse, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return image.LoadResponse{}, err
	}
	f.loaded = append(f.loaded, b)
	body := `{"stream":"Loaded image: test/one:latest\n"}` + "\n"
	return image.LoadResponse{Body: io.NopCloser(strings.NewReader(body)), JSON: true}, nil
}

func (f *loadRecorder) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	return image.InspectResponse{ID: f.ids[ref]}, nil
}

// saveArchive is a tiny tar shaped like `docker save` output.
func saveArchive(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, body string }{
		{"blobs/sha256/abc", strings.Repeat("layer", 100)},
		{"manifest.json", `[{"Config":"blobs/sha256/abc","RepoTags":["test/one:latest"],"Layers":[]}]`},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func makeBundle(t *testing.T, archive []byte, gz bool) []byte {
	t.Helper()
	sum := sha256.Sum256(archive)
	m := BundleManifest{
		Format: BundleFormat, Version: BundleVersion, AgentVersion: "test", Created: time.Now().UTC(),
		Images:  []BundleImage{{Ref: "test/one:latest", ID: "sha256:1111", Size: 10}},
		Archive: BundleArchive{Name: bundleArchiveName, Size: int64(len(archive)), SHA256: hex.EncodeToString(sum[:])},
	}
	var buf bytes.Buffer
	if err := writeBundle(context.Background(), &buf, m, bytes.NewReader(archive), gz); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLoadBundle(t *testing.T) {
	archive := saveArchive(t)
	for _, gz := range []bool{false, true} {
		f := &loadRecorder{ids: map[string]string{"test/one:latest": "sha256:1111"}}
		res, err := Load(context.Background(), f, bytes.NewReader(makeBundle(t, archive, gz)), LoadOptions{TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("gzip=%v: %v", gz, err)
		}
		if !res.Bundle || res.Manifest == nil || len(res.Images) != 1 || res.Images[0] != "test/one:latest" {
			t.Errorf("gzip=%v: result %+v", gz, res)
		}
		if len(f.loaded) != 1 || !bytes.Equal(f.loaded[0], archive) {
			t.Errorf("gzip=%v: the engine did not get exactly the embedded archive", gz)
		}
	}
}

func TestLoadPlainSaveArchive(t *testing.T) {
	archive := saveArchive(t)
	var gzbuf bytes.Buffer
	zw := gzip.NewWriter(&gzbuf)
	zw.Write(archive)
	zw.Close()
	for name, input := range map[string][]byte{"plain": archive, "gzip": gzbuf.Bytes()} {
		f := &loadRecorder{}
		res, err := Load(context.Background(), f, bytes.NewReader(input), LoadOptions{TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Bundle || len(res.Images) != 1 {
			t.Errorf("%s: result %+v", name, res)
		}
		// The whole archive, including the bytes read while deciding
		// what it was, must reach the engine unchanged.
		if len(f.loaded) != 1 || !bytes.Equal(f.loaded[0], archive) {
			t.Errorf("%s: the engine got %d bytes, want the %d-byte archive", name, len(f.loaded[0]), len(archive))
		}
	}
}

func TestLoadRejects(t *testing.T) {
	archive := saveArchive(t)
	good := makeBundle(t, archive, false)

	// Flip one byte inside the embedded archive (after the manifest's
	// header, manifest body and the archive's header).
	corrupt := bytes.Clone(good)
	i := bytes.Index(corrupt, []byte("layerlayer"))
	corrupt[i] ^= 0xff

	truncated := good[:len(good)-2048]

	otherTar := func() []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
		tw.Write([]byte("hi"))
		tw.Close()
		return buf.Bytes()
	}()

	foreignManifest := func() []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		body := `{"format":"something-else","version":1}`
		tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
		tw.Close()
		return buf.Bytes()
	}()

	tests := []struct {
		name  string
		input []byte
		want  string
		isNot bool // want ErrNotBundle
	}{
		{"corrupt archive", corrupt, "sha256", false},
		{"truncated bundle", truncated, "corrupt bundle", false},
		{"text file", []byte("this is not an image bundle\n"), "not an image bundle", true},
		{"empty file", nil, "empty", true},
		{"tar without manifest", otherTar, "no manifest.json", true},
		{"foreign manifest", foreignManifest, "not a bundle manifest", true},
		{"bad gzip", []byte{0x1f, 0x8b, 0, 0, 0}, "gzip", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &loadRecorder{}
			_, err := Load(context.Background(), f, bytes.NewReader(tt.input), LoadOptions{TempDir: t.TempDir()})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error mentioning %q", err, tt.want)
			}
			if tt.isNot != errors.Is(err, ErrNotBundle) {
				t.Errorf("errors.Is(err, ErrNotBundle) = %v, want %v", !tt.isNot, tt.isNot)
			}
			if len(f.loaded) != 0 {
				t.Error("a rejected input reached the engine")
			}
		})
	}

	// Control: the same bundle, unmodified, loads.
	f := &loadRecorder{ids: map[string]string{"test/one:latest": "sha256:1111"}}
	if _, err := Load(context.Background(), f, bytes.NewReader(good), LoadOptions{TempDir: t.TempDir()}); err != nil {
		t.Fatalf("control: the intact bundle failed: %v", err)
	}
}

func TestLoadRejectsNewerVersion(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := `{"format":"` + BundleFormat + `","version":99,"images":[{"ref":"a"}],"archive":{"name":"images.tar","size":1,"sha256":"` + strings.Repeat("0", 64) + `"}}`
	tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
	tw.Write([]byte(body))
	tw.Close()
	_, err := Load(context.Background(), &loadRecorder{}, &buf, LoadOptions{TempDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "newer agent") {
		t.Fatalf("Load = %v, want a version error", err)
	}
}
