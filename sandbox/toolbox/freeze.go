package toolbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// InitPath and InitMode are the sandbox's main process as the host starts
// it (its argv); FreezeAll refuses to run anywhere else.
const (
	InitPath = "/.agent/toolbox"
	InitMode = "idle"
)

// FreezeAll stops every process of the sandbox except its init (pid 1, the
// idle toolbox, which runs nothing it is asked to) and the caller, for an
// engine that has no cgroup freezer (rootless Podman on cgroup v1). It is
// run through exec as the sandbox's user, and returns nil only once it has
// seen every other thread of the pid namespace stopped ('T' or 't') or
// dead, so that nothing in the sandbox can touch the workspace until
// ThawAll.
//
// kill(-1, SIGSTOP) reaches every process the caller may signal except
// init and itself, and the kernel treats it as one signal to many
// processes: a fork racing it is restarted rather than leaving a child that
// missed the signal. SIGSTOP cannot be caught, blocked or ignored. A thread
// not yet stopped (inside a system call, say) is waited for and signalled
// again; one that cannot be signalled (another uid) fails the freeze at
// once. When the deadline passes, everything is continued again and the
// error names the processes that would not stop (a process blocked in
// uninterruptible sleep, e.g. the parent of a vfork child caught before its
// exec, waits for that child and shows as 'D').
//
// Limits, compared with the cgroup freezer: a process that enters the
// sandbox through a new exec after the freeze is not stopped (the host
// refuses its own execs into a frozen sandbox); and ThawAll continues every
// process, including one that was stopped before the freeze.
func FreezeAll(timeout time.Duration) error {
	if err := checkInit(); err != nil {
		return err
	}
	self := os.Getpid()
	deadline := time.Now().Add(timeout)
	wait := 200 * time.Microsecond
	for {
		// ESRCH: nothing to signal, i.e. no process but init and us.
		if err := syscall.Kill(-1, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill(-1, SIGSTOP): %w", err)
		}
		running, err := runningThreads(self)
		if err != nil {
			_ = ThawAll()
			return err
		}
		if len(running) == 0 {
			return nil
		}
		for _, r := range running {
			if err := syscall.Kill(r.pid, syscall.SIGSTOP); errors.Is(err, syscall.EPERM) {
				_ = ThawAll()
				return fmt.Errorf("process %d cannot be stopped by the sandbox user (it runs as another uid)", r.pid)
			}
		}
		if time.Now().After(deadline) {
			_ = ThawAll()
			return fmt.Errorf("%d thread(s) did not stop within %s: %s", len(running), timeout, describeThreads(running))
		}
		time.Sleep(wait)
		if wait < 10*time.Millisecond {
			wait *= 2
		}
	}
}

// ThawAll continues every process of the sandbox (see FreezeAll).
func ThawAll() error {
	if err := checkInit(); err != nil {
		return err
	}
	if err := syscall.Kill(-1, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill(-1, SIGCONT): %w", err)
	}
	return nil
}

// checkInit makes sure the caller is inside a sandbox, whose pid 1 is the
// idle toolbox: kill(-1) anywhere else (a host, a development container)
// would stop every process of the user.
func checkInit() error {
	b, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		return fmt.Errorf("not in a sandbox: %w", err)
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if os.Getpid() == 1 || len(args) < 2 || args[0] != InitPath || args[1] != InitMode {
		return fmt.Errorf("not in a sandbox (pid 1 is %q, not %s %s): refusing to signal every process", args, InitPath, InitMode)
	}
	return nil
}

type thread struct {
	pid, tid int
	state    byte
	comm     string
}

func describeThreads(ts []thread) string {
	var parts []string
	for i, t := range ts {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ts)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%d/%d %q (%c)", t.pid, t.tid, t.comm, t.state))
	}
	return strings.Join(parts, ", ")
}

// runningThreads lists the threads of every process but init and self that
// are neither stopped nor dead.
func runningThreads(self int) ([]thread, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []thread
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		tasks, err := os.ReadDir(filepath.Join("/proc", ent.Name(), "task"))
		if err != nil {
			continue // exited meanwhile
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "task", task.Name(), "stat"))
			if err != nil {
				continue
			}
			st, comm, ok := parseStat(b)
			if !ok {
				return nil, fmt.Errorf("unreadable /proc/%d/task/%d/stat", pid, tid)
			}
			switch st {
			case 'T', 't', 'Z', 'X', 'x':
			default:
				out = append(out, thread{pid: pid, tid: tid, state: st, comm: comm})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].tid < out[j].tid })
	return out, nil
}

// parseStat returns the state and command name from a /proc stat line,
// "pid (comm) S ...", where comm may itself hold spaces and parentheses.
func parseStat(b []byte) (byte, string, bool) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 >= len(b) {
		return 0, "", false
	}
	return b[end+2], string(b[open+1 : end]), true
}
