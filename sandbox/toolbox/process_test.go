package toolbox

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var nextSince = regexp.MustCompile(`\[next since: (\d+)\]`)

func TestProcessLifecycle(t *testing.T) {
	s := newTestServer(t)
	s.KillOrphans = true
	ts := startSession(t, s)
	sleep, marker := uniqueSleep(t)
	t.Cleanup(func() { killMarked(t, marker) })

	ts.send(1, ToolProcessStart, ProcessStartArgs{Command: "echo first; " + sleep + " & echo second; wait"})
	r := ts.recv()
	check(t, r, false, "started background process p1", "state: running", "first")
	waitFor(t, "the background sleep", func() bool { return len(procsWith(t, marker)) > 0 })

	// A bash call ends with an orphan sweep; the background process is
	// not an orphan of that call and survives it.
	ts.send(2, ToolBash, BashArgs{Command: "echo hi"})
	check(t, ts.recv(), false, "hi")
	if len(procsWith(t, marker)) == 0 {
		t.Fatal("a bash call's orphan sweep killed the background process")
	}

	ts.send(3, ToolProcessOutput, ProcessOutputArgs{ID: "p1"})
	r = ts.recv()
	check(t, r, false, "first", "second", "state: running")
	m := nextSince.FindStringSubmatch(r.Output)
	if m == nil {
		t.Fatalf("no next offset in %q", r.Output)
	}
	since, _ := strconv.Atoi(m[1])
	ts.send(4, ToolProcessOutput, ProcessOutputArgs{ID: "p1", Since: int64(since)})
	r = ts.recv()
	check(t, r, false, "(no new output)")
	if strings.Contains(r.Output, "first") {
		t.Errorf("since did not skip what was read: %q", r.Output)
	}

	ts.send(5, ToolProcessOutput, ProcessOutputArgs{ID: "p9"})
	check(t, ts.recv(), true, `no background process "p9"`, "p1")

	ts.send(6, ToolProcessStop, ProcessStopArgs{ID: "p1"})
	check(t, ts.recv(), false, "state: stopped")
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("process_stop left processes: %v", left)
	}
}

func TestProcessKilledWhenSessionEnds(t *testing.T) {
	s := newTestServer(t)
	ts := startSession(t, s)
	sleep, marker := uniqueSleep(t)
	t.Cleanup(func() { killMarked(t, marker) })
	ts.send(1, ToolProcessStart, ProcessStartArgs{Command: sleep})
	check(t, ts.recv(), false, "started")
	waitFor(t, "the background sleep", func() bool { return len(procsWith(t, marker)) > 0 })
	ts.in.Close()
	select {
	case <-ts.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("a background process outlived its session: %v", left)
	}
	ts.done <- nil // for the cleanup's wait
}

func TestProcessSweepControl(t *testing.T) {
	// Control for the sweep's exemption: without it, the orphan sweep that
	// follows every bash call kills a background process.
	s := newTestServer(t)
	s.KillOrphans = true
	ts := startSession(t, s)
	sleep, marker := uniqueSleep(t)
	t.Cleanup(func() { killMarked(t, marker) })
	ts.send(1, ToolProcessStart, ProcessStartArgs{Command: sleep})
	check(t, ts.recv(), false, "started")
	waitFor(t, "the background sleep", func() bool { return len(procsWith(t, marker)) > 0 })
	s.procMu.Lock()
	killOrphans(nil)
	s.procMu.Unlock()
	waitFor(t, "the unexempted sweep to kill it", func() bool { return len(procsWith(t, marker)) == 0 })
	ts.send(2, ToolProcessOutput, ProcessOutputArgs{ID: "p1"})
	check(t, ts.recv(), false, "killed by signal")
}

func TestProcessNeedsSession(t *testing.T) {
	s := newTestServer(t)
	r := call(t, s, ToolProcessStart, ProcessStartArgs{Command: "true"})
	check(t, r, true, "needs the sandbox's tool session")
	check(t, call(t, s, ToolProcessStart, ProcessStartArgs{}), true, "command is required")
}

func TestWindowBuffer(t *testing.T) {
	w := &windowBuffer{max: 4}
	w.Write([]byte("abcdef"))
	data, dropped, next := w.since(0, 100)
	if string(data) != "cdef" || dropped != 2 || next != 6 {
		t.Errorf("since(0) = %q, %d, %d", data, dropped, next)
	}
	data, dropped, next = w.since(5, 100)
	if string(data) != "f" || dropped != 0 || next != 6 {
		t.Errorf("since(5) = %q, %d, %d", data, dropped, next)
	}
}
