package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/stdcopy"
)

// BuildOptions control one image build. The zero value builds the image
// under its fixed tag, skipping it when present.
type BuildOptions struct {
	// Force rebuilds even when the image is present.
	Force bool
	// Mirror is the Debian mirror for debootstrap ("" = the host's apt
	// mirror, else DefaultMirror). Unused by the busybox image.
	Mirror string
	// Ref builds under this tag instead of the definition's fixed one
	// (tests build to a unique tag so they never disturb shared images).
	Ref string
	// Labels are added to the image and to the short-lived container that
	// verifies it (tests set LabelTest here).
	Labels map[string]string
	// AgentVersion is recorded in the build label.
	AgentVersion string
	// TempDir is where root filesystems and logs are built ("" = $TMPDIR
	// if set, else /var/tmp). Debian root filesystems take ~350-450 MB.
	TempDir string
	// Progress receives step events; nil discards them.
	Progress ProgressFunc
	// Backend picks the llama-server build (BackendCPU, BackendCUDA,
	// BackendVulkan; "" = CPU). Other images take none.
	Backend string
}

// BuildResult describes a finished build. ID, Size and Created are those
// of the image under Ref, whether built now or found present.
type BuildResult struct {
	Name string
	Ref  string
	ID   string
	// Skipped is true when the image was present and Force was not set.
	Skipped bool
	Size    int64
	Created time.Time
	// Duration is the wall time of the whole build.
	Duration time.Duration
	// Verified is the output of the check command run in the new image
	// (e.g. `llama-server --version`).
	Verified string
}

// recipe is how one image is made.
type recipe struct {
	// preflight checks host prerequisites before anything is created, so a
	// missing tool fails in milliseconds with the fix.
	preflight func() error
	// rootfs produces the root filesystem; the returned writer streams it
	// as a tar archive. cleanup removes whatever rootfs created and is
	// always safe to call.
	rootfs func(ctx context.Context, b *build) (write func(io.Writer) error, info string, cleanup func(), err error)
	// changes are Dockerfile instructions applied on import (ENV, CMD...);
	// the labels are added by Build.
	changes []string
	// verify is run in a container from the new image; it must exit 0.
	verify []string
}

// recipes maps image names to their recipes (a variable so tests can
// break one on purpose).
var recipes = map[string]func() recipe{
	NameBusybox:     busyboxRecipe,
	NameSandbox:     sandboxRecipe,
	NameLlamaServer: llamaServerRecipe,
}

// build is the state of one running build.
type build struct {
	def  Definition
	opts BuildOptions
	p    ProgressFunc
}

// Build makes the named image ("busybox", "sandbox", "llama-server")
// without any registry. When the image is already present it does nothing
// unless opts.Force is set. The new image is imported under a temporary
// tag, checked by running a command in it, and only then tagged as the
// final ref, so a failed or cancelled build never replaces a working
// image. Temporary directories, tags and containers are removed on every
// path out.
func Build(ctx context.Context, eng Engine, name string, opts BuildOptions) (BuildResult, error) {
	def, err := validName(name)
	if err != nil {
		return BuildResult{}, err
	}
	if opts.Backend != "" {
		if def.Name != NameLlamaServer {
			return BuildResult{}, fmt.Errorf("--backend applies to the llama-server image only, not %s", def.Name)
		}
		if def, err = LlamaServerDefinition(opts.Backend); err != nil {
			return BuildResult{}, err
		}
	}
	ref := def.Ref
	if opts.Ref != "" {
		ref = opts.Ref
	}
	res := BuildResult{Name: def.Name, Ref: ref}
	b := &build{def: def, opts: opts, p: opts.Progress}
	started := time.Now()

	old, err := eng.ImageInspect(ctx, ref)
	switch {
	case err == nil && !opts.Force:
		res.Skipped, res.ID, res.Size = true, old.ID, old.Size
		res.Created, _ = time.Parse(time.RFC3339Nano, old.Created)
		b.p.emit(Event{Image: def.Name, Step: "check", Message: fmt.Sprintf("%s is present (%s); use --force to rebuild", ref, shortID(old.ID)), Done: true})
		return res, nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return res, fmt.Errorf("inspecting %s: %w", ref, err)
	}

	r := recipes[def.Name]()
	if IsGPUBackend(def.Backend) {
		r = llamaServerBackendRecipe(def.Backend)
	}
	if err := r.preflight(); err != nil {
		return res, fmt.Errorf("building %s: %w", def.Name, err)
	}

	write, info, cleanup, err := r.rootfs(ctx, b)
	defer cleanup()
	if err != nil {
		return res, fmt.Errorf("building %s: %w", def.Name, err)
	}

	tmpRef, err := tempRef(ref)
	if err != nil {
		return res, err
	}
	// From here on a failure must not leave the temporary tag behind, even
	// when the import was cut off after the engine had created it.
	imported := true
	defer func() {
		if imported {
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			_, _ = eng.ImageRemove(cctx, tmpRef, image.RemoveOptions{})
		}
	}()

	st := b.p.start(def.Name, "import", "importing the root filesystem")
	changes := append([]string{}, r.changes...)
	changes = append(changes, labelChange(LabelImage, def.Name), labelChange(LabelBuild, buildLabel(info, opts.AgentVersion)))
	for k, v := range opts.Labels {
		changes = append(changes, labelChange(k, v))
	}
	id, err := importTar(ctx, eng, tmpRef, changes, write)
	if err != nil {
		return res, fmt.Errorf("building %s: importing into the engine: %w", def.Name, err)
	}
	st.done("imported " + shortID(id))

	st = b.p.start(def.Name, "verify", "running "+strings.Join(r.verify, " "))
	out, err := runOnce(ctx, eng, tmpRef, r.verify, opts.Labels)
	if err != nil {
		return res, fmt.Errorf("building %s: the new image does not work: %w", def.Name, err)
	}
	res.Verified = strings.TrimSpace(out)
	st.done(firstLine(res.Verified))

	st = b.p.start(def.Name, "tag", "tagging "+ref)
	if err := eng.ImageTag(ctx, tmpRef, ref); err != nil {
		return res, fmt.Errorf("tagging %s: %w", ref, err)
	}
	// Drop the temporary tag; the image keeps ref.
	cctx, cancel := cleanupContext(ctx)
	if _, err := eng.ImageRemove(cctx, tmpRef, image.RemoveOptions{}); err == nil {
		imported = false
	}
	// The image that had ref before is now untagged: remove it unless
	// something still uses it (a container, another tag), which the engine
	// refuses as a conflict — that is fine, it stays.
	if old.ID != "" && old.ID != id {
		_, _ = eng.ImageRemove(cctx, old.ID, image.RemoveOptions{PruneChildren: true})
	}
	cancel()

	now, err := eng.ImageInspect(ctx, ref)
	if err != nil {
		return res, fmt.Errorf("inspecting %s after the build: %w", ref, err)
	}
	res.ID, res.Size = now.ID, now.Size
	res.Created, _ = time.Parse(time.RFC3339Nano, now.Created)
	res.Duration = time.Since(started)
	st.done(fmt.Sprintf("%s %s, %s, built in %s", ref, shortID(res.ID), humanSize(res.Size), res.Duration.Round(100*time.Millisecond)))
	return res, nil
}

// Exists reports whether ref is present in the engine.
func Exists(ctx context.Context, eng Engine, ref string) (bool, error) {
	_, err := eng.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("inspecting %s: %w", ref, err)
	}
}

// importTar streams a tar archive written by write into the engine as a
// new single-layer image tagged ref, and returns its ID.
func importTar(ctx context.Context, eng Engine, ref string, changes []string, write func(io.Writer) error) (string, error) {
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err)
		werr <- err
	}()
	rc, err := eng.ImageImport(ctx, image.ImportSource{Source: pr, SourceName: "-"}, ref, image.ImportOptions{
		Changes: changes,
		Message: "built offline by agent images build",
	})
	if err != nil {
		pr.CloseWithError(err)
		if we := <-werr; we != nil && !errors.Is(we, io.ErrClosedPipe) {
			return "", fmt.Errorf("writing the root filesystem: %w", we)
		}
		return "", err
	}
	defer rc.Close()
	id, jerr := readImportStream(rc)
	pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if the engine stopped reading
	if we := <-werr; we != nil && !errors.Is(we, io.ErrClosedPipe) {
		return id, fmt.Errorf("writing the root filesystem: %w", we)
	}
	return id, jerr
}

// jsonMessage is the subset of the engine's progress stream format used
// by import and load.
type jsonMessage struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

func (m jsonMessage) err() error {
	if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
		return errors.New(m.ErrorDetail.Message)
	}
	if m.Error != "" {
		return errors.New(m.Error)
	}
	return nil
}

// readImportStream returns the image ID the engine reports ("status":
// "sha256:...") or the error it sends in the stream.
func readImportStream(r io.Reader) (string, error) {
	dec := json.NewDecoder(r)
	id := ""
	for {
		var m jsonMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				if id == "" {
					return "", errors.New("the engine reported no image ID")
				}
				return id, nil
			}
			return id, fmt.Errorf("reading the engine's reply: %w", err)
		}
		if err := m.err(); err != nil {
			return id, err
		}
		if s := strings.TrimSpace(m.Status); strings.HasPrefix(s, "sha256:") {
			id = s
		}
	}
}

// runOnce runs cmd in a throw-away container from ref, hardened the way
// sandboxes are (nobody's uid, no network, no capabilities, read-only
// root), so an image that only works as root fails here rather than in
// the first task. It returns the combined output; a non-zero exit is an
// error carrying the output.
func runOnce(ctx context.Context, eng Engine, ref string, cmd []string, labels map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lbl := map[string]string{LabelManaged: "true", LabelKind: KindImageCheck}
	for k, v := range labels {
		lbl[k] = v
	}
	c, err := eng.ContainerCreate(ctx, &container.Config{Image: ref, Cmd: cmd, Labels: lbl, NetworkDisabled: true, User: "65534:65534"},
		&container.HostConfig{
			NetworkMode:    "none",
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
			ReadonlyRootfs: true,
		}, nil, nil, "")
	if err != nil {
		return "", fmt.Errorf("creating a container: %w", err)
	}
	defer func() {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		_ = eng.ContainerRemove(cctx, c.ID, container.RemoveOptions{Force: true})
	}()
	waitC, errC := eng.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
	if err := eng.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return "", fmt.Errorf("starting %s: %w", strings.Join(cmd, " "), err)
	}
	var code int64
	select {
	case w := <-waitC:
		if w.Error != nil {
			return "", fmt.Errorf("waiting for %s: %s", strings.Join(cmd, " "), w.Error.Message)
		}
		code = w.StatusCode
	case err := <-errC:
		return "", fmt.Errorf("waiting for %s: %w", strings.Join(cmd, " "), err)
	}
	logs, err := eng.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", fmt.Errorf("reading the output of %s: %w", strings.Join(cmd, " "), err)
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(logs, 1<<20)); err != nil {
		return "", fmt.Errorf("reading the output of %s: %w", strings.Join(cmd, " "), err)
	}
	if code != 0 {
		return out.String(), fmt.Errorf("%s exited with %d: %s", strings.Join(cmd, " "), code, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// tempRef is a unique tag in the same repository as ref, used while a
// build is unverified.
func tempRef(ref string) (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random tag: %w", err)
	}
	repo := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo = ref[:i]
	}
	return repo + ":build-" + hex.EncodeToString(b[:]), nil
}

// labelChange renders a LABEL instruction. Values are quoted; the few
// values that come from outside (mirror URLs, test names) are checked or
// built so they hold no quote or backslash.
func labelChange(k, v string) string {
	v = strings.NewReplacer(`"`, "'", `\`, "/", "\n", " ").Replace(v)
	return fmt.Sprintf("LABEL %s=\"%s\"", k, v)
}

func buildLabel(info, version string) string {
	if version == "" {
		version = "dev"
	}
	return fmt.Sprintf("%s built=%s by=agent/%s", info, time.Now().UTC().Format(time.RFC3339), version)
}

// cleanupContext outlives a cancelled ctx long enough to tidy up.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func humanSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.0f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// tempDir is where a root filesystem is built. Without an explicit choice
// (TempDir or $TMPDIR) it is /var/tmp rather than /tmp: /tmp is often a
// small tmpfs mounted nodev, where debootstrap cannot create /dev nodes
// and a 450 MB root does not fit.
func tempDir(opts BuildOptions) string {
	if opts.TempDir != "" {
		return opts.TempDir
	}
	if os.Getenv("TMPDIR") == "" {
		if fi, err := os.Stat("/var/tmp"); err == nil && fi.IsDir() {
			return "/var/tmp"
		}
	}
	return os.TempDir()
}
