package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/policy"
)

// vhosts is an origin that tells which virtual host a request reached: the
// TLS server name it saw and the Host of each request.
type vhosts struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newVhosts(t *testing.T, useTLS bool) *vhosts {
	t.Helper()
	v := &vhosts{}
	v.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		v.mu.Lock()
		v.seen = append(v.seen, "sni="+sni+" host="+r.Host)
		v.mu.Unlock()
		fmt.Fprintf(w, "vhost sni=%s host=%s", sni, r.Host)
	}))
	v.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	if useTLS {
		v.srv.StartTLS()
	} else {
		v.srv.Start()
	}
	t.Cleanup(v.srv.Close)
	return v
}

func (v *vhosts) requests() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.seen...)
}

// tunnelRequest opens CONNECT target and sends one GET naming host, over
// TLS with server name sni when sni is not "-". It returns the body, or
// the error that ended the exchange.
func tunnelRequest(t *testing.T, f *fixture, target, sni, host string, keepAlive ...string) (string, error) {
	t.Helper()
	c, br, resp := connectTunnel(t, f, target)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("CONNECT: %s %s", resp.Status, b)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var conn io.ReadWriter = struct {
		io.Reader
		io.Writer
	}{br, c}
	if sni != "-" {
		tc := tls.Client(&rwConn{Conn: c, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		conn = tc
	}
	in := bufio.NewReader(conn)
	var out []string
	for i, h := range append([]string{host}, keepAlive...) {
		closing := ""
		if i == len(keepAlive) {
			closing = "Connection: close\r\n"
		}
		if raw, ok := strings.CutPrefix(h, "raw:"); ok {
			fmt.Fprint(conn, raw)
		} else {
			fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n%s\r\n", h, closing)
		}
		resp, err := http.ReadResponse(in, nil)
		if err != nil {
			return strings.Join(out, "|"), err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, string(b))
	}
	return strings.Join(out, "|"), nil
}

type rwConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *rwConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// After CONNECT to an allowed name, the TLS server name and every HTTP
// Host must be that name: another virtual host on the same address is
// refused (before a byte reaches it) and logged. Controls: the same
// exchanges with the check off reach the other virtual host.
func TestTunnelMustNameTheAllowedHost(t *testing.T) {
	tlsOrigin := newVhosts(t, true)
	plainOrigin := newVhosts(t, false)
	pol := policy.MustParseEgress("allowed.example")
	names := map[string][]string{"allowed.example": {"93.184.216.34"}}
	for _, tc := range []struct {
		name, origin, port, sni, host string
		more                          []string
		wantRefused                   string
	}{
		{"TLS with another SNI", "tls", "443", "other.example", "other.example", nil, `names server "other.example"`},
		{"TLS without SNI", "tls", "443", "", "allowed.example", nil, "names no server"},
		{"HTTP with another Host", "plain", "80", "-", "other.example", nil, `names host "other.example"`},
		{"HTTP, second request on the connection with another Host", "plain", "80", "-", "allowed.example", []string{"other.example"}, `names host "other.example"`},
		{"HTTP with an absolute URI naming another host", "plain", "80", "-", "raw:GET http://other.example/ HTTP/1.1\r\nHost: allowed.example\r\nConnection: close\r\n\r\n", nil, `names host "other.example"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			origin := plainOrigin
			if tc.origin == "tls" {
				origin = tlsOrigin
			}
			addr := origin.srv.Listener.Addr().String()
			before := len(origin.requests())
			f := start(t, pol, names, addr, nil)
			body, err := tunnelRequest(t, f, "allowed.example:"+tc.port, tc.sni, tc.host, tc.more...)
			if err == nil || strings.Contains(body, "other.example") {
				t.Errorf("want the tunnel refused, got %q %v", body, err)
			}
			for _, r := range origin.requests()[before:] {
				if strings.Contains(r, "other.example") || tc.origin == "tls" && strings.Contains(r, "sni= ") {
					t.Errorf("the origin served %q", r)
				}
			}
			recs := readLog(t, f.logPath)
			last := recs[len(recs)-1]
			if len(recs) < 2 || !recs[0].Allowed || last.Allowed || !strings.Contains(last.Reason, tc.wantRefused) || last.Host != "allowed.example" {
				t.Errorf("log %+v: want the CONNECT allowed, then the tunnel refused for %q", recs, tc.wantRefused)
			}

			// Control: without the check the other virtual host answers.
			f = start(t, pol, names, addr, NoTunnelGuard)
			body, err = tunnelRequest(t, f, "allowed.example:"+tc.port, tc.sni, tc.host, tc.more...)
			if err != nil || !strings.Contains(body, "other.example") && !strings.Contains(body, "sni= ") {
				t.Errorf("control: without the check the request should reach the other virtual host, got %q %v", body, err)
			}
		})
	}

	// The headers the check holds in memory are bounded.
	f := start(t, pol, names, plainOrigin.srv.Listener.Addr().String(), nil)
	huge := "raw:GET / HTTP/1.1\r\nHost: allowed.example\r\nX: " + strings.Repeat("a", 2<<20) + "\r\n\r\n"
	if body, err := tunnelRequest(t, f, "allowed.example:80", "-", huge); err == nil {
		t.Errorf("2 MiB of headers in a tunnel: %q", body)
	}
	if recs := readLog(t, f.logPath); !strings.Contains(recs[len(recs)-1].Reason, "headers over") {
		t.Errorf("log %+v", recs)
	}

	// The allowed name itself passes, over TLS and HTTP, keep-alive too.
	f = start(t, pol, names, tlsOrigin.srv.Listener.Addr().String(), nil)
	if body, err := tunnelRequest(t, f, "allowed.example:443", "Allowed.Example.", "allowed.example"); err != nil || body != "vhost sni=Allowed.Example host=allowed.example" {
		t.Errorf("TLS to the allowed name: %q %v", body, err)
	}
	f = start(t, pol, names, plainOrigin.srv.Listener.Addr().String(), nil)
	if body, err := tunnelRequest(t, f, "allowed.example:80", "-", "allowed.example:80", "ALLOWED.example"); err != nil || body != "vhost sni= host=allowed.example:80|vhost sni= host=ALLOWED.example" {
		t.Errorf("HTTP to the allowed name: %q %v", body, err)
	}
}

// On the web ports a tunnel must speak TLS or HTTP; on a port a rule names
// explicitly, other protocols (ssh here) pass unchanged.
func TestTunnelOtherProtocols(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	names := map[string][]string{"git.example": {"93.184.216.34"}}
	f := start(t, policy.MustParseEgress("git.example", "git.example:22"), names, echo.Addr().String(), nil)
	for _, tc := range []struct {
		port   string
		passes bool
	}{{"22", true}, {"443", false}} {
		c, br, resp := connectTunnel(t, f, "git.example:"+tc.port)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT :%s: %s", tc.port, resp.Status)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "SSH-2.0-OpenSSH_9.2\r\n")
		line, err := br.ReadString('\n')
		if got := err == nil && line == "SSH-2.0-OpenSSH_9.2\r\n"; got != tc.passes {
			t.Errorf("ssh banner through :%s: passed %v (%q %v), want %v", tc.port, got, line, err, tc.passes)
		}
	}
	recs := readLog(t, f.logPath)
	if last := recs[len(recs)-1]; last.Allowed || !strings.Contains(last.Reason, "neither TLS nor HTTP") {
		t.Errorf("log %+v", recs)
	}
}

// Names answered from /etc/hosts come back from Go's resolver as
// IPv4-mapped IPv6 addresses; they are judged (and dialled) as the IPv4
// address they are. Control: judged as returned, the same name is refused.
func TestMappedAddressesUnmapped(t *testing.T) {
	_, host, port := origin(t)
	names := map[string][]string{"mirror.internal": {"::ffff:93.184.216.34"}}
	target := fmt.Sprintf("mirror.internal:%d", port)
	pol := policy.MustParseEgress(target)
	redirect := fmt.Sprintf("%s:%d", host, port)

	f := start(t, pol, names, redirect, nil)
	code, body := get(t, f, "http://"+target+"/")
	_, _, dials := f.got()
	if code != http.StatusOK || !strings.Contains(body, "hello from origin") || len(dials) != 1 || dials[0] != fmt.Sprintf("93.184.216.34:%d", port) {
		t.Errorf("name resolving to a mapped public address: %d %q, dialled %v", code, body, dials)
	}

	f = start(t, pol, names, redirect, KeepMapped)
	if code, body := get(t, f, "http://"+target+"/"); code != http.StatusForbidden || !strings.Contains(body, "IPv4-mapped") {
		t.Errorf("control: judged as mapped, the address should be refused, got %d %q", code, body)
	}
}

// A request the proxy's HTTP parser rejects never reaches the handler;
// it is logged all the same. Control: without that logging it leaves no
// trace.
func TestParserRejectionsLogged(t *testing.T) {
	for _, off := range []bool{false, true} {
		var mod func(*Config)
		if off {
			mod = NoParserLog
		}
		f := start(t, policy.MustParseEgress("allowed.example"), nil, "", mod)
		for _, req := range []string{"BLAH\r\n\r\n", "CONNECT allowed.example:443 HTTP/1.1\r\nBad Header\r\n\r\n", "GET http://allowed.example/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"} {
			c, err := net.Dial("unix", f.p.Socket())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprint(c, req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%q: %v %v", req, resp, err)
			}
			c.Close()
		}
		// The server logs each one as it closes the connection (some after
		// a delay of its own).
		var recs []Record
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if recs = readLog(t, f.logPath); len(recs) >= 3 {
				break
			}
		}
		var all []string
		for _, r := range recs {
			all = append(all, r.Method+" "+r.Reason)
		}
		got := strings.Join(all, "\n")
		switch {
		case !off && (len(recs) != 3 || !strings.Contains(got, `BLAH request rejected by the proxy's HTTP parser: "BLAH"`) ||
			!strings.Contains(got, `CONNECT request rejected`) || !strings.Contains(got, `GET request rejected`)):
			t.Errorf("log %+v: want the three rejected requests (got %q)", recs, got)
		case off && len(recs) != 0:
			t.Errorf("control: log %+v, want nothing", recs)
		}
	}
}

// Refused attempts are logged at a bounded rate and the rest counted; past
// the size cap allowed connections are refused (no log, no connection).
// Control: with a high rate every attempt is logged.
func TestLogRateLimitedAndCapped(t *testing.T) {
	attempts := func(f *fixture, n int) {
		for range n {
			_, _, resp := connectTunnel(t, f, "denied.example:443")
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
		}
	}
	f := start(t, policy.MustParseEgress("allowed.example"), nil, "", func(c *Config) { c.LogRate, c.LogBurst = 0.001, 5 })
	attempts(f, 50)
	if err := f.p.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readLog(t, f.logPath)
	if len(recs) != 6 || recs[5].Dropped != 45 || f.p.Dropped() != 45 || !strings.Contains(recs[5].Reason, "not logged") {
		t.Errorf("log of 50 refused attempts at a low rate: %d records, last %+v, dropped %d", len(recs), recs[len(recs)-1], f.p.Dropped())
	}

	f = start(t, policy.MustParseEgress("allowed.example"), nil, "", nil)
	attempts(f, 50)
	if recs := readLog(t, f.logPath); len(recs) != 50 || f.p.Dropped() != 0 {
		t.Errorf("control: %d records, %d dropped; want all 50 logged", len(recs), f.p.Dropped())
	}

	_, host, port := origin(t)
	target := fmt.Sprintf("%s:%d", host, port)
	f = start(t, policy.MustParseEgress(target), nil, "", func(c *Config) { c.MaxLogBytes = 1000 })
	var codes []int
	for range 10 {
		code, _ := get(t, f, "http://"+target+"/")
		codes = append(codes, code)
	}
	if codes[0] != http.StatusOK || codes[9] != http.StatusServiceUnavailable {
		t.Errorf("allowed requests past the log's cap: %v", codes)
	}
}
