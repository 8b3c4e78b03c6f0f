package sandbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/egress"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

func TestApplyEgress(t *testing.T) {
	base := func() (*container.Config, *container.HostConfig) {
		return &container.Config{
				Entrypoint: []string{sandbox.ToolboxPath}, Cmd: []string{"idle"},
				Env: []string{"HOME=/home/agent", "HTTPS_PROXY=http://elsewhere:1", "no_proxy=*"}, NetworkDisabled: true,
			}, &container.HostConfig{
				NetworkMode: "none", ReadonlyRootfs: true,
				Mounts: []mount.Mount{{Type: mount.TypeBind, Source: "/ws", Target: "/workspace"}},
			}
	}
	cfg, hc := base()
	if err := sandbox.ApplyEgress(cfg, hc, "/state/tasks/t1/egress/"); err != nil {
		t.Fatal(err)
	}
	if hc.NetworkMode != "none" {
		t.Errorf("network mode %q; want none", hc.NetworkMode)
	}
	want := mount.Mount{Type: mount.TypeBind, Source: "/state/tasks/t1/egress", Target: sandbox.EgressDir, ReadOnly: true}
	if len(hc.Mounts) != 2 || hc.Mounts[1] != want {
		t.Errorf("mounts %+v; want the workspace and %+v", hc.Mounts, want)
	}
	wantCmd := []string{"idle", "-egress-listen", "127.0.0.1:3128", "-egress-socket", "/.agent/egress/proxy.sock"}
	if !slices.Equal(cfg.Cmd, wantCmd) {
		t.Errorf("cmd %q; want %q", cfg.Cmd, wantCmd)
	}
	for _, kv := range []string{"HOME=/home/agent", "HTTP_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "NO_PROXY=", "no_proxy="} {
		if !slices.Contains(cfg.Env, kv) {
			t.Errorf("env %q lacks %s", cfg.Env, kv)
		}
	}
	if slices.Contains(cfg.Env, "HTTPS_PROXY=http://elsewhere:1") || slices.Contains(cfg.Env, "no_proxy=*") {
		t.Errorf("env %q keeps a proxy variable that bypasses the forwarder", cfg.Env)
	}
	if !cfg.NetworkDisabled {
		t.Error("NetworkDisabled was cleared")
	}

	for name, mod := range map[string]func(*container.Config, *container.HostConfig){
		"bridge network": func(_ *container.Config, hc *container.HostConfig) { hc.NetworkMode = "bridge" },
		"host network":   func(_ *container.Config, hc *container.HostConfig) { hc.NetworkMode = "host" },
		"other cmd":      func(cfg *container.Config, _ *container.HostConfig) { cfg.Cmd = []string{"sleep"} },
		"mounted twice": func(_ *container.Config, hc *container.HostConfig) {
			hc.Mounts = append(hc.Mounts, mount.Mount{Target: sandbox.EgressDir})
		},
	} {
		cfg, hc := base()
		mod(cfg, hc)
		if err := sandbox.ApplyEgress(cfg, hc, "/x"); err == nil {
			t.Errorf("%s: ApplyEgress succeeded; want a refusal", name)
		}
	}
	cfg, hc = base()
	if err := sandbox.ApplyEgress(cfg, hc, "relative/dir"); err == nil {
		t.Error("relative socket directory accepted")
	}
}

// egressOrigin is the "allowed" destination: a test server on 127.0.0.1.
func egressOrigin(t *testing.T) (string, int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "origin-says-hello")
	}))
	t.Cleanup(srv.Close)
	host, p, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	port, _ := strconv.Atoi(p)
	return host, port
}

// (busybox 1.35 wget -T crashes with SIGSEGV, so timeouts come from timeout(1).)

// shIn runs a shell script in the sandbox as its user and returns the
// output (stdout, then stderr) and the exit code.
func shIn(t *testing.T, sb *sandbox.Sandbox, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Run(ctx, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

// waitListening waits until the toolbox forwarder accepts on the
// container's loopback (a listening socket on port 3128 = 0x0C38).
func waitListening(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	out, code := shIn(t, sb, "i=0; while [ $i -lt 50 ]; do grep -q ':0C38 00000000:0000 0A' /proc/net/tcp && exit 0; i=$((i+1)); sleep 0.1; done; exit 1")
	if code != 0 {
		t.Fatalf("forwarder never listened on 127.0.0.1:3128: %s", out)
	}
}

type egressLog struct {
	t    *testing.T
	path string
}

func (l egressLog) records() []egress.Record {
	b, err := os.ReadFile(l.path)
	if err != nil {
		l.t.Fatal(err)
	}
	var out []egress.Record
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var r egress.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			l.t.Fatalf("egress log line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// startProxy runs a proxy for pol serving dir, logging to its own file.
func startProxy(t *testing.T, dir, name string, pol policy.Egress) (*egress.Proxy, egressLog) {
	t.Helper()
	logPath := filepath.Join(filepath.Dir(dir), name+".jsonl")
	p, err := egress.Start(context.Background(), egress.Config{Dir: dir, LogPath: logPath, Task: name, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, egressLog{t: t, path: logPath}
}

// TestEgressThroughProxy is invariant 3 against the real engine: a hardened
// network-none container reaches an allowed host only through the host-side
// proxy, over the bind-mounted socket and the toolbox's forwarder; every
// other way out fails, and every attempt is logged.
func TestEgressThroughProxy(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sandboxtest.EachMode(t, e, func(t *testing.T, m *sandboxtest.Maker) {
		c := sandboxtest.Client(t)
		host, port := egressOrigin(t)
		target := net.JoinHostPort(host, strconv.Itoa(port))
		url := "http://" + target + "/"

		// The socket directory; the ancestors made by TempDir are 0700, which
		// the container never traverses (it sees only the bind mount).
		dir := filepath.Join(t.TempDir(), "egress")
		allowed, allowedLog := startProxy(t, dir, "allowed", policy.MustParseEgress(target))

		// Made by Engine.Create, so the wiring is checked against the real
		// hardened create request. Run as root, the sandbox gets NobodyUID,
		// a uid other than the proxy's.
		sb := m.New(t, sandbox.Spec{EgressDir: allowed.Dir()})
		// A sandbox with egress never comes from the pool: the socket
		// directory is the task's, so it is made fresh in either mode.
		if sb.Pool != "" {
			t.Fatalf("a sandbox with an egress socket came from the pool (%s)", sb.Pool)
		}
		uid, _, _ := strings.Cut(sb.User, ":")
		waitListening(t, sb)

		// Control: with a rule naming the server, proxy-aware wget fetches it,
		// by plain proxying and through CONNECT.
		out, code := shIn(t, sb, "id -u; timeout 20 wget -q -O - "+url)
		if code != 0 || !strings.Contains(out, "origin-says-hello") || uid == "0" || !strings.HasPrefix(out, uid+"\n") {
			t.Fatalf("allowed fetch through the proxy as uid %s: exit %d: %s", uid, code, out)
		}
		connect := fmt.Sprintf(`printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET / HTTP/1.0\r\n\r\n' | nc 127.0.0.1 3128`, target, target)
		if out, _ := shIn(t, sb, connect); !strings.Contains(out, "200 Connection established") || !strings.Contains(out, "origin-says-hello") {
			t.Fatalf("allowed CONNECT through the forwarder: %s", out)
		}

		// A host not in the allowlist: 403 with the reason, before any lookup.
		out, code = shIn(t, sb, "timeout 20 wget -q -O - http://not-allowed.invalid/ 2>&1")
		if code == 0 || !strings.Contains(out, "403") {
			t.Fatalf("fetch of a host not in the allowlist: exit %d: %s", code, out)
		}
		// A CONNECT back to the forwarder itself is loopback to the proxy.
		if out, _ := shIn(t, sb, `printf 'CONNECT 127.0.0.1:3128 HTTP/1.1\r\nHost: x\r\n\r\n' | nc 127.0.0.1 3128`); !strings.Contains(out, "403") || !strings.Contains(out, "loopback") {
			t.Fatalf("CONNECT to the forwarder's own address: %s", out)
		}

		// The mount is read-only: the sandbox cannot replace the socket.
		// (gVisor checks permissions before the mount's read-only flag, so
		// there the mount table says it.)
		if out, code := shIn(t, sb, "touch /.agent/egress/x 2>&1 || rm -f /.agent/egress/proxy.sock 2>&1; ls -l /.agent/egress/proxy.sock; grep ' /.agent/egress ' /proc/mounts"); code != 0 ||
			!strings.Contains(out, "Read-only") && (sandboxtest.Isolation(t) != sandbox.IsolationRunsc || !regexp.MustCompile(`(?m) /\.agent/egress \S+ ro[ ,]`).MatchString(out)) {
			t.Fatalf("writing the egress mount: exit %d: %s", code, out)
		}

		// Bypassing the proxy: direct connections and DNS fail closed. The
		// container has no route but loopback (no packet can leave it), and
		// the host's 127.0.0.1 is not its 127.0.0.1.
		if out, code := shIn(t, sb, "timeout 20 wget -Y off -q -O - "+url+" 2>&1"); code == 0 || strings.Contains(out, "origin-says-hello") {
			t.Fatalf("direct fetch bypassing the proxy succeeded: %s", out)
		}
		// No IPv4 route at all (the table is just its header), and every IPv6
		// route is on lo.
		if out, _ := shIn(t, sb, "tail -n +2 /proc/net/route; grep -v ' lo$' /proc/net/ipv6_route; ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
			t.Fatalf("the sandbox has interfaces or routes beyond loopback:\n%s", out)
		}
		// DNS: the resolver named in /etc/resolv.conf (the engine writes a
		// loopback one for a container with networking disabled, the host's
		// for plain network none) cannot be reached either way.
		if out, code := shIn(t, sb, "cat /etc/resolv.conf; nslookup example.com 2>&1"); code == 0 || !strings.Contains(out, "no servers could be reached") && !strings.Contains(out, "Network is unreachable") {
			t.Fatalf("DNS lookup from the sandbox: exit %d: %s", code, out)
		}
		// Control for the bypass: the same direct fetch from a container that
		// shares the host's network (the defence off) reaches the server.
		// Under gVisor the engine's runtime is registered with --network=none
		// for every container, so a container with the host's network cannot
		// be made there: that control is the runc run's.
		if sandboxtest.Isolation(t) == sandbox.IsolationRunsc {
			t.Log("control with host networking skipped: the runsc runtime gives no container a network")
		} else if out, code := sandboxtest.RunControl(t, c, &container.Config{}, &container.HostConfig{NetworkMode: "host"}, "timeout 20 wget -q -O - "+url); code != 0 || !strings.Contains(out, "origin-says-hello") {
			t.Fatalf("control: direct fetch with host networking failed (exit %d): %s", code, out)
		}

		// The same server without a rule naming it: denied. The proxy is
		// swapped under the same mounted directory, as a resumed orchestrator
		// would restart it.
		if err := allowed.Close(); err != nil {
			t.Fatal(err)
		}
		other, otherLog := startProxy(t, dir, "other", policy.MustParseEgress("only.example"))
		out, code = shIn(t, sb, "timeout 20 wget -q -O - "+url+" 2>&1")
		if code == 0 || !strings.Contains(out, "403") || strings.Contains(out, "origin-says-hello") {
			t.Fatalf("fetch of the server without its rule: exit %d: %s", code, out)
		}

		// An empty allowlist denies everything, CONNECT included.
		if err := other.Close(); err != nil {
			t.Fatal(err)
		}
		_, emptyLog := startProxy(t, dir, "empty", policy.Egress{})
		if out, code := shIn(t, sb, "timeout 20 wget -q -O - "+url+" 2>&1"); code == 0 || !strings.Contains(out, "403") {
			t.Fatalf("fetch with an empty allowlist: exit %d: %s", code, out)
		}
		if out, _ := shIn(t, sb, connect); !strings.Contains(out, "403") || !strings.Contains(out, "allowlist is empty") {
			t.Fatalf("CONNECT with an empty allowlist: %s", out)
		}

		// Every attempt is in the logs, allowed and denied.
		type want struct {
			method, host string
			allowed      bool
		}
		check := func(l egressLog, ws ...want) {
			t.Helper()
			recs := l.records()
			if len(recs) != len(ws) {
				t.Fatalf("%s: %d records; want %d: %+v", l.path, len(recs), len(ws), recs)
			}
			for i, w := range ws {
				r := recs[i]
				if r.Method != w.method || r.Host != w.host || r.Allowed != w.allowed || r.Reason == "" {
					t.Errorf("%s record %d = %+v; want %+v", l.path, i, r, w)
				}
			}
		}
		check(allowedLog,
			want{"GET", host, true}, want{"CONNECT", host, true},
			want{"GET", "not-allowed.invalid", false}, want{"CONNECT", "127.0.0.1", false})
		check(otherLog, want{"GET", host, false})
		check(emptyLog, want{"GET", host, false}, want{"CONNECT", host, false})
	})
}
