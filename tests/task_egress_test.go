package tests

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
)

// egressScript has the model fetch the allowed host into a file and try a
// host that is not allowed, then finish. The first request must tell the
// model what network it has (network, as the system prompt words it).
func egressScript(addr, network string) string {
	return fmt.Sprintf(`model: egress
turns:
  - expect: {system_contains: "Network: %s"}
    tool_calls:
      - {name: bash, arguments: {command: "timeout 20 wget -q -O fetched.txt http://%s/ ; echo allowed-rc=$?"}}
  - tool_calls:
      - {name: bash, arguments: {command: "timeout 20 wget -q -O - http://not-allowed.invalid/ 2>&1; echo denied-rc=$?"}}
  - text: "done"
`, network, addr)
}

// TestTaskEgress runs a whole task whose sandbox may reach one host, named
// with --allow-host: the allowed fetch lands in the task's commit, the
// denied host gets 403, and the task record and egress log count both.
// Control: the same task without --allow-host has no network at all, so
// the fetch fails and nothing is recorded as allowed.
func TestTaskEgress(t *testing.T) {
	c := RequireEngine(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "served to the sandbox\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	run := func(allow bool) (string, *store.Task) {
		network := "none (offline)"
		if allow {
			network = "restricted by policy"
		}
		script := filepath.Join(t.TempDir(), "script.yaml")
		if err := os.WriteFile(script, []byte(egressScript(addr, network)), 0o644); err != nil {
			t.Fatal(err)
		}
		env := NewAgentEnv(t, c)
		repo := NewSampleRepo(t)
		args := []string{"task", "--repo", repo, "--llm", "script:" + script, "--approve", "keep", env.LabelFlag()}
		if allow {
			args = append(args, "--allow-host", addr)
		}
		code, stdout, stderr := env.Run(repo, append(args, "fetch the page")...)
		if code != 0 {
			t.Fatalf("agent task (allow=%v) exited %d:\n%s", allow, code, stderr)
		}
		return stdout + stderr, onlyTask(t, env.StateDir)
	}

	out, task := run(true)
	if len(task.Network.Allow) != 1 || task.Network.Allowed < 1 || task.Network.Denied < 1 {
		t.Errorf("task record network = %+v, want one rule, >=1 allowed, >=1 denied", task.Network)
	}
	log, err := os.ReadFile(task.Network.EgressLog)
	if err != nil {
		t.Fatalf("egress log: %v", err)
	}
	if !strings.Contains(string(log), "not-allowed.invalid") || !strings.Contains(string(log), addr[strings.LastIndex(addr, ":")+1:]) {
		t.Errorf("egress log lacks the attempts:\n%s", log)
	}
	if got := Git(t, task.Repo, "show", task.Branch+":fetched.txt"); !strings.Contains(got, "served to the sandbox") {
		t.Errorf("the allowed fetch did not reach the commit: %q", got)
	}
	if !strings.Contains(out, "Network: allowed to "+addr) {
		t.Errorf("review summary does not show the network use:\n%s", out)
	}

	// Control: no --allow-host, no network.
	out, task = run(false)
	if len(task.Network.Allow) != 0 || task.Network.Allowed != 0 {
		t.Errorf("without --allow-host the record shows network use: %+v", task.Network)
	}
	if _, err := GitErr(task.Repo, "show", task.Branch+":fetched.txt"); err == nil {
		if out := Git(t, task.Repo, "show", task.Branch+":fetched.txt"); strings.Contains(out, "served") {
			t.Errorf("without --allow-host the sandbox fetched the page")
		}
	}
	if !strings.Contains(out, "Network: none") {
		t.Errorf("review summary does not say the sandbox had no network:\n%s", out)
	}
}
