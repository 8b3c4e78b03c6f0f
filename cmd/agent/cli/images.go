package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/images"
)

// NewCmdImages builds `agent images`.
func NewCmdImages(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Build, list, save and load images offline",
		Long: `Every image agent uses is built on this machine from Debian packages or
loaded from a bundle; nothing is ever pulled from a registry.

  agent images build              build the sandbox image
  agent images build all          busybox, sandbox and llama-server
  agent images save -o FILE       write an air-gapped bundle
  agent images load -i FILE       load a bundle (or a plain docker save archive)`,
		Example: `  agent images build all
  agent images save -o bundle.tar.gz`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		NewCmdImagesBuild(f, nil),
		NewCmdImagesList(f, nil),
		NewCmdImagesSave(f, nil),
		NewCmdImagesLoad(f, nil),
	)
	return cmd
}

// ImagesBuildOptions are the inputs of `agent images build`.
type ImagesBuildOptions struct {
	IO     *IOStreams
	Engine func(context.Context) (images.Engine, error)

	// Names are the images to build in order (already expanded from "all").
	Names  []string
	Force  bool
	Mirror string
	JSON   bool
	// Backend is the llama-server build (cpu, cuda, vulkan).
	Backend string
}

// NewCmdImagesBuild builds `agent images build`.
func NewCmdImagesBuild(f *Factory, runF func(context.Context, *ImagesBuildOptions) error) *cobra.Command {
	opts := &ImagesBuildOptions{IO: f.IO, Engine: factoryEngine(f)}
	cmd := &cobra.Command{
		Use:   "build [sandbox|llama-server [--backend cpu|cuda|vulkan]|busybox|all]",
		Short: "Build project images from Debian packages (no registry)",
		Long: `Build a project image without any registry. The sandbox and llama-server
images are Debian root filesystems made with debootstrap (needs root and
network access to a Debian mirror); busybox is written from the host's
busybox-static. An image that is present is skipped unless --force.

The mirror is --mirror, else images.mirror from the configuration, else the
host's apt mirror, else ` + images.DefaultMirror + `.

llama-server --backend cuda (Debian contrib/non-free: libggml0-backend-cuda,
libcublas12, libcudart12; about 1 GB) or --backend vulkan (libggml0-backend-vulkan,
Mesa) builds agent/llama-server:BACKEND. The CUDA image carries no driver
library: the NVIDIA container runtime mounts the host's.`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: append(images.Names(), "all"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := images.NameSandbox
			if len(args) == 1 {
				name = args[0]
			}
			names, err := expandImageNames(name)
			if err != nil {
				return err
			}
			opts.Names = names
			if opts.Backend != "" && (len(names) != 1 || names[0] != images.NameLlamaServer) {
				return UsageErrorf("--backend applies to the llama-server image only")
			}
			if !cmd.Flags().Changed("mirror") {
				cfg, err := f.Config()
				if err != nil {
					return err
				}
				opts.Mirror = cfg.Images.Mirror
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return imagesBuildRun(cmd.Context(), opts)
		},
	}
	cmd.Example = `  agent images build
  agent images build all
  agent images build llama-server --mirror http://mirror.internal/debian`
	cmd.Flags().BoolVar(&opts.Force, "force", false, "rebuild even when the image is present")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"images": [{"name", "ref", "id", "skipped", "size", "duration_ms"}]} as JSON`)
	cmd.Flags().StringVar(&opts.Backend, "backend", "", "llama-server backend, `cpu|cuda|vulkan` (default cpu)")
	cmd.Flags().StringVar(&opts.Mirror, "mirror", "", "Debian mirror `URL` for debootstrap (default: config images.mirror, the host's apt mirror, or deb.debian.org)")
	return cmd
}

func expandImageNames(name string) ([]string, error) {
	if name == "all" {
		return images.Names(), nil
	}
	d, ok := images.Lookup(name)
	if !ok {
		return nil, UsageErrorf("unknown image %q: choose one of %s, all", name, strings.Join(images.Names(), ", "))
	}
	return []string{d.Name}, nil
}

func imagesBuildRun(ctx context.Context, opts *ImagesBuildOptions) error {
	eng, err := opts.Engine(ctx)
	if err != nil {
		return err
	}
	progress, stop := newProgress(opts.IO)
	defer stop()
	built := []map[string]any{}
	for _, name := range opts.Names {
		res, err := images.Build(ctx, eng, name, images.BuildOptions{
			Force:        opts.Force,
			Mirror:       opts.Mirror,
			AgentVersion: Version,
			Progress:     progress,
			Backend:      opts.Backend,
		})
		if err != nil {
			return err
		}
		built = append(built, map[string]any{"name": res.Name, "ref": res.Ref, "id": res.ID, "skipped": res.Skipped,
			"size": res.Size, "duration_ms": res.Duration.Milliseconds()})
		if !res.Skipped {
			fmt.Fprintf(opts.IO.ErrOut, "built %s (%s, %s) in %s\n", res.Ref, shortID(res.ID), humanBytes(res.Size), res.Duration.Round(100*time.Millisecond))
		}
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"images": built})
	}
	return nil
}

// progressPrinter renders build and bundle progress as plain lines:
// "[sandbox] debootstrap: Installing required packages (12.3s)". Plain
// lines read well both on a terminal and in CI logs.
func progressPrinter(w io.Writer) images.ProgressFunc {
	return func(e images.Event) { fmt.Fprintln(w, progressLine(e)) }
}

func progressLine(e images.Event) string {
	prefix := ""
	if e.Image != "" {
		prefix = "[" + e.Image + "] "
	}
	suffix := ""
	if e.Elapsed > 0 {
		suffix = fmt.Sprintf(" (%s)", e.Elapsed.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%s%s: %s%s", termtext.Line(prefix), termtext.Line(e.Step), termtext.Line(e.Message), suffix)
}

// newProgress returns plain lines when stderr is not a terminal. On a
// terminal it also keeps a status line under them showing the running
// step and a ticking clock, so a minute of debootstrap never looks hung.
func newProgress(ios *IOStreams) (images.ProgressFunc, func()) {
	if !ios.ErrTTY || ios.Dumb {
		return progressPrinter(ios.ErrOut), func() {}
	}
	t := &ttyProgress{w: ios.ErrOut, status: statusLine{w: ios.ErrOut, width: ios.ErrWidth}}
	t.stopTick = redrawEvery(time.Second, &t.mu, t.redraw)
	return t.event, t.stop
}

type ttyProgress struct {
	mu       sync.Mutex
	w        io.Writer
	status   statusLine
	stopTick func()
	current  string // running step, "" when idle
	since    time.Time
}

func (t *ttyProgress) event(e images.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status.clear()
	fmt.Fprintln(t.w, progressLine(e))
	if e.Done {
		t.current = ""
		return
	}
	if e.Elapsed == 0 {
		t.current, t.since = progressLine(images.Event{Image: e.Image, Step: e.Step, Message: "working"}), time.Now()
	}
	t.redraw()
}

func (t *ttyProgress) redraw() {
	if t.current != "" {
		t.status.draw(fmt.Sprintf("%s %s", t.current, time.Since(t.since).Round(time.Second)))
	}
}

func (t *ttyProgress) stop() {
	t.stopTick()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status.clear()
}

// factoryEngine adapts the factory's lazily built Docker client to the
// images package's engine seam.
func factoryEngine(f *Factory) func(context.Context) (images.Engine, error) {
	return func(context.Context) (images.Engine, error) {
		c, err := f.Docker()
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// ImagesListOptions are the inputs of `agent images list`.
type ImagesListOptions struct {
	IO     *IOStreams
	Engine func(context.Context) (images.Engine, error)
	JSON   bool
}

// NewCmdImagesList builds `agent images list`.
func NewCmdImagesList(f *Factory, runF func(context.Context, *ImagesListOptions) error) *cobra.Command {
	opts := &ImagesListOptions{IO: f.IO, Engine: factoryEngine(f)}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the project's images and which are missing",
		Example: `  agent images list
  agent images list --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return imagesListRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print one JSON object on stdout")
	return cmd
}

func imagesListRun(ctx context.Context, opts *ImagesListOptions) error {
	eng, err := opts.Engine(ctx)
	if err != nil {
		return err
	}
	list, err := images.List(ctx, eng)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, struct {
			Images []images.Info `json:"images"`
		}{list})
	}
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIMAGE\tID\tSIZE\tCREATED")
	var missing []string
	for _, im := range list {
		if !im.Present {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\tmissing\n", im.Name, im.Ref)
			missing = append(missing, im.Name)
			continue
		}
		name := im.Name
		if im.Backend != "" {
			name += " (" + im.Backend + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, im.Ref, shortID(im.ID), humanBytes(im.Size), im.Created.Local().Format("2006-01-02 15:04"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(missing) > 0 {
		fmt.Fprintf(opts.IO.ErrOut, "missing: %s — build with `agent images build %s` or load a bundle with `agent images load -i FILE`\n", strings.Join(missing, ", "), buildArg(missing))
	}
	return nil
}

func buildArg(missing []string) string {
	if len(missing) == 1 {
		return missing[0]
	}
	return "all"
}

// ImagesSaveOptions are the inputs of `agent images save`.
type ImagesSaveOptions struct {
	IO     *IOStreams
	Engine func(context.Context) (images.Engine, error)

	Output string
	// Refs are images by project name or any reference; empty = every
	// present project image.
	Refs []string
	Gzip bool
	JSON bool
}

// NewCmdImagesSave builds `agent images save`.
func NewCmdImagesSave(f *Factory, runF func(context.Context, *ImagesSaveOptions) error) *cobra.Command {
	opts := &ImagesSaveOptions{IO: f.IO, Engine: factoryEngine(f)}
	cmd := &cobra.Command{
		Use:   "save -o FILE [IMAGE...]",
		Short: "Write images to an air-gapped bundle",
		Long: `Write images to a bundle file for a machine without a registry: a tar
holding a manifest (image IDs, sizes, sha256 of the image archive) and the
engine's own save stream. IMAGE is a project image name (sandbox,
llama-server, busybox) or any image reference; the default is every project
image that is present. A FILE ending in .gz or .tgz is gzip-compressed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Output == "" {
				return UsageErrorf("-o FILE is required")
			}
			if opts.Output == "-" && opts.JSON {
				return UsageErrorf("--json and -o - both want stdout: write the bundle to a file")
			}
			opts.Refs = args
			if strings.HasSuffix(opts.Output, ".gz") || strings.HasSuffix(opts.Output, ".tgz") {
				opts.Gzip = true
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return imagesSaveRun(cmd.Context(), opts)
		},
	}
	cmd.Example = `  agent images save -o agent-images.tar.gz
  agent images save -o sandbox.tar sandbox`
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "", "bundle `FILE` to write (- for stdout)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"file", "images": [refs], "size", "sha256"} as JSON`)
	cmd.Flags().BoolVar(&opts.Gzip, "gzip", false, "gzip-compress the bundle (implied by a .gz or .tgz name)")
	return cmd
}

func imagesSaveRun(ctx context.Context, opts *ImagesSaveOptions) error {
	eng, err := opts.Engine(ctx)
	if err != nil {
		return err
	}
	refs := make([]string, 0, len(opts.Refs))
	for _, r := range opts.Refs {
		if d, ok := images.Lookup(r); ok {
			r = d.Ref
		}
		refs = append(refs, r)
	}
	var w io.Writer = opts.IO.Out
	var file *os.File
	if opts.Output != "-" {
		// Write next to the destination and rename at the end, so an
		// interrupted save never leaves a truncated bundle under FILE.
		file, err = os.CreateTemp(filepath.Dir(opts.Output), ".agent-bundle-*")
		if err != nil {
			return fmt.Errorf("creating %s: %w", opts.Output, err)
		}
		defer func() {
			file.Close()
			os.Remove(file.Name())
		}()
		w = file
	}
	progress, stop := newProgress(opts.IO)
	m, err := images.Save(ctx, eng, w, refs, images.SaveOptions{
		Gzip: opts.Gzip, AgentVersion: Version, Progress: progress,
	})
	stop()
	if err != nil {
		return err
	}
	if file != nil {
		if err := file.Sync(); err != nil {
			return fmt.Errorf("writing %s: %w", opts.Output, err)
		}
		if err := file.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", opts.Output, err)
		}
		if err := os.Chmod(file.Name(), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", opts.Output, err)
		}
		if err := os.Rename(file.Name(), opts.Output); err != nil {
			return fmt.Errorf("writing %s: %w", opts.Output, err)
		}
	}
	names := make([]string, 0, len(m.Images))
	for _, im := range m.Images {
		names = append(names, im.Ref)
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"file": opts.Output, "images": names, "size": m.Archive.Size, "sha256": m.Archive.SHA256})
	}
	fmt.Fprintf(opts.IO.ErrOut, "saved %s to %s (%s)\n", strings.Join(names, ", "), opts.Output, humanBytes(m.Archive.Size))
	return nil
}

// ImagesLoadOptions are the inputs of `agent images load`.
type ImagesLoadOptions struct {
	IO     *IOStreams
	Engine func(context.Context) (images.Engine, error)
	Input  string
	JSON   bool
}

// NewCmdImagesLoad builds `agent images load`.
func NewCmdImagesLoad(f *Factory, runF func(context.Context, *ImagesLoadOptions) error) *cobra.Command {
	opts := &ImagesLoadOptions{IO: f.IO, Engine: factoryEngine(f)}
	cmd := &cobra.Command{
		Use:   "load -i FILE",
		Short: "Load images from a bundle or a docker save archive",
		Long: `Load images from a bundle written by 'agent images save' (its manifest and
checksum are verified before anything is loaded), or from a plain
'docker save' archive such as a vendor-built GPU llama-server image.
Gzip-compressed files are accepted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Input == "" {
				return UsageErrorf("-i FILE is required")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return imagesLoadRun(cmd.Context(), opts)
		},
	}
	cmd.Example = `  agent images load -i agent-images.tar.gz
  agent images load -i llama-server-cuda.tar`
	cmd.Flags().StringVarP(&opts.Input, "input", "i", "", "bundle or docker save archive `FILE` to read (- for stdin)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the loaded images as one JSON object on stdout")
	return cmd
}

func imagesLoadRun(ctx context.Context, opts *ImagesLoadOptions) error {
	var r io.Reader = opts.IO.In
	if opts.Input != "-" {
		f, err := os.Open(opts.Input)
		if err != nil {
			return fmt.Errorf("opening %s: %w", opts.Input, err)
		}
		defer f.Close()
		r = f
	}
	eng, err := opts.Engine(ctx)
	if err != nil {
		return err
	}
	progress, stop := newProgress(opts.IO)
	res, err := images.Load(ctx, eng, r, images.LoadOptions{Progress: progress})
	stop()
	if err != nil {
		return fmt.Errorf("loading %s: %w", opts.Input, err)
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"bundle": res.Bundle, "images": nonNil(res.Images)})
	}
	for _, l := range res.Images {
		fmt.Fprintf(opts.IO.ErrOut, "loaded %s\n", termtext.Line(l))
	}
	return nil
}

// shortID is the 12-character form of a container or image id.
func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func humanBytes(n int64) string {
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
