package toolbox

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// upperSocket serves a unix socket that answers each line upper-cased and
// closes after the client half-closes.
func upperSocket(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "p.sock")
	l, err := net.Listen("unix", sock)
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
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the half-close
				_, _ = c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	return sock
}

func startForward(t *testing.T, sock string) (string, context.CancelFunc, chan error) {
	t.Helper()
	ln, err := ListenForward("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Forward(ctx, ln, sock) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String(), cancel, done
}

func TestForwardRelaysWithHalfClose(t *testing.T) {
	addr, _, _ := startForward(t, upperSocket(t))
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("hello proxy\n"))
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != "HELLO PROXY\n" {
			t.Fatalf("relayed answer %q, %v; want the upper-cased line", b, err)
		}
	}
}

func TestForwardWithoutProxyClosesClient(t *testing.T) {
	addr, _, _ := startForward(t, filepath.Join(t.TempDir(), "absent.sock"))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(c).ReadByte(); err == nil {
		t.Fatal("read a byte with no proxy behind the forwarder")
	}
}

func TestForwardStopsOnCancel(t *testing.T) {
	// A proxy that holds the connection open and never answers.
	sock := filepath.Join(t.TempDir(), "hold.sock")
	l, err := net.Listen("unix", sock)
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
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	addr, cancel, done := startForward(t, sock)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("x"))
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Forward after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Forward did not return after cancel with a relay open")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("client connection still open after Forward returned")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("still listening after Forward returned")
	}
}

func TestListenForwardLoopbackOnly(t *testing.T) {
	for _, a := range []string{"0.0.0.0:3128", "[::]:3128", "localhost:3128", "3128", "10.0.0.1:3128"} {
		if l, err := ListenForward(a); err == nil {
			l.Close()
			t.Errorf("ListenForward(%q) succeeded; want a refusal", a)
		}
	}
}
