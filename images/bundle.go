package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
)

// A bundle is a tar file (optionally gzip-compressed) holding, in order:
//
//	manifest.json  a BundleManifest (JSON object)
//	images.tar     the engine's `docker save` stream of the images
//
// The manifest comes first so Load can check what it is reading before
// it spools the (large) archive, and so `tar tf` shows it at once.
const (
	// BundleFormat identifies a bundle's manifest.
	BundleFormat = "localagent-image-bundle"
	// BundleVersion is the manifest layout version written by Save.
	BundleVersion = 1

	bundleManifestName = "manifest.json"
	bundleArchiveName  = "images.tar"
	maxManifestSize    = 1 << 20
)

// BundleManifest describes a bundle's contents.
type BundleManifest struct {
	Format       string        `json:"format"`
	Version      int           `json:"version"`
	AgentVersion string        `json:"agent_version"`
	Created      time.Time     `json:"created"`
	Images       []BundleImage `json:"images"`
	Archive      BundleArchive `json:"archive"`
}

// BundleImage is one image in a bundle.
type BundleImage struct {
	Ref     string    `json:"ref"`
	ID      string    `json:"id"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
}

// BundleArchive describes the embedded save stream.
type BundleArchive struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SaveOptions control Save. The zero value writes an uncompressed bundle.
type SaveOptions struct {
	Gzip         bool
	AgentVersion string
	// TempDir holds the save stream while its checksum is computed
	// ("" = the system temporary directory).
	TempDir  string
	Progress ProgressFunc
}

// Save writes a bundle of refs to w. With no refs it saves every project
// image that is present. The engine's save stream is spooled to a
// temporary file first: its checksum goes into the manifest, which is
// written before it.
func Save(ctx context.Context, eng Engine, w io.Writer, refs []string, opts SaveOptions) (BundleManifest, error) {
	p := opts.Progress
	m := BundleManifest{Format: BundleFormat, Version: BundleVersion, AgentVersion: opts.AgentVersion, Created: time.Now().UTC()}
	if m.AgentVersion == "" {
		m.AgentVersion = "dev"
	}
	if len(refs) == 0 {
		for _, d := range Definitions() {
			ok, err := Exists(ctx, eng, d.Ref)
			if err != nil {
				return m, err
			}
			if ok {
				refs = append(refs, d.Ref)
			}
		}
		if len(refs) == 0 {
			return m, errors.New("no project images are present to save: build them first with `agent images build all`")
		}
	}
	seen := map[string]bool{}
	for _, ref := range refs {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		im, err := eng.ImageInspect(ctx, ref)
		if cerrdefs.IsNotFound(err) {
			return m, &MissingError{Ref: ref}
		}
		if err != nil {
			return m, fmt.Errorf("inspecting %s: %w", ref, err)
		}
		created, _ := time.Parse(time.RFC3339Nano, im.Created)
		m.Images = append(m.Images, BundleImage{Ref: ref, ID: im.ID, Size: im.Size, Created: created})
	}

	st := p.start("", "save", fmt.Sprintf("saving %d image(s)", len(m.Images)))
	spool, err := os.CreateTemp(opts.TempDir, "agent-save-*.tar")
	if err != nil {
		return m, fmt.Errorf("creating a temporary file: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	names := make([]string, 0, len(m.Images))
	for _, im := range m.Images {
		names = append(names, im.Ref)
	}
	rc, err := eng.ImageSave(ctx, names)
	if err != nil {
		return m, fmt.Errorf("saving %s: %w", strings.Join(names, ", "), err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(spool, h), rc)
	rc.Close()
	if err != nil {
		return m, fmt.Errorf("saving %s: %w", strings.Join(names, ", "), err)
	}
	m.Archive = BundleArchive{Name: bundleArchiveName, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	st.done(fmt.Sprintf("%s, sha256 %s", humanSize(n), m.Archive.SHA256[:12]))

	st = p.start("", "bundle", "writing the bundle")
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return m, err
	}
	if err := writeBundle(ctx, w, m, spool, opts.Gzip); err != nil {
		return m, fmt.Errorf("writing the bundle: %w", err)
	}
	st.done("done")
	return m, nil
}

func writeBundle(ctx context.Context, w io.Writer, m BundleManifest, archive io.Reader, compress bool) error {
	var gz *gzip.Writer
	bw := bufio.NewWriterSize(w, 1<<20)
	out := io.Writer(bw)
	if compress {
		gz = gzip.NewWriter(bw)
		out = gz
	}
	tw := tar.NewWriter(out)
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	body = append(body, '\n')
	now := m.Created
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: bundleManifestName, Mode: 0o644, Size: int64(len(body)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: bundleArchiveName, Mode: 0o644, Size: m.Archive.Size, ModTime: now}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, ctxReader{ctx, archive}, m.Archive.Size); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// LoadOptions control Load.
type LoadOptions struct {
	// TempDir holds the archive while it is verified ("" = the system
	// temporary directory).
	TempDir  string
	Progress ProgressFunc
}

// LoadResult says what Load loaded.
type LoadResult struct {
	// Bundle is true for a bundle written by Save, false for a plain
	// `docker save` archive.
	Bundle bool `json:"bundle"`
	// Images are the references (or IDs, for untagged images) the engine
	// reports as loaded.
	Images []string `json:"images"`
	// Manifest is the bundle's manifest; nil for a plain archive.
	Manifest *BundleManifest `json:"manifest,omitempty"`
}

// ErrNotBundle is wrapped by Load's error when the input is neither a
// bundle nor a `docker save` archive.
var ErrNotBundle = errors.New("not an image bundle or a docker save archive")

// Load reads a bundle written by Save — checking its manifest and the
// sha256 and size of the image archive before anything reaches the engine
// — or a plain `docker save` archive (how vendor GPU images usually
// travel), either one optionally gzip-compressed, and loads the images.
func Load(ctx context.Context, eng Engine, r io.Reader, opts LoadOptions) (LoadResult, error) {
	var res LoadResult
	p := opts.Progress
	st := p.start("", "load", "reading the archive")
	in, err := decompress(bufio.NewReaderSize(ctxReader{ctx, r}, 1<<20))
	if err != nil {
		return res, err
	}
	spool, err := os.CreateTemp(opts.TempDir, "agent-load-*.tar")
	if err != nil {
		return res, fmt.Errorf("creating a temporary file: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()

	// Until the first entry says what this is, every byte read is also
	// recorded, so a plain docker save archive can be loaded whole.
	rec := &switchWriter{w: spool, on: true}
	tee := io.TeeReader(in, rec)
	tr := tar.NewReader(tee)
	hdr, err := tr.Next()
	if err != nil {
		return res, fmt.Errorf("%w (%v)", ErrNotBundle, err)
	}
	var m BundleManifest
	isBundle := false
	if hdr.Name == bundleManifestName && hdr.Typeflag == tar.TypeReg && hdr.Size <= maxManifestSize {
		body, err := io.ReadAll(tr)
		if err != nil {
			return res, fmt.Errorf("reading the manifest: %w", err)
		}
		// A docker save archive has a manifest.json too, but it is a JSON
		// array; only an object naming our format is a bundle.
		if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '{' {
			if err := json.Unmarshal(body, &m); err != nil || m.Format != BundleFormat {
				return res, fmt.Errorf("%w: manifest.json is not a bundle manifest", ErrNotBundle)
			}
			isBundle = true
		}
	}
	if isBundle {
		if err := checkManifest(m); err != nil {
			return res, err
		}
		rec.on = false
		if err := spool.Truncate(0); err != nil {
			return res, err
		}
		if _, err := spool.Seek(0, io.SeekStart); err != nil {
			return res, err
		}
		hdr, err := tr.Next()
		if err != nil || hdr.Name != bundleArchiveName {
			return res, fmt.Errorf("corrupt bundle: expected %s after the manifest", bundleArchiveName)
		}
		if hdr.Size != m.Archive.Size {
			return res, fmt.Errorf("corrupt bundle: %s is %d bytes, the manifest says %d", bundleArchiveName, hdr.Size, m.Archive.Size)
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(spool, h), tr)
		if err != nil {
			return res, fmt.Errorf("corrupt bundle: reading %s: %w", bundleArchiveName, err)
		}
		if n != m.Archive.Size {
			return res, fmt.Errorf("corrupt bundle: %s is truncated (%d of %d bytes)", bundleArchiveName, n, m.Archive.Size)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != m.Archive.SHA256 {
			return res, fmt.Errorf("corrupt bundle: sha256 of %s is %s, the manifest says %s; the file was damaged in transit — copy it again", bundleArchiveName, sum, m.Archive.SHA256)
		}
		st.info(fmt.Sprintf("bundle verified: %d image(s), sha256 %s", len(m.Images), m.Archive.SHA256[:12]))
	} else {
		// Record the rest of the input, then check it is a save archive.
		if _, err := io.Copy(io.Discard, tee); err != nil {
			return res, fmt.Errorf("reading the archive: %w", err)
		}
		if err := checkSaveArchive(spool); err != nil {
			return res, err
		}
		st.info("plain docker save archive")
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return res, err
	}

	resp, err := eng.ImageLoad(ctx, spool, client.ImageLoadWithQuiet(true))
	if err != nil {
		return res, fmt.Errorf("the engine refused the archive: %w", err)
	}
	defer resp.Body.Close()
	loaded, err := readLoadStream(resp.Body)
	if err != nil {
		return res, fmt.Errorf("the engine refused the archive: %w", err)
	}
	res.Bundle, res.Images = isBundle, loaded
	if isBundle {
		res.Manifest = &m
		// Every image the manifest names must now be present. Its ID is
		// compared but a difference is only reported: the checksum above
		// already proved the archive intact, and an engine using the
		// containerd image store names images by manifest digest where a
		// classic engine uses the config digest, so a bundle made on one
		// legitimately shows other IDs on the other.
		for _, im := range m.Images {
			got, err := eng.ImageInspect(ctx, im.Ref)
			if err != nil {
				return res, fmt.Errorf("after loading, %s is not present: %w", im.Ref, err)
			}
			if got.ID != im.ID {
				st.info(fmt.Sprintf("note: %s has ID %s here, %s where it was saved (different image stores)", im.Ref, shortID(got.ID), shortID(im.ID)))
			}
		}
	}
	st.done(fmt.Sprintf("loaded %s", strings.Join(loaded, ", ")))
	return res, nil
}

func checkManifest(m BundleManifest) error {
	if m.Version < 1 || m.Version > BundleVersion {
		return fmt.Errorf("the bundle has format version %d; this agent reads up to %d — use a newer agent", m.Version, BundleVersion)
	}
	if m.Archive.Name != bundleArchiveName || len(m.Archive.SHA256) != 64 || m.Archive.Size <= 0 {
		return errors.New("corrupt bundle: the manifest does not describe the image archive")
	}
	if len(m.Images) == 0 {
		return errors.New("corrupt bundle: the manifest lists no images")
	}
	return nil
}

// checkSaveArchive accepts a tar that looks like `docker save` output:
// the classic layout (manifest.json, repositories) or an OCI layout
// (index.json, oci-layout).
func checkSaveArchive(f *os.File) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: the tar has no manifest.json or index.json", ErrNotBundle)
		}
		if err != nil {
			return fmt.Errorf("%w (%v)", ErrNotBundle, err)
		}
		switch strings.TrimPrefix(hdr.Name, "./") {
		case "manifest.json", "index.json", "repositories":
			return nil
		}
	}
}

// decompress peeks at the first bytes and undoes gzip when present.
func decompress(br *bufio.Reader) (io.Reader, error) {
	magic, err := br.Peek(2)
	if err != nil {
		return nil, fmt.Errorf("%w: the file is empty or unreadable (%v)", ErrNotBundle, err)
	}
	if magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: bad gzip data (%v)", ErrNotBundle, err)
		}
		return gz, nil
	}
	return br, nil
}

// readLoadStream collects "Loaded image: REF" and "Loaded image ID: ID"
// lines from the engine's load reply and returns its error, if any.
func readLoadStream(r io.Reader) ([]string, error) {
	dec := json.NewDecoder(r)
	var out []string
	for {
		var m jsonMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("reading the engine's reply: %w", err)
		}
		if err := m.err(); err != nil {
			return out, err
		}
		for _, line := range strings.Split(m.Stream, "\n") {
			if v, ok := strings.CutPrefix(line, "Loaded image: "); ok {
				out = append(out, strings.TrimSpace(v))
			} else if v, ok := strings.CutPrefix(line, "Loaded image ID: "); ok {
				out = append(out, strings.TrimSpace(v))
			}
		}
	}
}

// switchWriter passes writes through while on.
type switchWriter struct {
	w  io.Writer
	on bool
}

func (s *switchWriter) Write(p []byte) (int, error) {
	if !s.on {
		return len(p), nil
	}
	return s.w.Write(p)
}

// ctxReader stops a long copy when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
