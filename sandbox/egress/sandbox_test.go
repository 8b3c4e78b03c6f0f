package egress_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/egress"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// hostsFile answers like Go's resolver does for a name in /etc/hosts: an
// IPv4-mapped IPv6 address.
type hostsFile map[string]string

func (h hostsFile) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// The egress attacks of a command in a sandbox, through the real
// forwarder and proxy: over a tunnel to an allowed name (a mirror named in
// /etc/hosts, as air-gapped sites do), another virtual host at the same
// address by TLS SNI or by HTTP Host; and a request the proxy's HTTP
// parser rejects. With the defences, the allowed name works, the other
// virtual host is never reached, and every attempt is in the log. The
// controls turn each defence off: the /etc/hosts name is refused, the
// other virtual host answers, the malformed request leaves no trace.
func TestEgressAttacksFromSandbox(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni := "-"
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		fmt.Fprintf(w, "vhost sni=%s host=%s", sni, r.Host)
	}))
	origin.Config.ErrorLog = log.New(io.Discard, "", 0)
	origin.StartTLS()
	t.Cleanup(origin.Close)
	plain := httptest.NewServer(origin.Config.Handler)
	t.Cleanup(plain.Close)

	ws := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(ws, "tunnel"), "./testdata/tunnel")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-buildvcs=false")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the tunnel probe: %v\n%s", err, b)
	}
	dir := filepath.Join(t.TempDir(), "egress")
	// The mirror's name and a public address for it; every dial goes to
	// the local test servers instead (by port), so nothing leaves the host.
	pol := policy.MustParseEgress("mirror.internal")
	var current *egress.Proxy
	startProxy := func(name string, mods ...func(*egress.Config)) string {
		if current != nil {
			// One proxy serves the mounted directory at a time, as a
			// resumed orchestrator restarts it.
			if err := current.Close(); err != nil {
				t.Fatal(err)
			}
		}
		logPath := filepath.Join(filepath.Dir(dir), name+".jsonl")
		cfg := egress.Config{
			Dir: dir, LogPath: logPath, Task: name, Policy: pol,
			Resolver: hostsFile{"mirror.internal": "::ffff:93.184.216.34"},
			Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				to := plain.Listener.Addr().String()
				if strings.HasSuffix(addr, ":443") {
					to = origin.Listener.Addr().String()
				}
				var d net.Dialer
				return d.DialContext(ctx, network, to)
			},
		}
		for _, m := range mods {
			m(&cfg)
		}
		p, err := egress.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		current = p
		return logPath
	}
	logPath := startProxy("guarded")
	sb := sandboxtest.New(t, e, sandbox.Spec{Workspace: ws, EgressDir: dir})
	run := func(args string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := sb.Run(ctx, "/bin/sh", "-c", args)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout) + string(res.Stderr)
	}
	// (The forwarder listens once the container's init is up.)
	run("i=0; while [ $i -lt 50 ] && ! grep -q ':0C38 00000000:0000 0A' /proc/net/tcp; do i=$((i+1)); sleep 0.1; done")
	const proxy = "127.0.0.1:3128"
	attacks := map[string]string{
		"sni":  "/workspace/tunnel " + proxy + " mirror.internal:443 tls other.internal mirror.internal",
		"host": "/workspace/tunnel " + proxy + " mirror.internal:80 http - other.internal",
		"bad":  `printf 'GET http://mirror.internal/ HTTP/1.1\r\nNo-Colon-Here\r\n\r\n' | nc ` + strings.Replace(proxy, ":", " ", 1),
	}

	if out := run("/workspace/tunnel " + proxy + " mirror.internal:443 tls mirror.internal mirror.internal"); !strings.Contains(out, "vhost sni=mirror.internal host=mirror.internal") {
		t.Errorf("TLS to the allowed /etc/hosts name: %s", out)
	}
	if out := run(attacks["sni"]); !strings.Contains(out, "FAILED") || strings.Contains(out, "other.internal") {
		t.Errorf("TLS to another virtual host: %s", out)
	}
	if out := run(attacks["host"]); !strings.Contains(out, "FAILED") || strings.Contains(out, "vhost") {
		t.Errorf("HTTP to another virtual host: %s", out)
	}
	if out := run(attacks["bad"]); !strings.Contains(out, "400 Bad Request") {
		t.Errorf("malformed request: %s", out)
	}
	var reasons []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		reasons = logReasons(t, logPath)
		if len(reasons) >= 6 {
			break
		}
	}
	got := strings.Join(reasons, "\n")
	for _, want := range []string{`names server "other.internal"`, `names host "other.internal"`, `HTTP parser: "GET http://mirror.internal/ HTTP/1.1"`} {
		if !strings.Contains(got, want) {
			t.Errorf("egress log lacks %q:\n%s", want, got)
		}
	}

	// Controls, each with one defence off, under the same mounted directory.
	for _, c := range []struct {
		name, attack, want string
		off                func(*egress.Config)
	}{
		{"mapped", "/workspace/tunnel " + proxy + " mirror.internal:443 tls mirror.internal mirror.internal", "IPv4-mapped", egress.KeepMapped},
		{"sni", attacks["sni"], "vhost sni=other.internal", egress.NoTunnelGuard},
		{"host", attacks["host"], "vhost sni=- host=other.internal", egress.NoTunnelGuard},
	} {
		startProxy("control-"+c.name, c.off)
		if out := run(c.attack); !strings.Contains(out, c.want) {
			t.Errorf("control %s: want %q, got %s", c.name, c.want, out)
		}
	}
	badLog := startProxy("control-bad", egress.NoParserLog)
	run(attacks["bad"])
	time.Sleep(time.Second) // the server may log a rejection after a delay
	if r := logReasons(t, badLog); len(r) != 0 {
		t.Errorf("control bad: log %q, want nothing", r)
	}
}

func logReasons(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r egress.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, fmt.Sprintf("%s %s:%d allowed=%v %s", r.Method, r.Host, r.Port, r.Allowed, r.Reason))
	}
	return out
}

// A shell loop of refused attempts cannot fill the host's disk: the log
// takes at most LogBurst records at once, counts the rest, and says how
// many it dropped. Control: with a rate high enough, the same loop logs
// every attempt.
func TestEgressLogBoundedFromSandbox(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	dir := filepath.Join(t.TempDir(), "egress")
	start := func(name string, rate float64) (*egress.Proxy, string) {
		logPath := filepath.Join(filepath.Dir(dir), name+".jsonl")
		p, err := egress.Start(context.Background(), egress.Config{
			Dir: dir, LogPath: logPath, Task: name, Policy: policy.MustParseEgress("allowed.example"),
			LogRate: rate, LogBurst: 10,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p, logPath
	}
	p, logPath := start("bounded", 0.01)
	sb := sandboxtest.New(t, e, sandbox.Spec{EgressDir: dir})
	loop := `i=0; while [ $i -lt 200 ] && ! grep -q ':0C38 00000000:0000 0A' /proc/net/tcp; do i=$((i+1)); sleep 0.05; done; ` +
		`i=0; while [ $i -lt 300 ]; do printf 'CONNECT denied.example:443 HTTP/1.1\r\nHost: x\r\n\r\n' | nc 127.0.0.1 3128 >/dev/null; i=$((i+1)); done; echo LOOP-DONE`
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := sb.Run(ctx, "/bin/sh", "-c", loop)
		if err != nil || !strings.Contains(string(res.Stdout), "LOOP-DONE") {
			t.Fatalf("attempt loop: %v %s %s", err, res.Stdout, res.Stderr)
		}
	}
	run()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	reasons := logReasons(t, logPath)
	fi, _ := os.Stat(logPath)
	t.Logf("300 refused attempts: %d records, %d bytes, %d dropped", len(reasons), fi.Size(), p.Dropped())
	if len(reasons) > 12 || p.Dropped() < 288 || !strings.Contains(reasons[len(reasons)-1], "were not logged") {
		t.Errorf("log of 300 refused attempts: %d records (last %q), %d dropped", len(reasons), reasons[len(reasons)-1], p.Dropped())
	}

	p, logPath = start("control", 1e6)
	run()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(logReasons(t, logPath)); n != 300 || p.Dropped() != 0 {
		t.Errorf("control: %d records, %d dropped; want all 300 logged", n, p.Dropped())
	}
}
