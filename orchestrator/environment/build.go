package environment

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/egress"
	"github.com/localagent/agent/sandbox/hostfs"
)

// Image names and labels of environments.
const (
	// RepoPrefix starts the name of every environment image:
	// agent/env-<repo key>:<hash> for a repository's environment (present
	// only once its setup succeeded), agent/env-packages:<hash> for a base
	// plus Debian packages, shared by every repository that asks for them.
	RepoPrefix      = "agent/env-"
	packagesRepo    = "agent/env-packages"
	LabelEnvHash    = policy.LabelEnvHash
	LabelEnvRepo    = policy.LabelEnvRepo
	LabelEnvPackage = policy.LabelEnvPackages
	// KindBuild is the LabelKind of the short-lived package-install
	// container.
	KindBuild = "env-build"
)

// Docker is the part of the engine API the package step uses (the setup
// step runs in an ordinary sandbox).
type Docker interface {
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageTag(ctx context.Context, source, target string) error
	ImageRemove(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error)
	ContainerCreate(ctx context.Context, cfg *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig, p *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerCommit(ctx context.Context, id string, opts container.CommitOptions) (container.CommitResponse, error)
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
}

var _ Docker = (*client.Client)(nil)

// Connect opens a client for the engine named by the environment
// (DOCKER_HOST...), negotiating the API version. The caller closes it.
func Connect() (*client.Client, error) {
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return c, nil
}

// Request is one environment to make present.
type Request struct {
	Def *Definition
	// Repo is the repository's key (RepoKey) and its checkout (for labels).
	RepoKey, RepoDir string
	// Locks are the lock files' contents by name.
	Locks map[string][]byte
	// Mirror is the resolved Debian mirror (images.ResolveMirror).
	Mirror string
	// Egress is what the user allows environment setup to reach. A
	// repository cannot add to it; Def.Network entries outside it refuse
	// the build.
	Egress policy.Egress
	// Export writes the project's files (its base commit) into an empty
	// directory; setup runs there.
	Export func(ctx context.Context, dir string) error
	// Caches, Ecosystems and User: the repository's caches, which of them
	// to mount, and the sandbox user they belong to.
	Caches     Caches
	Ecosystems []string
	User       sandbox.UserChoice
	SeedGo     string
	// Sandbox is the template of the setup sandbox (toolbox, limits,
	// runtime, labels), the same as a task's.
	Sandbox sandbox.Spec
	// WorkDir holds temporary checkouts, proxy sockets and build logs.
	WorkDir string
	// Force rebuilds even when the image is present.
	Force bool
	// Bases are the images, besides the configured sandbox image and the
	// images agent built, that a repository's definition may name as its
	// base (the user's env.bases). Trusted is set when the definition is
	// the user's own (env.repos, env.default_file): its base is not checked.
	Bases   []string
	Trusted bool
	// Labels are added to images and containers (tests mark theirs).
	Labels map[string]string
	// Progress receives one line per step; nil discards.
	Progress func(string)
}

// Result is a present environment.
type Result struct {
	// Ref is the environment image of the repository.
	Ref  string `json:"ref"`
	Hash string `json:"hash"`
	// Reused is set when the image was already there.
	Reused   bool          `json:"reused"`
	Duration time.Duration `json:"duration_ns"`
	// Env and Mounts are what a task's sandbox adds: the definition's
	// variables and the dependency caches.
	Env    []string        `json:"env,omitempty"`
	Mounts []sandbox.Mount `json:"mounts,omitempty"`
}

// Builder makes environments present.
type Builder struct {
	Docker    Docker
	Sandboxes sandbox.Backend
}

// RefuseError says why a build is not even tried: the repository asked
// for network access its user has not granted.
type RefuseError struct{ Hosts []string }

func (e *RefuseError) Error() string {
	return fmt.Sprintf("the environment's setup asks for network access to %s, which your configuration does not allow; a repository cannot grant itself network access: if you trust it, add the host to env.egress in your own config (%s)", strings.Join(e.Hosts, ", "), "~/.config/agent/config.yaml")
}

// Ref is the image name of an environment.
func Ref(repoKey, hash string) string { return RepoPrefix + repoKey + ":" + hash[:16] }

func (req *Request) progress(format string, a ...any) {
	if req.Progress != nil {
		req.Progress(fmt.Sprintf(format, a...))
	}
}

// Plan computes the environment's hash and image name without building.
func (b *Builder) Plan(ctx context.Context, req *Request) (ref, hash, baseID string, err error) {
	base := req.Def.Base
	if base == "" {
		base = req.Sandbox.Image
	}
	if base == "" {
		base = sandbox.DefaultImage
	}
	bi, err := b.Docker.ImageInspect(ctx, base)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", "", "", fmt.Errorf("the environment's base image %s is not present: build it (`agent images build sandbox`) or load it (`agent images load -i FILE`); images are never pulled", base)
		}
		return "", "", "", fmt.Errorf("inspecting %s: %w", base, err)
	}
	if err := b.checkBase(ctx, req, base, bi); err != nil {
		return "", "", "", err
	}
	d := *req.Def
	d.Base = base
	hash = Hash(&d, bi.ID, req.Mirror, req.Locks)
	return Ref(req.RepoKey, hash), hash, bi.ID, nil
}

// Ensure makes the repository's environment image present: reused when an
// image of the same hash exists, else built (packages, then setup).
func (b *Builder) Ensure(ctx context.Context, req *Request) (Result, error) {
	start := time.Now()
	ref, hash, baseID, err := b.Plan(ctx, req)
	if err != nil {
		return Result{}, err
	}
	res := Result{Ref: ref, Hash: hash}
	mounts, cacheEnv, err := req.Caches.Mounts(req.Ecosystems, req.User.UID, req.User.GID, req.SeedGo)
	if err != nil {
		return res, err
	}
	res.Mounts = mounts
	res.Env = MergeEnv(cacheEnv, req.Def.EnvList())

	if !req.Force {
		if _, err := b.Docker.ImageInspect(ctx, ref); err == nil {
			res.Reused = true
			res.Duration = time.Since(start)
			req.progress("environment %s is up to date (%s)", ref, hash[:12])
			return res, nil
		}
	}
	var refused []string
	for _, h := range req.Def.Network {
		host, port := h, 443
		if hh, p, err := net.SplitHostPort(h); err == nil {
			host = hh
			fmt.Sscanf(p, "%d", &port)
		}
		if !req.Egress.Decide(host, port).Allowed {
			refused = append(refused, h)
		}
	}
	if len(refused) > 0 {
		return res, &RefuseError{Hosts: refused}
	}
	if err := os.MkdirAll(req.WorkDir, 0o700); err != nil {
		return res, err
	}
	if err := b.clearStale(ctx, req); err != nil {
		return res, err
	}

	base := req.Def.Base
	if base == "" {
		base = req.Sandbox.Image
	}
	if base == "" {
		base = sandbox.DefaultImage
	}
	img := base
	if len(req.Def.Packages) > 0 {
		img = packagesRepo + ":" + packagesHash(baseID, req.Mirror, req.Def.Packages)[:16]
		if _, err := b.Docker.ImageInspect(ctx, img); err != nil || req.Force {
			if err := b.installPackages(ctx, req, base, img); err != nil {
				return res, err
			}
		} else {
			req.progress("packages: %s is present", img)
		}
	}
	if len(req.Def.Setup) > 0 {
		if err := b.setup(ctx, req, img, res); err != nil {
			return res, err
		}
	}
	if err := b.Docker.ImageTag(ctx, img, ref); err != nil {
		return res, fmt.Errorf("tagging %s: %w", ref, err)
	}
	res.Duration = time.Since(start)
	req.progress("environment %s ready in %s", ref, res.Duration.Round(100*time.Millisecond))
	return res, nil
}

// clearStale removes what a killed build of this repository left behind:
// its containers (found by label or name) first, so that nothing can write the
// files any more, then its temporary checkouts and proxy directories
// (never following a link the setup sandbox planted). The caller holds the
// repository's build lock, so no live build owns any of it; a build is
// thus idempotent: a kill anywhere converges on the next one.
func (b *Builder) clearStale(ctx context.Context, req *Request) error {
	setups, err := b.Docker.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelEnvRepo+"="+req.RepoKey))})
	if err != nil {
		return fmt.Errorf("listing stale build containers: %w", err)
	}
	builds, err := b.Docker.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("name", "^/"+buildName(req.RepoKey)))})
	if err != nil {
		return fmt.Errorf("listing stale build containers: %w", err)
	}
	for _, c := range append(setups, builds...) {
		if err := b.Docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("removing the stale build container %s: %w", c.ID, err)
		}
	}
	entries, err := os.ReadDir(req.WorkDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "setup-") || strings.HasPrefix(e.Name(), "egress-") {
			if err := hostfs.RemoveTree(filepath.Join(req.WorkDir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildName starts the name of a repository's package-install container.
func buildName(repoKey string) string { return "agent-env-build-" + repoKey + "-" }

// mirrorRule is the egress rule that lets apt reach the mirror and nothing
// else.
func mirrorRule(mirror string) (string, error) {
	u, err := url.Parse(mirror)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("the Debian mirror %q must be an http or https URL for environment builds", mirror)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(host, port), nil
}

// installPackages installs the Debian packages on base in a container
// whose only way out is a proxy to the mirror, and commits it as img. The
// container runs as root (dpkg must write /usr) with only the capabilities
// dpkg needs, no-new-privileges and no network of its own; no repository
// code runs in it, only Debian's package scripts.
func (b *Builder) installPackages(ctx context.Context, req *Request, base, img string) error {
	rule, err := mirrorRule(req.Mirror)
	if err != nil {
		return err
	}
	// The mirror is the user's choice, and an internal one usually has a
	// private address, which the proxy refuses unless a rule names it:
	// name the addresses the host resolves it to.
	rules := []string{rule}
	if host, port, err := net.SplitHostPort(rule); err == nil {
		if addrs, err := net.DefaultResolver.LookupHost(ctx, host); err == nil {
			for _, a := range addrs {
				rules = append(rules, net.JoinHostPort(a, port))
			}
		}
	}
	pol, err := policy.ParseEgress(rules)
	if err != nil {
		return err
	}
	req.progress("packages: installing %s from %s", strings.Join(req.Def.Packages, ", "), req.Mirror)
	id := randomHex(6)
	px, err := egress.Start(ctx, egress.Config{
		Dir: filepath.Join(req.WorkDir, "egress-"+id), LogPath: filepath.Join(req.WorkDir, "egress-"+id+".jsonl"),
		Task: "env-build", Policy: pol,
	})
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	defer px.Close()

	labels := map[string]string{sandbox.LabelManaged: sandbox.ManagedValue, sandbox.LabelKind: KindBuild,
		LabelEnvPackage: strings.Join(req.Def.Packages, ",")}
	for k, v := range req.Labels {
		labels[k] = v
	}
	initOn := true
	pids := int64(1024)
	cfg := &container.Config{
		Image: base, User: "0:0", Labels: labels, Hostname: "env-build", NetworkDisabled: true,
		Entrypoint: []string{sandbox.ToolboxPath}, Cmd: []string{"idle"}, WorkingDir: "/",
	}
	hc := &container.HostConfig{
		CapDrop: []string{"ALL"},
		// What dpkg and its maintainer scripts need to unpack files owned
		// by root and system users, and nothing else.
		CapAdd:      []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"},
		SecurityOpt: []string{"no-new-privileges:true"},
		NetworkMode: "none",
		Init:        &initOn,
		IpcMode:     container.IPCModePrivate,
		Tmpfs:       map[string]string{"/tmp": "rw,nosuid,nodev,size=1g,mode=1777"},
		Resources:   container.Resources{Memory: 4 << 30, MemorySwap: 4 << 30, PidsLimit: &pids},
		Mounts:      []mount.Mount{{Type: mount.TypeBind, Source: req.Sandbox.Toolbox, Target: sandbox.ToolboxPath, ReadOnly: true}},
		LogConfig:   container.LogConfig{Type: "none"},
	}
	if err := sandbox.ApplyEgress(cfg, hc, px.Dir()); err != nil {
		return err
	}
	// The proxy variables go to each exec only, so the committed image
	// does not keep them.
	proxyEnv := slices.Clone(cfg.Env)
	cfg.Env = nil
	// Named, not labelled, by repository: the container's labels end up in
	// the committed image and so in every task sandbox made from it.
	c, err := b.Docker.ContainerCreate(ctx, cfg, hc, nil, nil, buildName(req.RepoKey)+id)
	if err != nil {
		return fmt.Errorf("creating the package container: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = b.Docker.ContainerRemove(cctx, c.ID, container.RemoveOptions{Force: true})
	}()
	if err := b.Docker.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("starting the package container: %w", err)
	}
	apt := "apt-get -q -o APT::Sandbox::User=root -o Acquire::http::Proxy=" + sandbox.EgressProxyURL +
		" -o Acquire::https::Proxy=" + sandbox.EgressProxyURL + " -o Acquire::Retries=3"
	script := strings.Join([]string{
		"set -e",
		". /etc/os-release",
		`suite="${VERSION_CODENAME:?the base image is not Debian: it has no VERSION_CODENAME}"`,
		"rm -f /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources",
		`echo "deb ` + req.Mirror + ` $suite main" > /etc/apt/sources.list`,
		apt + " update",
		apt + " install -y --no-install-recommends " + strings.Join(req.Def.Packages, " "),
		"apt-get clean",
		"rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log",
	}, "\n")
	logPath := filepath.Join(req.WorkDir, "packages-"+id+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	tail := &tailWriter{n: 25}
	code, err := b.exec(ctx, c.ID, []string{"/bin/sh", "-c", script},
		append(proxyEnv, "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"), io.MultiWriter(logf, tail, progressWriter(req)))
	logf.Close()
	if err != nil {
		return fmt.Errorf("installing packages: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("installing %s failed (exit %d); last lines:\n%s\nfull log: %s", strings.Join(req.Def.Packages, ", "), code, tail.String(), logPath)
	}
	_ = os.Remove(logPath)
	changes := []string{`CMD ["/bin/bash"]`}
	for k, v := range req.Labels {
		changes = append(changes, fmt.Sprintf("LABEL %s=%q", k, v))
	}
	if _, err := b.Docker.ContainerCommit(ctx, c.ID, container.CommitOptions{
		Reference: img, Comment: "Debian packages " + strings.Join(req.Def.Packages, " "), Changes: changes, Pause: true,
	}); err != nil {
		return fmt.Errorf("saving the package image: %w", err)
	}
	req.progress("packages: %s installed as %s", strings.Join(req.Def.Packages, ", "), img)
	return nil
}

// exec runs cmd as root in a build container and returns its exit code.
func (b *Builder) exec(ctx context.Context, id string, cmd, env []string, out io.Writer) (int, error) {
	ex, err := b.Docker.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: cmd, Env: env, User: "0:0", AttachStdout: true, AttachStderr: true, WorkingDir: "/"})
	if err != nil {
		return -1, err
	}
	att, err := b.Docker.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, err
	}
	done := make(chan error, 1)
	go func() { _, err := stdcopy.StdCopy(out, out, att.Reader); done <- err }()
	select {
	case <-ctx.Done():
		att.Close()
		return -1, ctx.Err()
	case <-done:
	}
	att.Close()
	ins, err := b.Docker.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return -1, err
	}
	return ins.ExitCode, nil
}

// setup runs the definition's setup steps in a hardened sandbox over a
// fresh export of the project, with the caches mounted and the user's
// environment egress as the only network.
func (b *Builder) setup(ctx context.Context, req *Request, img string, res Result) error {
	id := randomHex(6)
	ws := filepath.Join(req.WorkDir, "setup-"+id)
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	defer func() { _ = hostfs.RemoveTree(ws) }()
	if err := req.Export(ctx, ws); err != nil {
		return fmt.Errorf("exporting the project for setup: %w", err)
	}
	if req.User.Chown {
		if err := sandbox.HandOver(ws, req.User); err != nil {
			return err
		}
	}
	spec := req.Sandbox
	spec.Image = img
	spec.Workspace = ws
	spec.User = req.User.String()
	spec.Env = MergeEnv(spec.Env, res.Env)
	spec.Mounts = res.Mounts
	spec.Name = "agent-env-setup-" + id
	spec.Labels = map[string]string{}
	for k, v := range req.Sandbox.Labels {
		spec.Labels[k] = v
	}
	for k, v := range req.Labels {
		spec.Labels[k] = v
	}
	spec.Labels[LabelEnvRepo] = req.RepoKey
	var mu sync.Mutex
	var denied []string
	if !req.Egress.Empty() {
		px, err := egress.Start(ctx, egress.Config{
			Dir: filepath.Join(req.WorkDir, "egress-"+id), LogPath: filepath.Join(req.WorkDir, "egress-"+id+".jsonl"),
			Task: "env-setup", Policy: req.Egress,
			OnRecord: func(r egress.Record) {
				if !r.Allowed {
					mu.Lock()
					if !slices.Contains(denied, r.Target()) {
						denied = append(denied, r.Target())
					}
					mu.Unlock()
				}
			},
		})
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		defer px.Close()
		spec.EgressDir = px.Dir()
		req.progress("setup: network only through the egress proxy, to %s", req.Egress.String())
	} else {
		req.progress("setup: no network (env.egress in your config allows hosts)")
	}
	sb, err := b.Sandboxes.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("creating the setup sandbox: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sb.Remove(cctx)
	}()
	for i, step := range req.Def.Setup {
		req.progress("setup %d/%d: %s", i+1, len(req.Def.Setup), oneLine(step))
		tail := &tailWriter{n: 25}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		r, err := sb.Exec(sctx, sandbox.ExecOptions{Cmd: []string{"/bin/sh", "-c", step}, Stdout: io.MultiWriter(tail, progressWriter(req)), Stderr: io.MultiWriter(tail, progressWriter(req))})
		cancel()
		if err != nil {
			return fmt.Errorf("setup step %q: %w", oneLine(step), err)
		}
		if r.ExitCode != 0 {
			msg := fmt.Sprintf("setup step %d (%s) exited with %d; last lines:\n%s", i+1, oneLine(step), r.ExitCode, tail.String())
			mu.Lock()
			if len(denied) > 0 {
				msg += fmt.Sprintf("\nit tried to reach %s, which your configuration does not allow: add a host to env.egress in your own config if you trust it", strings.Join(denied, ", "))
			}
			mu.Unlock()
			if r.ExitCode == 127 {
				msg += "\n" + MissingNote(tail.String())
			}
			return fmt.Errorf("%s", msg)
		}
	}
	return nil
}

// oneLine makes text from a build (the repository's setup, the sandbox's
// output) one printable line: control characters become '?'.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x202e || r == 0x2066 || r == 0x2067 || r == 0x2068 {
			if r == '\n' || r == '\t' {
				return ' '
			}
			return '?'
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// tailWriter keeps the last n lines written.
type tailWriter struct {
	mu    sync.Mutex
	n     int
	lines []string
	part  string
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		t.lines = append(t.lines, l)
		if len(t.lines) > t.n {
			t.lines = t.lines[1:]
		}
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.lines)
	if t.part != "" {
		out = append(out, t.part)
	}
	for i, l := range out {
		out[i] = oneLine(l)
	}
	return strings.Join(out, "\n")
}

// progressWriter turns build output into a progress line now and then
// (apt's "Unpacking ..." / "Setting up ..." lines, and setup's output).
func progressWriter(req *Request) io.Writer {
	var last time.Time
	var buf bytes.Buffer
	return writerFunc(func(p []byte) (int, error) {
		buf.Write(p)
		for {
			line, err := buf.ReadString('\n')
			if err != nil {
				buf.WriteString(line)
				break
			}
			line = strings.TrimSpace(line)
			if line == "" || time.Since(last) < time.Second {
				continue
			}
			last = time.Now()
			req.progress("  %s", oneLine(line))
		}
		if buf.Len() > 64<<10 {
			buf.Reset()
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
