package toolbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Egress forwarding: a sandbox has no network but its loopback. When its
// policy allows egress, the toolbox's idle process listens on the
// container's 127.0.0.1 (where HTTP_PROXY points commands) and relays every
// connection, byte for byte, to the host-side proxy's unix socket, which is
// bind-mounted into the container. All policy lives in that proxy; the
// forwarder decides nothing, so nothing in the container can change what is
// allowed.

// MaxForwardConns bounds the connections relayed at once; more wait to be
// accepted. The host-side proxy has its own, smaller, bound.
const MaxForwardConns = 256

// forwardDialTimeout bounds connecting to the proxy's socket.
const forwardDialTimeout = 5 * time.Second

// ListenForward listens on addr, which must be a loopback address with a
// port ("127.0.0.1:3128", "[::1]:3128"): the relay must never be reachable
// from anywhere but inside the container.
func ListenForward(addr string) (net.Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("forward listen address %q must be IP:port, e.g. 127.0.0.1:3128", addr)
	}
	if !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("forward listen address %s is not a loopback address", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return l, nil
}

// Forward relays every connection accepted on ln to the unix socket at
// socket until ctx is done, then closes ln, ends the relays in progress and
// waits for them. A connection that cannot reach the socket is closed (the
// client sees the proxy go away, never a direct route). It returns nil when
// ctx ended it, or the listener's error.
func Forward(ctx context.Context, ln net.Listener, socket string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	track := func(c net.Conn, on bool) {
		mu.Lock()
		if on {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()

	slots := make(chan struct{}, MaxForwardConns)
	var backoff time.Duration
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c, err := ln.Accept()
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors for a moment: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return nil
				}
				continue
			}
			return fmt.Errorf("forward: accepting: %w", err)
		}
		backoff = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			track(c, true)
			defer track(c, false)
			relay(ctx, c, socket)
		}()
	}
}

// relay copies between one client connection and a new connection to the
// socket, passing each side's end of input on as a half-close.
func relay(ctx context.Context, c net.Conn, socket string) {
	defer c.Close()
	d := net.Dialer{Timeout: forwardDialTimeout}
	u, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return
	}
	defer u.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); u.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(u, c)
		halfClose(u)
	}()
	_, _ = io.Copy(c, u)
	// The proxy ended the connection (it never half-closes toward the
	// client): end it here too, so an idle client cannot hold a slot.
	c.Close()
	<-done
}

func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
