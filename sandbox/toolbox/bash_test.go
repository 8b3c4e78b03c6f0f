package toolbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// procsWith lists the live "sleep MARKER" processes, by scanning /proc as
// the toolbox itself does.
func procsWith(t *testing.T, marker string) []string {
	t.Helper()
	names, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil || !bytes.HasPrefix(b, []byte("sleep\x00"+marker+"\x00")) {
			continue
		}
		pid := filepath.Base(filepath.Dir(n))
		if st, _, _, ok := procStat(pid); ok && st != 'Z' {
			found = append(found, pid+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return found
}

// uniqueSleep is a sleep whose argument identifies the test's processes.
func uniqueSleep(t *testing.T) (cmd, marker string) {
	t.Helper()
	n := 900000 + time.Now().UnixNano()%99999
	return fmt.Sprintf("sleep %d", n), fmt.Sprint(n)
}

func TestBashExitCodes(t *testing.T) {
	s := newTestServer(t)
	tests := []struct {
		name     string
		command  string
		code     int
		isError  bool
		output   string
		contains []string
	}{
		{name: "ok", command: "echo hello", code: 0, output: "hello\n"},
		{name: "no output", command: "true", code: 0, output: "(no output)\n"},
		{name: "exit 3", command: "echo out; exit 3", code: 3, isError: true, output: "out\n[exit code 3]"},
		{name: "signal", command: "kill -TERM $$", code: 143, isError: true, contains: []string{"killed by signal terminated (exit code 143)"}},
		{name: "not found", command: "no-such-command-xyz", code: 127, isError: true, contains: []string{"not found", "[exit code 127]"}},
		{name: "interleaved", command: "echo 1; echo 2 >&2; echo 3", output: "1\n2\n3\n"},
		{name: "cwd is root", command: "pwd", output: s.Root + "\n"},
		{name: "stdin is empty", command: "cat; echo end", output: "end\n"},
		{name: "no trailing newline", command: "printf abc", output: "abc\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, ToolBash, BashArgs{Command: tc.command})
			check(t, r, tc.isError, tc.contains...)
			if r.ExitCode == nil || *r.ExitCode != tc.code {
				t.Errorf("ExitCode = %v, want %d", r.ExitCode, tc.code)
			}
			if tc.output != "" && r.Output != tc.output {
				t.Errorf("output %q, want %q", r.Output, tc.output)
			}
		})
	}
}

func TestBashBadArguments(t *testing.T) {
	s := newTestServer(t)
	check(t, call(t, s, ToolBash, `{}`), true, "command is required")
	check(t, call(t, s, ToolBash, `{"command":"true","timeout":"10"}`), true, `invalid arguments for bash: field "timeout" must be a number`)
	check(t, call(t, s, ToolBash, `{"command":"true","timeout":-1}`), true, "positive")
	check(t, call(t, s, ToolBash, `{"command":"true","timeout":99999}`), false, "timeout lowered from 99999s to the maximum 10m0s")
	check(t, call(t, s, ToolBash, `{"command":"true","timeout":1e300}`), false, "to the maximum 10m0s")
	// Extra fields some models send are ignored.
	check(t, call(t, s, ToolBash, `{"command":"echo ok","description":"say ok"}`), false, "ok")

	s.Shell = "/nonexistent/sh"
	r := call(t, s, ToolBash, BashArgs{Command: "true"})
	check(t, r, true, "this image has no /nonexistent/sh", "file tools")
}

// With no shell given, commands run under bash where it exists; a shell
// given explicitly (the control) wins.
func TestBashDefaultShell(t *testing.T) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("no /bin/bash on this machine")
	}
	const probe = `echo "bash=${BASH_VERSION:+yes}"`
	s := newTestServer(t)
	check(t, call(t, s, ToolBash, BashArgs{Command: probe}), false, "bash=yes")
	s.Shell = "/bin/sh"
	if r := call(t, s, ToolBash, BashArgs{Command: probe}); !strings.Contains(r.Output, "bash=\n") {
		t.Errorf("explicit /bin/sh: %+v", r)
	}
}

func TestBashTimeoutKillsTheGroup(t *testing.T) {
	s := newTestServer(t)
	sleep, marker := uniqueSleep(t)
	start := time.Now()
	// The grandchild in the background holds the output pipe open; the call
	// must still return at the deadline.
	r := call(t, s, ToolBash, fmt.Sprintf(`{"command":"echo started; %s & %s","timeout":1}`, sleep, sleep))
	elapsed := time.Since(start)
	check(t, r, true, "started\n", "timed out after 1s")
	if !r.TimedOut || r.ExitCode == nil || *r.ExitCode != 137 {
		t.Errorf("TimedOut=%v ExitCode=%v", r.TimedOut, r.ExitCode)
	}
	// Waiting for the background sleep would take days; the upper bound
	// only leaves room for a loaded machine.
	if elapsed < time.Second || elapsed > 5*time.Second {
		t.Errorf("returned after %v, want about 1s", elapsed)
	}
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("processes survived the timeout: %v", left)
	}
	t.Logf("timeout 1s returned after %v", elapsed)
}

func TestBashBackgroundJobDoesNotSurvive(t *testing.T) {
	s := newTestServer(t)
	sleep, marker := uniqueSleep(t)
	start := time.Now()
	r := call(t, s, ToolBash, BashArgs{Command: sleep + " & echo done"})
	check(t, r, false, "done")
	if time.Since(start) > time.Second {
		t.Errorf("call waited %v for a background job", time.Since(start))
	}
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("a background job survived the call: %v", left)
	}

	// Control: the same job, started outside the toolbox's process group
	// handling, does survive; so the check above can fail.
	runNaive(t, sleep+" &")
	t.Cleanup(func() { killMarked(t, marker) })
	deadline := time.Now().Add(2 * time.Second)
	for len(procsWith(t, marker)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(procsWith(t, marker)) == 0 {
		t.Error("control: the background job did not survive a naive run")
	}
}

func TestBashCancel(t *testing.T) {
	s := newTestServer(t)
	sleep, marker := uniqueSleep(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	r := callCtx(ctx, t, s, ToolBash, BashArgs{Command: sleep})
	if d := time.Since(start); d > time.Second {
		t.Errorf("cancel took %v", d)
	}
	check(t, r, true, "cancelled")
	if r.TimedOut {
		t.Error("TimedOut set on cancel")
	}
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("processes survived the cancel: %v", left)
	}
}

func TestBashOutputCapped(t *testing.T) {
	s := newTestServer(t)
	s.Limits = Limits{OutputBytes: 4096}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// 100 MB of output: the buffer must stay fixed in size.
	r := call(t, s, ToolBash, BashArgs{Command: "echo first; head -c 100000000 /dev/zero | tr '\\0' y; echo; echo last"})
	runtime.ReadMemStats(&after)
	check(t, r, false, "first\nyyy", "bytes of output omitted ...]\nyyy", "y\nlast\n")
	if !r.Truncated {
		t.Error("Truncated not set")
	}
	if len(r.Output) > 4096+100 {
		t.Errorf("output is %d bytes, cap 4096", len(r.Output))
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 16<<20 {
		t.Errorf("allocated %d MB for 100 MB of output", grown>>20)
	}
	t.Logf("100 MB of output allocated %d KB", (after.TotalAlloc-before.TotalAlloc)>>10)

	// yes never ends by itself: the timeout ends it, the output is capped.
	r = call(t, s, ToolBash, `{"command":"yes","timeout":0.5}`)
	check(t, r, true, "y\ny\n", "bytes of output omitted", "timed out")
	if !r.Truncated || !r.TimedOut {
		t.Errorf("Truncated=%v TimedOut=%v", r.Truncated, r.TimedOut)
	}
}

func TestBashOOMReport(t *testing.T) {
	// The kernel's OOM killer is simulated: the command raises the cgroup
	// counter and dies of SIGKILL, as an OOM-killed process does.
	s := newTestServer(t)
	cg := t.TempDir()
	writeTestFile(t, cg, "memory/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
	s.CgroupDir = cg
	n := 4
	raise := func() string {
		n++
		return fmt.Sprintf(`printf 'oom_kill_disable 0\nunder_oom 0\noom_kill %d\n' > %s/memory/memory.oom_control; `, n, cg)
	}

	r := call(t, s, ToolBash, BashArgs{Command: raise() + "kill -KILL $$"})
	check(t, r, true, "killed by the out-of-memory killer", "memory limit")
	if !r.OOMKilled || *r.ExitCode != 137 {
		t.Errorf("OOMKilled=%v ExitCode=%v", r.OOMKilled, *r.ExitCode)
	}
	// A child killed by the OOM killer makes the shell exit with 137.
	r = call(t, s, ToolBash, BashArgs{Command: raise() + "sh -c 'kill -KILL $$'; exit $?"})
	if !r.OOMKilled {
		t.Errorf("OOM of a child not reported: %+v", r)
	}

	// Controls: SIGKILL without the counter rising is not OOM; nor is a
	// counter rise with a normal exit.
	r = call(t, s, ToolBash, BashArgs{Command: "kill -KILL $$"})
	check(t, r, true, "killed by signal killed")
	if r.OOMKilled {
		t.Error("OOMKilled without an OOM kill")
	}
	r = call(t, s, ToolBash, BashArgs{Command: raise() + "exit 1"})
	if r.OOMKilled {
		t.Error("OOMKilled for a normal exit")
	}

	// cgroup v2 layout.
	cg2 := t.TempDir()
	writeTestFile(t, cg2, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
	if got := (&Server{CgroupDir: cg2}).oomKills(); got != 1 {
		t.Errorf("v2 oom_kill = %d", got)
	}
	if got := (&Server{CgroupDir: t.TempDir()}).oomKills(); got != -1 {
		t.Errorf("no cgroup: %d, want -1", got)
	}
}

func TestKillGroupEndsForkingGroup(t *testing.T) {
	s := newTestServer(t)
	_, marker := uniqueSleep(t)
	// Each process keeps starting more: one kill is not enough.
	cmd := fmt.Sprintf(`f() { sleep %s & f & wait; }; f`, marker)
	start := time.Now()
	r := call(t, s, ToolBash, fmt.Sprintf(`{"command":%q,"timeout":0.3}`, "ulimit -u 200 2>/dev/null; "+cmd))
	if !r.TimedOut {
		t.Errorf("not timed out: %+v", r)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
	time.Sleep(50 * time.Millisecond)
	if left := procsWith(t, marker); len(left) > 0 {
		t.Errorf("%d processes survived, e.g. %v", len(left), left[0])
	}
}

func TestCapBuffer(t *testing.T) {
	b := newCapBuffer(16) // 4 head, 12 tail
	fmt.Fprint(b, "0123456789")
	if s, cut := b.String(); s != "0123456789" || cut {
		t.Errorf("under the cap: %q %v", s, cut)
	}
	fmt.Fprint(b, "abcdefghij") // 20 bytes in all
	s, cut := b.String()
	if want := "0123\n[... 4 bytes of output omitted ...]\n89abcdefghij"; s != want || !cut {
		t.Errorf("got %q, want %q", s, want)
	}
	for range 1000 {
		fmt.Fprint(b, "xyz")
	}
	s, _ = b.String()
	if want := "0123\n[... 3004 bytes of output omitted ...]\nxyzxyzxyzxyz"; s != want {
		t.Errorf("got %q, want %q", s, want)
	}
	// One write larger than the whole buffer.
	b = newCapBuffer(8)
	b.Write([]byte(strings.Repeat("a", 100) + "END"))
	if s, _ := b.String(); !strings.HasPrefix(s, "aa\n[... 95 bytes") || !strings.HasSuffix(s, "aaaEND") {
		t.Errorf("got %q", s)
	}
	// Cuts fall on rune boundaries: 3 head bytes keep one "é", 9 tail
	// bytes keep four.
	b = newCapBuffer(12)
	b.Write([]byte("ééééééééé")) // 18 bytes
	if s, _ := b.String(); s != "é\n[... 8 bytes of output omitted ...]\néééé" {
		t.Errorf("got %q", s)
	}
}

func TestBashDetachedProcessDoesNotSurvive(t *testing.T) {
	sleep, marker := uniqueSleep(t)
	// Control: a process that leaves the command's process group (setsid)
	// escapes the group kill and outlives a naive run.
	runNaive(t, "setsid "+sleep+" > /dev/null 2>&1 &")
	t.Cleanup(func() { killMarked(t, marker) })
	deadline := time.Now().Add(2 * time.Second)
	for len(procsWith(t, marker)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(procsWith(t, marker)) == 0 {
		t.Fatal("control: the detached process did not survive a naive run")
	}
	killMarked(t, marker)

	s := newTestServer(t)
	s.KillOrphans = true
	for _, command := range []string{
		"setsid " + sleep + " & echo ok",
		"(setsid " + sleep + " > /dev/null 2>&1 &); echo ok",
	} {
		start := time.Now()
		r := call(t, s, ToolBash, BashArgs{Command: command})
		check(t, r, false, "ok")
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %v", command, d)
		}
		if left := procsWith(t, marker); len(left) > 0 {
			t.Errorf("%s: a detached process survived the call: %v", command, left)
		}
	}
}

func TestBashCommandIsPreferredByOOMKiller(t *testing.T) {
	s := newTestServer(t)
	r := call(t, s, ToolBash, BashArgs{Command: "sleep 0.1; cat /proc/self/oom_score_adj"})
	check(t, r, false)
	if strings.TrimSpace(r.Output) != "1000" {
		t.Errorf("oom_score_adj of the command = %q, want 1000", r.Output)
	}
	// Control: the toolbox itself keeps its own score.
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err != nil || strings.TrimSpace(string(b)) == "1000" {
		t.Errorf("the toolbox's own oom_score_adj = %q (%v)", b, err)
	}
}

// A pipeline fails when any of its commands fails: `go test | tail` exits
// with the tests' status. The control runs the same pipeline under plain
// `bash -c`, where tail's 0 hides the failure.
func TestBashPipefail(t *testing.T) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("no /bin/bash on this machine")
	}
	const pipeline = "echo FAIL; exit 1"
	cmd := "(" + pipeline + ") | tail -1"
	s := newTestServer(t)
	r := call(t, s, ToolBash, BashArgs{Command: cmd})
	if r.ExitCode == nil || *r.ExitCode != 1 || !strings.Contains(r.Output, "FAIL") {
		t.Errorf("bash tool, failing pipeline: %+v, want exit 1", r)
	}
	if err := exec.Command("/bin/bash", "-c", cmd).Run(); err != nil {
		t.Errorf("control: plain bash -c %q failed (%v): the test shows nothing", cmd, err)
	}
	// A passing pipeline still passes, and an explicit /bin/sh that may
	// lack pipefail (dash) still runs the command.
	check(t, call(t, s, ToolBash, BashArgs{Command: "echo ok | tail -1"}), false, "ok")
	s.Shell = "/bin/sh"
	r = call(t, s, ToolBash, BashArgs{Command: "echo one; echo two | tail -1"})
	if r.ExitCode == nil || *r.ExitCode != 0 || r.Output != "one\ntwo\n" {
		t.Errorf("/bin/sh: %+v", r)
	}
}
