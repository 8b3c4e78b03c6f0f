package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox/toolbox"
)

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		err  string
	}{
		{args: nil, code: 2, err: "usage: agent-toolbox MODE"},
		{args: []string{"frobnicate"}, code: 2, err: `unknown mode "frobnicate"`},
		{args: []string{"idle", "x"}, code: 2, err: "takes no arguments"},
		{args: []string{"serve", "-nope"}, code: 2, err: "flag provided but not defined"},
		{args: []string{"call", "extra"}, code: 2, err: "unexpected arguments"},
		{args: []string{"--help"}, code: 0},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.err) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.err)
		}
		if tc.code != 0 && stdout.Len() > 0 {
			t.Errorf("run(%q) wrote to stdout: %q", tc.args, stdout.String())
		}
	}
}

func TestCallMode(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"call", "-root", root}, strings.NewReader(`{"id":9,"tool":"read_file","args":{"path":"a.txt"}}`), &stdout, &stderr)
	var r toolbox.Response
	if err := json.Unmarshal(stdout.Bytes(), &r); code != 0 || err != nil || r.ID != 9 || r.Output != "     1\thi\n" {
		t.Errorf("code %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}

	stdout.Reset()
	code = run([]string{"call", "-root", root, "-shell", "/nonexistent/bash"}, strings.NewReader(`{"id":1,"tool":"bash","args":{"command":"true"}}`), &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "this image has no /nonexistent/bash") {
		t.Errorf("-shell: code %d, stdout %q", code, stdout.String())
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// buildBinary builds the static binary once per test run, the way the
// sandbox ships it.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agent-toolbox-test-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "agent-toolbox")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", buildPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			buildPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v\n%s", buildErr, buildPath)
	}
	return buildPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildPath != "" && buildErr == nil {
		os.RemoveAll(filepath.Dir(buildPath))
	}
	os.Exit(code)
}

func TestBinaryIsStatic(t *testing.T) {
	bin := buildBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader (PT_INTERP); build it with CGO_ENABLED=0")
		}
	}
	if st, err := os.Stat(bin); err == nil {
		t.Logf("binary size %.1f MiB", float64(st.Size())/(1<<20))
	}
}

func TestIdleExitsOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		// Until main has called signal.Notify the runtime's own handler
		// ends the process on the signal, and nothing outside the process
		// shows when that happened (the runtime sets SigCgt at start-up).
		// So a death by the signal is retried with more time to settle; a
		// binary that never handles it fails every attempt.
		var err error
		for _, settle := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
			if err = idleUntilSignalled(t, bin, sig, settle); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("idle after %v: %v, want exit 0", sig, err)
		}
	}
}

// idleUntilSignalled starts idle, waits settle, sends sig and returns how
// the process ended.
func idleUntilSignalled(t *testing.T, bin string, sig syscall.Signal, settle time.Duration) error {
	t.Helper()
	cmd := exec.Command(bin, "idle")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("idle exited before the signal: %v", err)
	case <-time.After(settle):
	}
	_ = cmd.Process.Signal(sig)
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("idle did not exit on %v", sig)
		return nil
	}
}
