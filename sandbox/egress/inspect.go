package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// maxClientHello bounds the bytes read while looking for a TLS ClientHello
// (a post-quantum key share makes one a few KiB; a hello spread over many
// records is still far below this).
const maxClientHello = 64 << 10

// maxFirstLine bounds how far the first line of a tunnel is looked at to
// tell HTTP from other protocols.
const maxFirstLine = 8 << 10

// webPorts are the ports where a tunnel must speak TLS or HTTP: what a
// rule without a port allows. On a port a rule names explicitly (ssh, a
// database) other protocols pass as they are.
var webPorts = map[int]bool{80: true, 443: true}

// errRefused is wrapped by the errors of a tunnel whose content does not
// match the name the CONNECT was allowed for.
var errRefused = errors.New("refused")

// guardTunnel checks what the client sends into a CONNECT tunnel to the
// name host before any of it reaches the destination, so that a permitted
// name cannot be used to reach another virtual host on the same address:
//
//   - a TLS ClientHello must carry host as its server name (SNI);
//   - every plain-HTTP request must name host (Host header, or the host of
//     an absolute URI); requests are parsed and written again, so the
//     destination sees exactly what was checked, and upgrades (to a
//     protocol the proxy cannot follow) are refused;
//   - anything else passes unchanged only on a port a rule names
//     explicitly, never on the web ports 80 and 443.
//
// It returns the reader to relay to the destination. A refusal is
// returned as an error wrapping errRefused before a byte was relayed;
// later (a second HTTP request naming another host) it comes out of the
// returned reader, and onRefuse is called with it.
func guardTunnel(client net.Conn, from io.Reader, host string, port int, onRefuse func(error)) (io.Reader, func(), error) {
	budget := &budgetReader{r: from, n: -1}
	br := bufio.NewReaderSize(budget, maxFirstLine)
	_ = client.SetReadDeadline(time.Now().Add(headerTimeout))
	defer func() { _ = client.SetReadDeadline(time.Time{}) }()

	// Servers ignore empty lines before a request; so does this check.
	for {
		b, err := br.Peek(1)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: the tunnel closed before anything was sent: %v", errRefused, err)
		}
		if b[0] != '\r' && b[0] != '\n' {
			break
		}
		_, _ = br.Discard(1)
	}
	first, _ := br.Peek(1)
	switch {
	case first[0] == 0x16: // a TLS handshake record
		var raw bytes.Buffer
		sni, err := clientHelloSNI(io.TeeReader(io.LimitReader(br, maxClientHello), &raw))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: the tunnel to %s opened with a TLS record that is not a readable ClientHello: %v", errRefused, host, err)
		}
		if !sameName(sni, host) {
			if sni == "" {
				return nil, nil, fmt.Errorf("%w: the TLS ClientHello names no server (SNI); the tunnel is allowed for %s only", errRefused, host)
			}
			return nil, nil, fmt.Errorf("%w: the TLS ClientHello names server %q (SNI); the tunnel is allowed for %s only", errRefused, sni, host)
		}
		return io.MultiReader(&raw, br), func() {}, nil
	case looksLikeHTTP(br):
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			err := relayRequests(br, budget, pw, host)
			if errors.Is(err, errRefused) {
				onRefuse(err)
			}
			pw.CloseWithError(err)
		}()
		return pr, func() { pr.Close(); <-done }, nil
	case webPorts[port]:
		return nil, nil, fmt.Errorf("%w: the tunnel to %s:%d carried neither TLS nor HTTP", errRefused, host, port)
	default:
		return br, func() {}, nil
	}
}

// looksLikeHTTP reports whether the first line the client sends ends in an
// HTTP version. It waits only as long as the bytes seen could still be a
// request line: binary protocols show a control byte at once.
func looksLikeHTTP(br *bufio.Reader) bool {
	for n := 1; n <= maxFirstLine; n++ {
		b, err := br.Peek(n)
		if err != nil {
			return false
		}
		c := b[n-1]
		if c == '\n' {
			line := strings.ToUpper(strings.TrimSpace(string(b)))
			return strings.Contains(line, " HTTP/")
		}
		if c != '\r' && c != '\t' && (c < 0x20 || c > 0x7e) {
			return false
		}
	}
	return false
}

// relayRequests reads HTTP requests from br, checks that each names host,
// and writes it to w as parsed (never the raw bytes, so that the
// destination cannot read a request differently from this check).
func relayRequests(br *bufio.Reader, budget *budgetReader, w io.Writer, host string) error {
	for {
		// The request line and headers are held in memory to be checked:
		// bounded, as the proxy's own server bounds them.
		budget.n = maxRequestHeader
		req, err := http.ReadRequest(br)
		budget.n = -1
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%w: malformed HTTP request in the tunnel to %s: %v", errRefused, host, err)
		}
		name := req.Host
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		if !sameName(name, host) {
			return fmt.Errorf("%w: an HTTP request in the tunnel names host %q; the tunnel is allowed for %s only", errRefused, req.Host, host)
		}
		if req.Header.Get("Upgrade") != "" || req.Method == http.MethodConnect {
			return fmt.Errorf("%w: %s with Upgrade %q in a plain tunnel to %s cannot be checked further (use TLS)", errRefused, req.Method, req.Header.Get("Upgrade"), host)
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // Write adds none then
		}
		if err := req.Write(w); err != nil {
			return err
		}
		if req.Close {
			return nil
		}
	}
}

// maxRequestHeader bounds the request line and headers of one HTTP
// request in a tunnel (net/http's server allows 1 MiB).
const maxRequestHeader = http.DefaultMaxHeaderBytes

// budgetReader reads at most n more bytes from r when n >= 0.
type budgetReader struct {
	r io.Reader
	n int
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, fmt.Errorf("%w: HTTP request headers over %d bytes", errRefused, maxRequestHeader)
	}
	if b.n > 0 && len(p) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	if b.n > 0 {
		b.n -= n
	}
	return n, err
}

// errHelloSeen stops the TLS handshake once the ClientHello is read.
var errHelloSeen = errors.New("client hello seen")

// clientHelloSNI reads one TLS ClientHello from r with the standard
// library's parser and returns its server name.
func clientHelloSNI(r io.Reader) (string, error) {
	var hello *tls.ClientHelloInfo
	err := tls.Server(readOnlyConn{r}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errHelloSeen
		},
	}).Handshake()
	if hello == nil {
		return "", err
	}
	return hello.ServerName, nil
}

// sameName compares two host names as DNS does: without case and with one
// trailing dot ignored.
func sameName(a, b string) bool {
	a = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(a, "]"), "["), ".")
	b = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(b, "]"), "["), ".")
	return a != "" && strings.EqualFold(a, b)
}

// readOnlyConn is a net.Conn that reads from r and throws writes away: the
// TLS server's alert never reaches the client.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (readOnlyConn) Write(b []byte) (int, error)      { return len(b), nil }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return &net.UnixAddr{Net: "unix"} }
func (readOnlyConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Net: "unix"} }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
