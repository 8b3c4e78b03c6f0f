package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/localagent/agent/policy"
)

// SocketName is the proxy's socket inside Config.Dir.
const SocketName = "proxy.sock"

// Defaults for the zero fields of Config.
const (
	DefaultDialTimeout = 10 * time.Second
	DefaultIdleTimeout = 5 * time.Minute
	DefaultMaxConns    = 64
	// DefaultMaxLogBytes caps one task's egress log; past it refused
	// attempts are only counted and allowed ones are refused (no log, no
	// connection).
	DefaultMaxLogBytes = 8 << 20
	// DefaultLogRate and DefaultLogBurst bound how fast refused attempts
	// are logged (records per second, and a burst); the rest are counted.
	DefaultLogRate  = 20
	DefaultLogBurst = 100
	// headerTimeout bounds how long a client may take to send its request
	// line and headers, so idle half-open clients cannot hold slots.
	headerTimeout = 30 * time.Second
)

// maxSocketPath is the longest unix socket path Linux accepts (sun_path is
// 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Resolver looks up the addresses of a name (net.Resolver satisfies it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc dials a checked "ip:port" address.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config configures one task's proxy. Zero values are documented per field.
type Config struct {
	// Dir is the host directory created (mode 0755) to hold the socket; the
	// sandbox bind-mounts it. Its ancestors should be private to the user
	// (the state directory): the socket itself is connectable by any uid,
	// because the sandbox's uid may differ from ours. Required.
	Dir string
	// LogPath is the JSONL file every attempt is appended to (created 0600).
	// Keep it outside Dir, which the sandbox can read. Required.
	LogPath string
	// Task is recorded in every Record.
	Task string
	// Policy decides every destination. The zero Egress denies everything.
	Policy policy.Egress
	// OnRecord, when set, receives every Record after it is logged; it must
	// be quick and safe for concurrent use.
	OnRecord func(Record)
	// Resolver resolves allowed names; nil uses net.DefaultResolver.
	Resolver Resolver
	// Dial dials checked addresses; nil uses a net.Dialer with DialTimeout.
	Dial DialFunc
	// DialTimeout bounds name resolution plus dialling; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// IdleTimeout closes a connection on which nothing moved for this long;
	// 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxConns bounds concurrent client connections; more wait to be
	// accepted. 0 means DefaultMaxConns.
	MaxConns int
	// Logger receives diagnostics (not the per-connection records); nil
	// discards them.
	Logger *slog.Logger
	// MaxLogBytes caps the log (what it held before Start counts); 0
	// means DefaultMaxLogBytes.
	MaxLogBytes int64
	// LogRate and LogBurst bound how fast refused attempts are logged; 0
	// means DefaultLogRate and DefaultLogBurst. Attempts over the rate or
	// the cap are not logged but counted, and the count is logged (a
	// Record with Dropped set) before the next record and at Close.
	LogRate  float64
	LogBurst int

	// Switches for the security tests' control runs only (see
	// export_test.go), each turning one defence off: keepMapped judges
	// resolved addresses as the resolver returned them; noTunnelGuard
	// relays a tunnel to a name without checking its SNI or Host;
	// noParserLog leaves requests the HTTP parser rejects unlogged.
	keepMapped    bool
	noTunnelGuard bool
	noParserLog   bool
}

// Record is one connection attempt, allowed or denied.
type Record struct {
	Time time.Time `json:"time"`
	Task string    `json:"task,omitempty"`
	// Method is "CONNECT" or the HTTP method of a plain proxied request.
	Method string `json:"method"`
	// Host and Port are the destination as the client asked for it.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Addr is the checked address dialled (or refused), when one was.
	Addr string `json:"addr,omitempty"`
	// Allowed is the policy's answer for the name and its addresses.
	Allowed bool `json:"allowed"`
	// Rule is the allowlist rule that matched, if any.
	Rule string `json:"rule,omitempty"`
	// Reason is why it was allowed or denied.
	Reason string `json:"reason"`
	// Error says why an allowed connection still failed (resolution, dial).
	Error string `json:"error,omitempty"`
	// Dropped, on a record of its own, counts the refused attempts just
	// before it that were not logged (over the log's rate or size cap).
	Dropped int `json:"dropped,omitempty"`
}

// Target is "host:port" as the client asked for it.
func (r Record) Target() string { return net.JoinHostPort(r.Host, strconv.Itoa(r.Port)) }

// Proxy is one task's running egress proxy.
type Proxy struct {
	cfg    Config
	socket string
	srv    *http.Server
	ln     *limitListener
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger

	logMu      sync.Mutex
	logFile    *os.File
	logBytes   int64 // size of the log file
	logLimit   *rate.Limiter
	dropped    int // refused attempts not logged since the last summary
	droppedAll int // and since Start

	mu      sync.Mutex
	closed  bool
	tunnels map[net.Conn]struct{}
	wg      sync.WaitGroup
	served  chan struct{}
	stopCtx func() bool
}

// Start creates Config.Dir and its socket and serves until Close or until
// ctx is done.
func Start(ctx context.Context, cfg Config) (*Proxy, error) {
	if cfg.Dir == "" {
		return nil, errors.New("egress proxy: no socket directory given")
	}
	if cfg.LogPath == "" {
		return nil, errors.New("egress proxy: no log file given (every connection must be logged)")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("egress proxy directory %s: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLogBytes
	}
	if cfg.LogRate <= 0 {
		cfg.LogRate = DefaultLogRate
	}
	if cfg.LogBurst <= 0 {
		cfg.LogBurst = DefaultLogBurst
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	sock := filepath.Join(dir, SocketName)
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("egress proxy socket path %s is %d bytes, longer than the %d a unix socket allows: use a shorter state directory", sock, len(sock), maxSocketPath)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("egress proxy directory: %w", err)
	}
	// 0755 whatever the umask: the sandbox's uid must be able to reach the
	// socket through the bind mount; it can write nothing here.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("egress proxy directory: %w", err)
	}
	if fi, err := os.Lstat(sock); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("egress proxy: %s exists and is not a socket; refusing to replace it", sock)
		}
		// A live socket belongs to a proxy still serving this directory:
		// replacing it would cut that one off (and its Close would later
		// unlink ours).
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("egress proxy: %s is in use by another proxy", sock)
		}
		// A socket left by a proxy that died (a killed orchestrator).
		if err := os.Remove(sock); err != nil {
			return nil, fmt.Errorf("egress proxy: removing stale socket: %w", err)
		}
	}
	lf, err := os.OpenFile(cfg.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("egress log: %w", err)
	}
	var logBytes int64
	if fi, err := lf.Stat(); err == nil {
		logBytes = fi.Size()
	}
	ul, err := net.Listen("unix", sock)
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("egress proxy: listening on %s: %w", sock, err)
	}
	// connect(2) on a unix socket needs write permission on the socket file,
	// and the sandbox runs as a uid that may not be ours.
	if err := os.Chmod(sock, 0o666); err != nil {
		ul.Close()
		lf.Close()
		return nil, fmt.Errorf("egress proxy socket: %w", err)
	}

	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Proxy{
		cfg: cfg, socket: sock, ctx: pctx, cancel: cancel, log: logger,
		logFile: lf, logBytes: logBytes, logLimit: rate.NewLimiter(rate.Limit(cfg.LogRate), cfg.LogBurst),
		tunnels: map[net.Conn]struct{}{},
		served:  make(chan struct{}),
	}
	p.ln = newLimitListener(ul, cfg.MaxConns)
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return pctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: p.connState,
	}
	go func() {
		defer close(p.served)
		if err := p.srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("egress proxy stopped", "task", cfg.Task, "err", err)
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	p.mu.Lock()
	p.stopCtx = stop
	p.mu.Unlock()
	return p, nil
}

// Socket is the host path of the proxy's unix socket.
func (p *Proxy) Socket() string { return p.socket }

// Dir is the host directory holding the socket (what the sandbox mounts).
func (p *Proxy) Dir() string { return p.cfg.Dir }

// Close stops accepting, ends every open connection and waits for their
// handlers, then closes the log. The socket file is removed. It is safe to
// call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	stop := p.stopCtx
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
	p.cancel()
	err := p.srv.Close() // the listener and every connection not hijacked
	<-p.served
	p.wg.Wait()
	p.logMu.Lock()
	if p.dropped > 0 {
		// The count is written even past the cap: one line says what the
		// log is missing.
		_ = p.writeLocked(p.dropSummaryLocked())
	}
	if cerr := p.logFile.Close(); err == nil {
		err = cerr
	}
	p.logMu.Unlock()
	return err
}

// begin registers a handler; false once the proxy is closing.
func (p *Proxy) begin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// track registers hijacked connections so Close can end them; false once
// the proxy is closing (the caller then closes them itself).
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.tunnels, c)
	}
	p.mu.Unlock()
}

// connKey carries the client connection in a request's context.
type connKey struct{}

// connState logs the requests the HTTP server rejects itself (a malformed
// request line or header, a request cut short) without calling the
// handler: every attempt is logged, not only those that parse.
func (p *Proxy) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	lc.mu.Lock()
	switch st {
	case http.StateActive:
		lc.active = true
	case http.StateIdle:
		lc.active, lc.handled, lc.head = false, false, lc.head[:0]
	case http.StateClosed:
		if lc.active && !lc.handled && len(lc.head) > 0 && !p.cfg.noParserLog {
			line, _, _ := strings.Cut(string(lc.head), "\n")
			line = strings.TrimSpace(line)
			method, _, _ := strings.Cut(line, " ")
			if len(method) > 16 || strings.TrimLeft(method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
				method = "" // not a method: the line says what it was
			}
			rec := Record{Time: time.Now(), Task: p.cfg.Task, Method: method,
				Reason: fmt.Sprintf("request rejected by the proxy's HTTP parser: %q", line)}
			lc.mu.Unlock()
			_ = p.record(rec)
			return
		}
	}
	lc.mu.Unlock()
}

// ServeHTTP handles one proxied request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if lc, ok := r.Context().Value(connKey{}).(*limitConn); ok {
		lc.mu.Lock()
		lc.handled = true
		lc.mu.Unlock()
	}
	if !p.begin() {
		http.Error(w, "egress proxy is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer p.wg.Done()
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r)
		return
	}
	p.serveHTTP(w, r)
}

func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	host, port, err := splitTarget(r.Host, 0)
	if err != nil {
		w.Header().Set("Connection", "close")
		p.badRequest(w, r, r.Host, err)
		return
	}
	up, status, rec := p.connect(r.Method, host, port)
	if up == nil {
		// Whatever the client sent behind a refused CONNECT was meant for
		// the tunnel; it must not be read as further proxy requests.
		w.Header().Set("Connection", "close")
		http.Error(w, "egress "+statusWord(status)+": "+rec.reasonText(), status)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "egress proxy: connection cannot be taken over", http.StatusInternalServerError)
		return
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		p.log.Debug("egress: hijack failed", "task", p.cfg.Task, "err", err)
		return
	}
	if !p.track(client, up) {
		client.Close()
		up.Close()
		return
	}
	defer p.untrack(client, up)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		up.Close()
		return
	}
	// Bytes the client sent right behind its CONNECT (a TLS hello) are
	// already in the server's buffer.
	var fromClient io.Reader = client
	if n := brw.Reader.Buffered(); n > 0 {
		fromClient = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), client)
	}
	if _, err := netip.ParseAddr(host); err != nil && !p.cfg.noTunnelGuard {
		// A name: what goes through must be for that name, not for another
		// virtual host at the same address.
		refuse := func(err error) { p.refuseTunnel(rec, err) }
		guarded, finish, err := guardTunnel(client, fromClient, host, port, func(err error) {
			refuse(err)
			client.Close()
			up.Close()
		})
		if err != nil {
			refuse(err)
			client.Close()
			up.Close()
			return
		}
		defer finish()
		fromClient = guarded
	}
	p.splice(client, fromClient, up)
}

// refuseTunnel logs that an allowed tunnel carried something for another
// destination than the one allowed.
func (p *Proxy) refuseTunnel(allowed Record, err error) {
	rec := allowed
	rec.Time = time.Now()
	rec.Allowed, rec.Rule = false, ""
	rec.Reason = strings.TrimPrefix(err.Error(), errRefused.Error()+": ")
	_ = p.record(rec)
}

// splice copies both ways until the destination closes, or the client has
// finished sending and the destination has answered, or nothing moved for
// IdleTimeout.
func (p *Proxy) splice(client net.Conn, fromClient io.Reader, up net.Conn) {
	closeBoth := func() { client.Close(); up.Close() }
	// Every byte either way passes through up, so its idle timer sees all
	// activity.
	iup := newIdleConn(up, p.cfg.IdleTimeout, closeBoth)
	defer iup.stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(iup, fromClient)
		closeWrite(up)
	}()
	_, _ = io.Copy(client, iup)
	closeBoth()
	<-done
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		p.badRequest(w, r, r.Host, errors.New("this is an egress proxy: send absolute http:// URLs, or CONNECT for anything else"))
		return
	}
	if r.URL.Scheme != "http" {
		p.badRequest(w, r, r.URL.Host, fmt.Errorf("scheme %q cannot be proxied as plain HTTP: use CONNECT (https_proxy)", r.URL.Scheme))
		return
	}
	host, port, err := splitTarget(r.URL.Host, 80)
	if err != nil {
		p.badRequest(w, r, r.URL.Host, err)
		return
	}
	up, status, rec := p.connect(r.Method, host, port)
	if up == nil {
		http.Error(w, "egress "+statusWord(status)+": "+rec.reasonText(), status)
		return
	}
	var once sync.Once
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The absolute URL names the destination that was checked; the
			// Host header follows it so a virtual host cannot differ from
			// what the policy saw.
			pr.Out.Host = ""
		},
		Transport: &http.Transport{
			// The one connection that was checked and dialled; any other
			// dial (a retry) is refused rather than made unchecked.
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				var c net.Conn
				once.Do(func() { c = newIdleConn(up, p.cfg.IdleTimeout, func() { up.Close() }) })
				if c == nil {
					return nil, errors.New("egress proxy: connection already used")
				}
				return c, nil
			},
			Proxy:                 nil,
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: p.cfg.IdleTimeout,
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			p.log.Debug("egress: proxied request failed", "task", p.cfg.Task, "target", rec.Target(), "err", err)
			http.Error(w, "egress: bad gateway: "+err.Error(), http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(w, r)
	up.Close() // the transport closed it already unless it never dialled
}

// badRequest logs and answers a request the proxy could not even parse.
func (p *Proxy) badRequest(w http.ResponseWriter, r *http.Request, target string, err error) {
	host, portText, serr := net.SplitHostPort(target)
	if serr != nil {
		host = target
	}
	port, _ := strconv.Atoi(portText)
	rec := Record{Time: time.Now(), Task: p.cfg.Task, Method: r.Method, Host: host, Port: port, Reason: err.Error()}
	if lerr := p.record(rec); lerr != nil {
		http.Error(w, "egress log unavailable", http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "egress bad request: "+err.Error(), http.StatusBadRequest)
}

// connect decides, resolves, re-checks and dials one destination, and logs
// the attempt. It returns the connection, or nil with the HTTP status to
// answer.
func (p *Proxy) connect(method, host string, port int) (net.Conn, int, Record) {
	rec := Record{Time: time.Now(), Task: p.cfg.Task, Method: method, Host: host, Port: port}
	fail := func(status int) (net.Conn, int, Record) {
		if err := p.record(rec); err != nil {
			return nil, http.StatusServiceUnavailable, Record{Reason: "egress log unavailable"}
		}
		return nil, status, rec
	}

	d := p.cfg.Policy.Decide(host, port)
	rec.Allowed, rec.Rule, rec.Reason = d.Allowed, d.Rule, d.Reason
	if !d.Allowed {
		return fail(http.StatusForbidden)
	}

	// The proxy's context, not the request's: a client that half-closes
	// right after its CONNECT (printf ... | nc) has not gone away, but the
	// HTTP server cancels the request context on seeing its EOF. The dial
	// is bounded by DialTimeout and by Close either way.
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		addrs = []netip.Addr{a}
	} else {
		// Only names the policy allowed are ever looked up, so a lookup
		// cannot carry data out (DNS tunnelling) to a name of the
		// sandbox's choosing.
		addrs, err = p.cfg.Resolver.LookupNetIP(ctx, "ip", strings.TrimSuffix(host, "."))
		if err != nil {
			rec.Error = "resolving " + host + ": " + err.Error()
			return fail(http.StatusBadGateway)
		}
	}
	// Re-check every address: a permitted name may resolve to the host, the
	// LAN or a metadata service (DNS rebinding). Only addresses that pass
	// are dialled; the name itself is never handed to a dialler.
	var ok []netip.Addr
	var denied policy.Decision
	for _, a := range addrs {
		// Go's resolver answers names from /etc/hosts with IPv4-mapped
		// IPv6 addresses; what is dialled is the IPv4 address, so that is
		// what is judged (a mapped address counts as non-public).
		if !p.cfg.keepMapped {
			a = a.Unmap()
		}
		ipd := p.cfg.Policy.DecideIP(a, port)
		if ipd.Allowed {
			ok = append(ok, a)
		} else if denied.Reason == "" {
			denied = ipd
			rec.Addr = netip.AddrPortFrom(a.Unmap(), uint16(port)).String()
		}
	}
	if len(ok) == 0 {
		rec.Allowed, rec.Rule = false, ""
		rec.Reason = "resolved address refused: " + denied.Reason
		if denied.Reason == "" {
			rec.Reason = "no address for " + host
		}
		return fail(http.StatusForbidden)
	}
	rec.Addr = ""
	var lastErr error
	for _, a := range ok {
		addr := netip.AddrPortFrom(a.Unmap(), uint16(port)).String()
		c, err := p.cfg.Dial(ctx, "tcp", addr)
		if err != nil {
			lastErr = err
			continue
		}
		rec.Addr = addr
		// Logged before a byte is relayed; no log, no connection.
		if err := p.record(rec); err != nil {
			c.Close()
			return nil, http.StatusServiceUnavailable, Record{Reason: "egress log unavailable"}
		}
		return c, 0, rec
	}
	rec.Error = "dialling " + host + ": " + lastErr.Error()
	return fail(http.StatusBadGateway)
}

// errLogFull refuses a connection once the task's log reached its cap.
var errLogFull = errors.New("the task's egress log is full")

// record appends rec to the log and hands it to OnRecord. An allowed
// attempt is always logged, or refused with an error when the log cannot
// take it. A refused attempt over the log's rate or size cap is only
// counted (it is refused either way); the count is logged before the next
// record that is.
func (p *Proxy) record(rec Record) error {
	p.logMu.Lock()
	var out []Record
	if !rec.Allowed && (p.logBytes >= p.cfg.MaxLogBytes || !p.logLimit.Allow()) {
		p.dropped++
		p.droppedAll++
		p.logMu.Unlock()
		return nil
	}
	if rec.Allowed && p.logBytes >= p.cfg.MaxLogBytes {
		p.logMu.Unlock()
		p.log.Error("egress: the log reached its cap; refusing the connection", "task", p.cfg.Task, "max_bytes", p.cfg.MaxLogBytes)
		return errLogFull
	}
	if p.dropped > 0 {
		sum := p.dropSummaryLocked()
		if err := p.writeLocked(sum); err != nil {
			p.logMu.Unlock()
			return err
		}
		out = append(out, sum)
	}
	err := p.writeLocked(rec)
	p.logMu.Unlock()
	if err != nil {
		p.log.Error("egress: writing the log failed; refusing the connection", "task", p.cfg.Task, "err", err)
		return err
	}
	if p.cfg.OnRecord != nil {
		for _, r := range append(out, rec) {
			p.cfg.OnRecord(r)
		}
	}
	return nil
}

// dropSummaryLocked is the record that counts the attempts not logged, and
// resets the count. p.logMu must be held.
func (p *Proxy) dropSummaryLocked() Record {
	n := p.dropped
	p.dropped = 0
	return Record{Time: time.Now(), Task: p.cfg.Task, Dropped: n,
		Reason: fmt.Sprintf("%d refused connection attempts were not logged: over the log's rate (%g/s) or size (%d bytes) cap", n, p.cfg.LogRate, p.cfg.MaxLogBytes)}
}

// writeLocked appends one JSON line; p.logMu must be held.
func (p *Proxy) writeLocked(rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	n, err := p.logFile.Write(append(b, '\n'))
	p.logBytes += int64(n)
	return err
}

// Dropped is how many refused attempts were not logged since Start (over
// the log's rate or size cap).
func (p *Proxy) Dropped() int {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.droppedAll
}

func (r Record) reasonText() string {
	if r.Error != "" {
		return r.Error
	}
	return r.Reason
}

func statusWord(status int) string {
	switch status {
	case http.StatusForbidden:
		return "denied"
	case http.StatusBadGateway:
		return "failed"
	default:
		return "unavailable"
	}
}

// splitTarget splits "host:port" (IPv6 in brackets). defaultPort applies
// when the port is absent; 0 means the port is required (CONNECT).
func splitTarget(target string, defaultPort int) (string, int, error) {
	host, portText, err := net.SplitHostPort(target)
	if err != nil {
		if defaultPort == 0 || strings.Count(target, ":") > 0 && !strings.HasSuffix(target, "]") {
			return "", 0, fmt.Errorf("destination %q must be host:port", target)
		}
		host, portText = strings.TrimSuffix(strings.TrimPrefix(target, "["), "]"), strconv.Itoa(defaultPort)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("destination %q has an invalid port", target)
	}
	if host == "" {
		return "", 0, fmt.Errorf("destination %q has no host", target)
	}
	return host, port, nil
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// idleConn calls onIdle when neither Read nor Write moved a byte for d.
type idleConn struct {
	net.Conn
	d time.Duration
	t *time.Timer
}

func newIdleConn(c net.Conn, d time.Duration, onIdle func()) *idleConn {
	return &idleConn{Conn: c, d: d, t: time.AfterFunc(d, onIdle)}
}

func (c *idleConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.t.Reset(c.d)
	}
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.t.Reset(c.d)
	}
	return n, err
}

func (c *idleConn) Close() error {
	c.t.Stop()
	return c.Conn.Close()
}

func (c *idleConn) stop() { c.t.Stop() }

// limitListener accepts at most n connections at once; more wait in the
// kernel's backlog until one closes.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()

	// What connState needs to log a request the server rejected.
	mu      sync.Mutex
	head    []byte // the first bytes of the current request
	active  bool   // bytes of a request were read
	handled bool   // the handler ran for it
}

// maxHead is how much of a rejected request is kept for the log.
const maxHead = 256

func (c *limitConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if room := maxHead - len(c.head); room > 0 {
			c.head = append(c.head, b[:min(n, room)]...)
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
