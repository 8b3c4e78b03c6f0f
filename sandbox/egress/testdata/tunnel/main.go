// Command tunnel is a client for the egress proxy's security tests, run
// inside a sandbox: it opens a CONNECT tunnel through the proxy and sends a
// request into it, naming in TLS (SNI) and in HTTP (Host) whatever host it
// is told to, the way a command would try to reach another virtual host on
// an allowed name's address.
//
//	tunnel PROXY TARGET tls|http SNI HOST
//
// It prints the response's body, or "FAILED: reason" and exits 1.
package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 6 {
		fail("usage: tunnel PROXY TARGET tls|http SNI HOST")
	}
	proxy, target, mode, sni, host := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	c, err := net.DialTimeout("tcp", proxy, 10*time.Second)
	if err != nil {
		fail(err.Error())
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		fail("CONNECT: " + err.Error())
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		fail(fmt.Sprintf("CONNECT: %s: %s", resp.Status, b))
	}
	var conn net.Conn = &bufConn{Conn: c, r: br}
	if mode == "tls" {
		tc := tls.Client(conn, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			fail("TLS handshake: " + err.Error())
		}
		conn = tc
	}
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	inner, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		fail("request through the tunnel: " + err.Error())
	}
	b, _ := io.ReadAll(inner.Body)
	fmt.Printf("%s\n", b)
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func fail(msg string) {
	fmt.Println("FAILED: " + msg)
	os.Exit(1)
}
