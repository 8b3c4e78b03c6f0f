package sandbox_test

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

// httpServer is a one-file HTTP server for the Debian sandbox image, which
// has perl but no python or busybox: it answers every request with a fixed
// body and logs each one.
const httpServer = `exec perl -MIO::Socket::INET -e '$| = 1; ` +
	`my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:18080", Listen => 5, ReuseAddr => 1) or die "listen: $!"; ` +
	`print "listening\n"; ` +
	`while (my $c = $s->accept) { my $l = <$c>; print "request: $l"; ` +
	`print $c "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello from the background\n"; close $c }'`

// httpGet fetches the server's page with bash's /dev/tcp (the image has no
// curl or wget).
const httpGet = `exec 3<>/dev/tcp/127.0.0.1/18080 && printf 'GET /x HTTP/1.0\r\n\r\n' >&3 && cat <&3`

// serverProcs lists the sandbox's processes that run the test server.
const serverProcs = `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in perl*18080*) echo "${p#/proc/} $c";; esac; done`

// A background HTTP server started with process_start answers a later bash
// call, its output is readable, process_stop ends it, and StopProcesses
// (what the orchestrator runs before its host steps) ends any left over.
func TestBackgroundHTTPServer(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sb := sandboxtest.New(t, e, sandbox.Spec{Image: sandboxtest.SandboxImage})

	r := tool(t, sb, toolbox.ToolProcessStart, map[string]any{"command": httpServer})
	if r.IsError || !strings.Contains(r.Output, "started background process p1") {
		t.Fatalf("process_start: %+v", r)
	}
	var got toolbox.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = sh(t, sb, httpGet)
		if exitCode(got) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(got.Output, "hello from the background") {
		t.Fatalf("the background server did not answer a later bash call: %+v", got)
	}
	out := tool(t, sb, toolbox.ToolProcessOutput, map[string]any{"id": "p1"})
	if !strings.Contains(out.Output, "state: running") || !strings.Contains(out.Output, "request: GET /x") {
		t.Errorf("process_output: %+v", out)
	}
	if ps := sh(t, sb, serverProcs).Output; !strings.Contains(ps, "perl") {
		t.Fatalf("server not in the container's process list:\n%s", ps)
	}
	stop := tool(t, sb, toolbox.ToolProcessStop, map[string]any{"id": "p1"})
	if stop.IsError || !strings.Contains(stop.Output, "state: stopped") {
		t.Errorf("process_stop: %+v", stop)
	}
	if ps := sh(t, sb, serverProcs).Output; strings.Contains(ps, "perl") {
		t.Errorf("server still running after process_stop:\n%s", ps)
	}
	if r := sh(t, sb, httpGet); exitCode(r) == 0 {
		t.Errorf("server still answers after process_stop: %+v", r)
	}

	// One left running is ended by StopProcesses, before teardown.
	tool(t, sb, toolbox.ToolProcessStart, map[string]any{"command": httpServer})
	time.Sleep(300 * time.Millisecond)
	if ps := sh(t, sb, serverProcs).Output; !strings.Contains(ps, "perl") {
		t.Fatalf("second server not running:\n%s", ps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n, err := sb.StopProcesses(ctx); err != nil || n != 1 {
		t.Fatalf("StopProcesses = %d, %v; want 1 stopped", n, err)
	}
	if ps := sh(t, sb, serverProcs).Output; strings.Contains(ps, "perl") {
		t.Errorf("server still running after StopProcesses:\n%s", ps)
	}
	if r := tool(t, sb, toolbox.ToolProcessOutput, map[string]any{"id": "p2"}); !regexp.MustCompile(`state: (stopped|killed)`).MatchString(r.Output) {
		t.Errorf("p2 after StopProcesses: %+v", r)
	}
}

// A Stdio command (an MCP server) streams both ways and StopProcesses ends
// it; one that already exited is not counted as stopped.
func TestStdioStoppedByStopProcesses(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	sb := sandboxtest.New(t, e, sandbox.Spec{Image: sandboxtest.SandboxImage})
	ctx := context.Background()

	gone, err := sb.StartStdio(ctx, []string{"true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("`true` did not end")
	}
	p, err := sb.StartStdio(ctx, []string{"cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stdin.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(p.Stdout, buf); err != nil || string(buf) != "hi\n" {
		t.Fatalf("read %q %v", buf, err)
	}
	n, err := sb.StopProcesses(ctx)
	if err != nil || n != 1 {
		t.Errorf("StopProcesses: %d %v, want 1 stopped", n, err)
	}
	select {
	case <-p.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("cat still running after StopProcesses")
	}
	if n, err := sb.StopProcesses(ctx); err != nil || n != 0 {
		t.Errorf("second StopProcesses: %d %v, want 0", n, err)
	}
}
