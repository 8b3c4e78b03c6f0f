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
func llamaServerRecipe() recipe {
	img := debianImage{
		suite:     "sid",
		packages:  []string{"llama.cpp-tools", "ca-certificates"},
		mustExist: []string{"usr/bin/llama-server"},
	}
	return recipe{
		preflight: debootstrapPreflight,
		rootfs:    img.rootfs,
		changes: []string{
			"ENV " + debianPath, "ENV LANG=C.UTF-8",
			// Runs as the image's user unless the caller says otherwise;
			// HOME=/tmp gives llama-server a writable cache location
			// under a read-only root with a tmpfs /tmp.
			"ENV HOME=/tmp",
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
	st.done(fmt.Sprintf("removed %d entries", n))

	info := fmt.Sprintf("debootstrap suite=%s variant=minbase include=%s mirror=%s", img.suite, strings.Join(img.packages, ","), mirror)
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

	args := []string{
		"--variant=minbase",
		"--components=main",
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
