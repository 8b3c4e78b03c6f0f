package tests

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTaskWebFetch: web_fetch goes through the task's egress proxy: an
// allowed host's HTML page comes back as text, a host that is not allowed
// is denied as a result, and the egress log holds both.
func TestTaskWebFetch(t *testing.T) {
	c := RequireEngine(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><head><script>var hidden = 1;</script></head><body><h1>Release notes</h1><p>Version <b>2.0</b> is out.</p></body></html>")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`model: web
n_ctx: 32768
turns:
  - expect: {tools: [web_fetch]}
    tool_calls:
      - {name: web_fetch, arguments: {url: "http://%s/notes"}}
  - expect: {last_role: tool, tool_result_contains: "Version 2.0 is out."}
    tool_calls:
      - {name: web_fetch, arguments: {url: "http://not-allowed.invalid/"}}
  - expect: {last_role: tool, tool_result_contains: "denied (HTTP 403)"}
    text: "done"
`, addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	code, stdout, stderr := env.Run(repo, "task", "--repo", repo, "--llm", "script:"+script, "--approve", "keep", env.LabelFlag(), "--allow-host", addr, "read the notes")
	if code != 0 {
		t.Fatalf("agent task exited %d:\n%s\n%s", code, stdout, stderr)
	}
	task := onlyTask(t, env.StateDir)
	log, err := os.ReadFile(task.Network.EgressLog)
	if err != nil {
		t.Fatalf("egress log: %v", err)
	}
	if !strings.Contains(string(log), "not-allowed.invalid") || !strings.Contains(string(log), addr[strings.LastIndex(addr, ":")+1:]) {
		t.Errorf("egress log lacks the fetches:\n%s", log)
	}
	if task.Network.Allowed < 1 || task.Network.Denied < 1 {
		t.Errorf("task network = %+v", task.Network)
	}
}
