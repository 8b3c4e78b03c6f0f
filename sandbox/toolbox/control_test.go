package toolbox

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runNaive runs a shell command the way a naive tool would, without the
// toolbox's process group handling: the control run for tests that check
// that nothing survives a call.
func runNaive(t *testing.T, command string) {
	t.Helper()
	c := exec.Command("sh", "-c", command)
	// Backgrounded children keep the pipe; without a bound Output would wait
	// for them.
	c.WaitDelay = 100 * time.Millisecond
	if out, err := c.CombinedOutput(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		t.Fatalf("control command: %v\n%s", err, out)
	}
}

// killMarked kills, by pid, the processes this test started whose command
// line carries marker.
func killMarked(t *testing.T, marker string) {
	t.Helper()
	for _, p := range procsWith(t, marker) {
		pid, err := strconv.Atoi(p[:strings.IndexByte(p, ':')])
		if err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
