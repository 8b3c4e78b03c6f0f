package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/egress"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// TestSandboxEgressThroughProxy checks the egress path of a real sandbox
// created by Engine.Create: with Spec.EgressDir set, a proxy-aware tool
// reaches a host named by the policy (the control), and is refused one
// the policy does not name; the sandbox still has no way around the
// proxy, and every attempt is logged.
func TestSandboxEgressThroughProxy(t *testing.T) {
	e := sandboxtest.RequireDocker(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "hello from the allowed host")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	pol, err := policy.ParseEgress([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "egress.jsonl")
	px, err := egress.Start(context.Background(), egress.Config{Dir: filepath.Join(dir, "egress"), LogPath: logPath, Task: "t1", Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })

	sb := sandboxtest.New(t, e, sandbox.Spec{EgressDir: px.Dir()})
	bash := func(cmd string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]any{"command": cmd, "timeout": 30})
		r, err := sb.Tool(context.Background(), "bash", args)
		if err != nil {
			t.Fatal(err)
		}
		return r.Output
	}

	// Control: the allowed host is reached through the proxy.
	if out := bash("timeout 20 wget -q -O - http://" + addr + "/"); !strings.Contains(out, "hello from the allowed host") {
		t.Fatalf("allowed host not reached through the proxy: %q", out)
	}
	// A host the policy does not name is refused by the proxy.
	if out := bash("timeout 20 wget -q -O - http://not-allowed.invalid/ 2>&1; echo rc=$?"); strings.Contains(out, "rc=0") || !strings.Contains(out, "403") {
		t.Errorf("a host outside the allowlist was not refused with 403: %q", out)
	}
	// Bypassing the proxy goes nowhere: no route off the loopback.
	if out := bash("unset http_proxy HTTP_PROXY; timeout 20 wget -q -O - http://" + addr + "/ 2>&1; echo rc=$?"); strings.Contains(out, "hello") || strings.Contains(out, "rc=0") {
		t.Errorf("a direct connection bypassed the proxy: %q", out)
	}

	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	allowed, denied := strings.Count(string(log), `"allowed":true`), strings.Count(string(log), `"allowed":false`)
	if allowed < 1 || denied < 1 {
		t.Errorf("egress log has %d allowed and %d denied records, want at least one of each:\n%s", allowed, denied, log)
	}
}
