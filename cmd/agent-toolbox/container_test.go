package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox/toolbox"
)

// These tests run the built binary inside real containers through the
// docker CLI, hardened as the sandbox hardens them: an unprivileged uid, a
// read-only root, no capabilities, no network, pids and memory limits.

const testImage = "agent/busybox:latest"

// testLabels are the project's labels plus one unique per test, so cleanup
// removes exactly what this test made.
func testLabels(t *testing.T) (args []string, value string) {
	value = fmt.Sprintf("toolbox-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	return []string{
		"--label", policy.LabelManaged + "=" + policy.ManagedValue,
		"--label", policy.LabelKind + "=test",
		"--label", policy.LabelTest + "=" + value,
	}, value
}

func docker(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("docker", args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func needDocker(t *testing.T, image string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Docker engine; skipped with -short")
	}
	if _, err := docker(t, nil, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		t.Fatalf("image %s is needed (build it with `agent images build`): %v", image, err)
	}
}

// hardenedSandbox starts an idle container like the sandbox package does
// and returns its id and the host workspace directory.
func hardenedSandbox(t *testing.T, extra ...string) (string, string) {
	t.Helper()
	needDocker(t, testImage)
	bin := buildBinary(t)
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	labels, _ := testLabels(t)
	args := append([]string{"run", "-d", "--init", "--read-only", "--tmpfs", "/tmp",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--network", "none",
		"--pids-limit", "64", "--memory", "64m", "--memory-swap", "64m", "--user", "4242:4242",
		"-v", bin + ":/.agent/toolbox:ro", "-v", ws + ":/workspace"}, labels...)
	args = append(args, extra...)
	args = append(args, testImage, "/.agent/toolbox", "idle")
	out, err := docker(t, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() {
		if _, err := docker(t, nil, "rm", "-f", id); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return id, ws
}

type containerSession struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
	cmd *exec.Cmd
	id  uint64
}

func openSession(t *testing.T, container string) *containerSession {
	t.Helper()
	cmd := exec.Command("docker", "exec", "-i", container, "/.agent/toolbox", "serve")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 8<<20)
	return &containerSession{t: t, in: in, out: sc, cmd: cmd}
}

// send sends one request without waiting and returns its id.
func (cs *containerSession) send(tool string, args string) uint64 {
	cs.t.Helper()
	cs.id++
	if args == "" {
		args = "{}"
	}
	if _, err := fmt.Fprintf(cs.in, `{"id":%d,"tool":%q,"args":%s}`+"\n", cs.id, tool, args); err != nil {
		cs.t.Fatal(err)
	}
	return cs.id
}

func (cs *containerSession) recv() toolbox.Response {
	cs.t.Helper()
	if !cs.out.Scan() {
		cs.t.Fatalf("session ended: %v", cs.out.Err())
	}
	var r toolbox.Response
	if err := json.Unmarshal(cs.out.Bytes(), &r); err != nil {
		cs.t.Fatalf("frame %q: %v", cs.out.Text(), err)
	}
	return r
}

// do sends one request and waits for its response.
func (cs *containerSession) do(tool string, args string) toolbox.Response {
	cs.t.Helper()
	id := cs.send(tool, args)
	r := cs.recv()
	if r.ID != id {
		cs.t.Fatalf("response id %d, want %d", r.ID, id)
	}
	return r
}

func want(t *testing.T, r toolbox.Response, isError bool, subs ...string) {
	t.Helper()
	if r.IsError != isError {
		t.Errorf("IsError = %v, want %v: %s", r.IsError, isError, r.Output)
	}
	for _, s := range subs {
		if !strings.Contains(r.Output, s) {
			t.Errorf("output lacks %q:\n%s", s, r.Output)
		}
	}
}

func TestSessionInHardenedContainer(t *testing.T) {
	id, ws := hardenedSandbox(t)
	s := openSession(t, id)

	want(t, s.do("ping", ""), false, "pong")
	want(t, s.do("write_file", `{"path":"src/a.txt","content":"one\ntwo\n"}`), false, "Created src/a.txt")
	if st, err := os.Stat(filepath.Join(ws, "src", "a.txt")); err != nil {
		t.Fatal(err)
	} else if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 4242 {
		t.Errorf("written file is owned by uid %d, want the sandbox user 4242", sys.Uid)
	}
	want(t, s.do("read_file", `{"path":"src/a.txt","offset":2}`), false, "     2\ttwo\n")
	want(t, s.do("edit_file", `{"path":"src/a.txt","old_string":"two","new_string":"2"}`), false, "replaced 1 occurrence")
	want(t, s.do("grep", `{"pattern":"^2$"}`), false, "src/a.txt:2:2")
	want(t, s.do("read_file", `{"path":"/etc/passwd"}`), true, "outside the workspace /workspace")
	want(t, s.do("bash", `{"command":"id -u; touch /x"}`), true, "4242\n", "Read-only file system")

	// A timed-out command returns at the deadline and leaves nothing.
	start := time.Now()
	r := s.do("bash", `{"command":"sleep 1000 & setsid sleep 1001 & sleep 1002","timeout":1}`)
	// Without the kill it would wait for the sleeps; the bound only leaves
	// room for a loaded machine.
	if d := time.Since(start); !r.TimedOut || d > 5*time.Second {
		t.Errorf("timeout: TimedOut=%v after %v", r.TimedOut, d)
	}
	ps := s.do("bash", `{"command":"ps -o pid,comm,args"}`)
	if strings.Contains(ps.Output, "sleep") {
		t.Errorf("processes left after the timeout:\n%s", ps.Output)
	}
	t.Logf("timeout=1 returned after %v", time.Since(start))

	// Commands get SIGPIPE's default action: a pipeline whose reader
	// exits ends at once instead of spinning until its timeout (the
	// toolbox must not pass an ignored SIGPIPE on to its children).
	start = time.Now()
	r = s.do("bash", `{"command":"yes | head -c 5; echo; grep SigIgn /proc/self/status","timeout":10}`)
	if r.TimedOut || time.Since(start) > 5*time.Second || !strings.HasPrefix(r.Output, "y\ny\ny") {
		t.Errorf("yes | head: timed out %v after %v: %q", r.TimedOut, time.Since(start), r.Output)
	}
	if ign := sigIgnMask(t, r.Output); ign&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Errorf("commands run with SIGPIPE ignored (SigIgn %x)", ign)
	}

	// Output is capped with a marker.
	r = s.do("bash", `{"command":"yes","timeout":1}`)
	if !r.Truncated || !strings.Contains(r.Output, "bytes of output omitted") || len(r.Output) > 300<<10 {
		t.Errorf("yes: Truncated=%v, %d bytes", r.Truncated, len(r.Output))
	}

	// A memory bomb is reported as an OOM kill.
	r = s.do("bash", `{"command":"s=xxxxxxxxxxxxxxxx; while :; do s=$s$s; done","timeout":60}`)
	if !r.OOMKilled || !strings.Contains(r.Output, "out-of-memory") {
		t.Errorf("memory bomb: %+v", r)
	}

	// A fork bomb hits the pids limit. Requests sent while it rages are
	// all answered (the toolbox needs no new thread or process for them),
	// and the session stays usable afterwards.
	bomb := s.send("bash", `{"command":"f() { f | f & }; f; sleep 2","timeout":5}`)
	time.Sleep(500 * time.Millisecond)
	const during = 30
	for i := range during {
		if i%2 == 0 {
			s.send("read_file", `{"path":"src/a.txt"}`)
		} else {
			s.send("grep", `{"pattern":"one"}`)
		}
	}
	s.send("bash", `{"command":"echo during"}`)
	for range during + 2 {
		r := s.recv()
		switch {
		case r.ID == bomb:
			if r.ExitCode != nil {
				t.Logf("fork bomb: exit %d, timed out %v, %d bytes of output", *r.ExitCode, r.TimedOut, len(r.Output))
			}
		case r.ID == bomb+during+1:
			t.Logf("bash during the bomb: %s", r.Output)
		case r.IsError:
			t.Errorf("file tool failed during the fork bomb: %s", r.Output)
		}
	}
	want(t, s.do("ping", ""), false, "pong")
	after := s.do("bash", `{"command":"echo alive; ps -o pid,comm | wc -l"}`)
	want(t, after, false, "alive")
	t.Logf("after the fork bomb: %s", strings.ReplaceAll(after.Output, "\n", " "))
}

func TestCallAndIdleInHardenedContainer(t *testing.T) {
	id, _ := hardenedSandbox(t)
	out, err := docker(t, strings.NewReader(`{"id":3,"tool":"list_dir","args":{}}`), "exec", "-i", id, "/.agent/toolbox", "call")
	if err != nil {
		t.Fatal(err)
	}
	var r toolbox.Response
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID != 3 || r.IsError {
		t.Errorf("call: %q (%v)", out, err)
	}

	// idle is the main process: it exits 0, and quickly, on docker stop.
	start := time.Now()
	if _, err := docker(t, nil, "stop", "-t", "10", id); err != nil {
		t.Fatal(err)
	}
	stop := time.Since(start)
	code, err := docker(t, nil, "inspect", "--format", "{{.State.ExitCode}}", id)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(code) != "0" || stop > 3*time.Second {
		t.Errorf("docker stop took %v, exit code %s", stop, code)
	}
	t.Logf("docker stop took %v", stop)
}

// TestScratchImage runs the toolbox in an image that holds nothing but the
// binary: the file tools work, bash says there is no shell.
func TestScratchImage(t *testing.T) {
	needDocker(t, testImage)
	bin := buildBinary(t)
	labels, value := testLabels(t)
	tag := "agent-toolbox-test/" + strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(value[len("toolbox-"):]))

	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*tar.Header{
		{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o777},
		{Name: "agent-toolbox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	importArgs := []string{"import"}
	for i := 1; i < len(labels); i += 2 {
		importArgs = append(importArgs, "--change", "LABEL "+labels[i])
	}
	if _, err := docker(t, &tarball, append(importArgs, "-", tag)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := docker(t, nil, "rmi", tag); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "f.txt"), []byte("scratch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req     string
		isError bool
		sub     string
	}{
		{`{"id":1,"tool":"read_file","args":{"path":"f.txt"}}`, false, "1\tscratch"},
		{`{"id":2,"tool":"bash","args":{"command":"echo hi"}}`, true, "this image has no /bin/sh"},
	} {
		args := append([]string{"run", "--rm", "-i", "--read-only", "--cap-drop", "ALL", "--network", "none",
			"--user", "4242:4242", "-v", ws + ":/workspace"}, labels...)
		out, err := docker(t, strings.NewReader(tc.req), append(args, tag, "/agent-toolbox", "call")...)
		if err != nil {
			t.Fatal(err)
		}
		var r toolbox.Response
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		want(t, r, tc.isError, tc.sub)
	}
}

// sigIgnMask parses the SigIgn line of /proc/PID/status.
func sigIgnMask(t *testing.T, out string) uint64 {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("SigIgn line %q: %v", line, err)
			}
			return m
		}
	}
	t.Fatalf("no SigIgn line in %q", out)
	return 0
}
