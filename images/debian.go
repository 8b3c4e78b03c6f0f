package images

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// debianImage describes an image whose root filesystem is a Debian
// minbase made by debootstrap.
type debianImage struct {
	suite    string
	packages []string
	// mustExist are paths (relative to the root) checked before import,
	// so a package that moved its files fails the build with a clear
	// message instead of producing an image that cannot start.
	mustExist []string
	// dirs are created in the root (mode 0755), e.g. mount points.
	dirs []string
	// components are the archive areas ("" = main only).
	components []string
	// mustFind are file name patterns (filepath.Match on the base name)
	// at least one file of the root must match: a backend library whose
	// directory is not fixed across package versions.
	mustFind []string
	// driverLibs are file name patterns the image must NOT contain: the
	// GPU driver's user-space libraries, which the container runtime
	// injects from the host at run time. A copy in the image would shadow
	// the host's (and never match its kernel module). Packages owning such
	// files are purged after debootstrap, then the root is checked.
	driverLibs []string
}

const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func sandboxRecipe() recipe {
	img := debianImage{
		suite:     "bookworm",
		packages:  []string{"git", "bash", "coreutils", "findutils", "grep", "ca-certificates", "procps"},
		mustExist: []string{"usr/bin/git", "bin/bash"},
		// The workspace's mount point, present in the image so the
		// engine need not create it in the container layer.
		dirs: []string{"workspace"},
	}
	return recipe{
		preflight: debootstrapPreflight,
		rootfs:    img.rootfs,
		changes:   []string{"ENV " + debianPath, "ENV LANG=C.UTF-8", `CMD ["/bin/bash"]`},
		verify:    []string{"git", "--version"},
	}
}

// llamaServerRecipe uses Debian sid: llama.cpp-tools (which ships the real
// llama-server) is packaged there and needs sid's libc, so it cannot run
// on a stable host or in a bookworm root.
func llamaServerRecipe() recipe { return llamaServerBackendRecipe(BackendCPU) }

// nvidiaDriverLibs are the libraries of NVIDIA's driver that the NVIDIA
// container runtime mounts into a container from the host.
var nvidiaDriverLibs = []string{"libcuda.so*", "libcudadebugger.so*", "libnvidia-*.so*", "libnvcuvid.so*", "libGLX_nvidia.so*", "libEGL_nvidia.so*"}

// llamaServerBackendRecipe is the llama-server image for one ggml backend.
// Debian sid packages the GPU backends as plugins at the same version as
// llama.cpp-tools: libggml0-backend-cuda (contrib, with libcublas12 and
// libcudart12 from non-free) and libggml0-backend-vulkan (main).
func llamaServerBackendRecipe(backend string) recipe {
	img := debianImage{
		suite:     "sid",
		packages:  []string{"llama.cpp-tools", "ca-certificates"},
		mustExist: []string{"usr/bin/llama-server"},
	}
	switch backend {
	case BackendCUDA:
		img.components = []string{"main", "contrib", "non-free"}
		img.packages = append(img.packages, "libggml0-backend-cuda", "libcublas12", "libcudart12")
		img.mustFind = []string{"libggml-cuda.so*"}
		img.driverLibs = nvidiaDriverLibs
	case BackendVulkan:
		// mesa-vulkan-drivers carries the AMD and Intel drivers and
		// lavapipe (Vulkan on the CPU); NVIDIA's driver comes from the host
		// through the runtime's graphics capability.
		img.packages = append(img.packages, "libggml0-backend-vulkan", "libvulkan1", "mesa-vulkan-drivers")
		img.mustFind = []string{"libggml-vulkan.so*"}
		img.driverLibs = nvidiaDriverLibs
	}
	backendEnv := "ENV AGENT_LLAMA_BACKEND=" + backend
	return recipe{
		preflight: debootstrapPreflight,
		rootfs:    img.rootfs,
		changes: []string{
			"ENV " + debianPath, "ENV LANG=C.UTF-8",
			// Runs as the image's user unless the caller says otherwise;
			// HOME=/tmp gives llama-server a writable cache location
			// under a read-only root with a tmpfs /tmp.
			"ENV HOME=/tmp",
			backendEnv,
			labelChange(LabelBackend, backend),
			`ENTRYPOINT ["/usr/bin/llama-server"]`,
			"EXPOSE 8080",
		},
		// With the ENTRYPOINT above this runs `llama-server --version`.
		verify: []string{"--version"},
	}
}

// debootstrapPreflight checks what debootstrap needs: root (it creates
// device nodes, chroots and sets file owners) and the tool itself.
func debootstrapPreflight() error {
	if os.Geteuid() != 0 {
		return errors.New("debootstrap needs root to create a Debian root filesystem: run the build as root (e.g. `sudo agent images build ...`), or load a prebuilt bundle with `agent images load -i FILE`")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return errors.New("debootstrap is not installed: install it with `apt-get install debootstrap`")
	}
	return nil
}

func (img debianImage) rootfs(ctx context.Context, b *build) (func(io.Writer) error, string, func(), error) {
	noop := func() {}
	mirror, err := ResolveMirror(b.opts.Mirror)
	if err != nil {
		return nil, "", noop, err
	}
	dir, err := os.MkdirTemp(tempDir(b.opts), "agent-image-"+b.def.Name+"-")
	if err != nil {
		return nil, "", noop, fmt.Errorf("creating a build directory: %w", err)
	}
	cleanup := func() {
		if err := removeRootfs(dir); err != nil {
			b.p.emit(Event{Image: b.def.Name, Step: "cleanup", Message: err.Error()})
		}
	}
	root := filepath.Join(dir, "rootfs")

	st := b.p.start(b.def.Name, "debootstrap", fmt.Sprintf("debootstrap %s (minbase + %s) from %s", img.suite, strings.Join(img.packages, ", "), mirror))
	if err := img.debootstrap(ctx, b, st, root, mirror); err != nil {
		return nil, "", cleanup, err
	}
	st.done("root filesystem ready")

	st = b.p.start(b.def.Name, "trim", "removing apt lists, caches and docs")
	n, err := trimRootfs(root)
	if err != nil {
		return nil, "", cleanup, err
	}
	for _, d := range img.dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, "", cleanup, fmt.Errorf("creating /%s: %w", d, err)
		}
	}
	for _, p := range img.mustExist {
		if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
			return nil, "", cleanup, fmt.Errorf("the %s root filesystem has no /%s: the Debian packages (%s) changed their layout", img.suite, p, strings.Join(img.packages, ", "))
		}
	}
	purged, err := img.checkLibs(ctx, root)
	if err != nil {
		return nil, "", cleanup, err
	}
	if len(purged) > 0 {
		st.info("removed the GPU driver's packages (the container runtime provides the host's): " + strings.Join(purged, ", "))
	}
	st.done(fmt.Sprintf("removed %d entries", n))

	info := fmt.Sprintf("debootstrap suite=%s variant=minbase include=%s mirror=%s", img.suite, strings.Join(img.packages, ","), mirror)
	if len(img.components) > 0 {
		info += " components=" + strings.Join(img.components, ",")
	}
	return func(w io.Writer) error { return writeDirTar(root, w) }, info, cleanup, nil
}

// debootstrap runs debootstrap with its output in a log file, reporting
// phase changes as progress. On failure the error carries the last lines
// of the log and the log is kept; on success it is deleted.
func (img debianImage) debootstrap(ctx context.Context, b *build, st *stepTimer, root, mirror string) error {
	logf, err := os.CreateTemp(tempDir(b.opts), "agent-image-"+b.def.Name+"-*.log")
	if err != nil {
		return fmt.Errorf("creating the build log: %w", err)
	}
	keepLog := true
	defer func() {
		logf.Close()
		if !keepLog {
			os.Remove(logf.Name())
		}
	}()

	components := "main"
	if len(img.components) > 0 {
		components = strings.Join(img.components, ",")
	}
	args := []string{
		"--variant=minbase",
		"--components=" + components,
		"--include=" + strings.Join(img.packages, ","),
		img.suite, root, mirror,
	}
	cmd := exec.CommandContext(ctx, "debootstrap", args...)
	// Own process group, and SIGTERM on cancellation: debootstrap then
	// runs its exit traps, which unmount /proc and /sys in the target,
	// and the signal reaches the dpkg and chroot children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting debootstrap: %w", err)
	}
	summary := make(chan *debootstrapSummary, 1)
	go func() { summary <- summarise(pr, logf, st) }()
	werr := cmd.Wait()
	pw.Close()
	sum := <-summary

	if ctx.Err() != nil {
		// The user stopped the build: nothing to diagnose, keep no log.
		keepLog = false
		return fmt.Errorf("debootstrap interrupted: %w", ctx.Err())
	}
	if werr != nil {
		hint := ""
		if sum.mirrorFailed {
			hint = fmt.Sprintf("\nthe mirror %s did not answer: pick a reachable Debian mirror with --mirror URL or images.mirror in the configuration", mirror)
		}
		return fmt.Errorf("debootstrap %s failed (%v); last lines:\n%s\nfull log: %s%s", img.suite, werr, strings.Join(sum.tail, "\n"), logf.Name(), hint)
	}
	keepLog = false
	st.info(fmt.Sprintf("%d packages retrieved", sum.retrieved))
	return nil
}

type debootstrapSummary struct {
	retrieved int
	tail      []string
	// mirrorFailed is set when debootstrap could not fetch the suite's
	// Release file: almost always a wrong or unreachable mirror.
	mirrorFailed bool
}

// summarise copies debootstrap's output to the log and turns it into a
// few progress lines: the phase lines ("Installing required packages...",
// "Base system installed successfully.") and errors, but not the
// hundreds of per-package lines.
func summarise(r io.Reader, log io.Writer, st *stepTimer) *debootstrapSummary {
	s := &debootstrapSummary{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	lastPhase := ""
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		s.tail = append(s.tail, line)
		if len(s.tail) > 20 {
			s.tail = s.tail[1:]
		}
		msg, isInfo := strings.CutPrefix(line, "I: ")
		switch {
		case strings.HasPrefix(line, "E: "), strings.HasPrefix(line, "W: "):
			if strings.Contains(line, "Failed getting release file") {
				s.mirrorFailed = true
			}
			st.info(line)
		case !isInfo:
		case strings.HasPrefix(msg, "Retrieving ") && !strings.HasPrefix(msg, "Retrieving InRelease") && !strings.HasPrefix(msg, "Retrieving Packages") && !strings.HasPrefix(msg, "Retrieving Release"):
			s.retrieved++
			if lastPhase != "retrieve" {
				lastPhase = "retrieve"
				st.info("retrieving packages")
			}
		case strings.HasSuffix(msg, "...") && strings.Contains(msg, "packages") ||
			strings.Contains(msg, "base system") || strings.HasPrefix(msg, "Base system") ||
			strings.HasPrefix(msg, "Valid Release signature"):
			lastPhase = msg
			st.info(strings.TrimSuffix(msg, "..."))
		}
	}
	_, _ = io.Copy(io.Discard, r)
	return s
}

// checkLibs purges the packages that brought GPU driver libraries into the
// root (a dependency like "libcuda1 | libcuda.so.1" is resolved by
// installing the driver's package), then fails if any driver library is
// still there or no backend library is.
func (img debianImage) checkLibs(ctx context.Context, root string) (purged []string, err error) {
	if len(img.driverLibs) == 0 && len(img.mustFind) == 0 {
		return nil, nil
	}
	driver, found, err := findLibs(root, img.driverLibs, img.mustFind)
	if err != nil {
		return nil, err
	}
	if len(driver) > 0 {
		pkgs, err := owningPackages(ctx, root, driver)
		if err != nil {
			return nil, err
		}
		if len(pkgs) > 0 {
			// --force-depends: the backend "depends" on the driver library,
			// which the runtime provides at run time.
			args := append([]string{root, "dpkg", "--purge", "--force-depends"}, pkgs...)
			if out, err := exec.CommandContext(ctx, "chroot", args...).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("removing the driver packages %s from the image: %v\n%s", strings.Join(pkgs, ", "), err, out)
			}
			purged = pkgs
		}
		if driver, found, err = findLibs(root, img.driverLibs, img.mustFind); err != nil {
			return purged, err
		}
		if len(driver) > 0 {
			return purged, fmt.Errorf("the image would ship GPU driver libraries that must come from the host: %s", strings.Join(driver, ", "))
		}
	}
	if len(img.mustFind) > 0 && len(found) == 0 {
		return purged, fmt.Errorf("the %s root filesystem has no file named %s: the Debian packages (%s) changed their layout", img.suite, strings.Join(img.mustFind, " or "), strings.Join(img.packages, ", "))
	}
	return purged, nil
}

// findLibs walks root (never following links) for files whose base name
// matches one of bad or want; it returns the paths below root.
func findLibs(root string, bad, want []string) (badFound, wantFound []string, err error) {
	match := func(pats []string, name string) bool {
		for _, p := range pats {
			if ok, _ := filepath.Match(p, name); ok {
				return true
			}
		}
		return false
	}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if top, _, _ := strings.Cut(rel, "/"); top == "proc" || top == "sys" || top == "dev" {
				return filepath.SkipDir
			}
			return nil
		}
		switch name := d.Name(); {
		case match(bad, name):
			badFound = append(badFound, "/"+rel)
		case match(want, name):
			wantFound = append(wantFound, "/"+rel)
		}
		return nil
	})
	return badFound, wantFound, err
}

// owningPackages asks the root's dpkg which packages own files.
func owningPackages(ctx context.Context, root string, files []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		res, err := exec.CommandContext(ctx, "chroot", root, "dpkg-query", "-S", f).Output()
		if err != nil {
			continue // not owned by a package (a link made by a maintainer script)
		}
		for _, line := range strings.Split(string(res), "\n") {
			pkgs, _, ok := strings.Cut(line, ": ")
			if !ok {
				continue
			}
			for _, p := range strings.Split(pkgs, ", ") {
				if p = strings.TrimSpace(p); p != "" && !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
			}
		}
	}
	return out, nil
}
