package toolbox

import (
	"fmt"
	"syscall"
)

// prctl(2) options.
const (
	prGetDumpable = 3
	prSetDumpable = 4
)

// Protect makes the calling process unreachable by the commands it runs,
// which share its uid: it marks the process not dumpable, so the kernel
// refuses them ptrace(2), /proc/PID/mem and every other /proc/PID entry
// that needs ptrace access, /proc/PID/fd (the session channel) among them.
// Without it a command could attach to the toolbox, run its own code there
// and so outlive its call (the process-group kill and the orphan sweep
// never reach the toolbox), or write forged response frames into the
// session's stdout.
//
// The flag is per process and is reset by execve, so the commands the
// toolbox starts are ordinary, dumpable processes (debuggers and core
// dumps work for them as usual).
func Protect() error {
	if insecureDumpable {
		return nil
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", e)
	}
	return nil
}

// Dumpable reports whether the calling process is dumpable (reachable
// through ptrace and /proc by processes of its uid).
func Dumpable() (bool, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
	if e != 0 {
		return false, fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", e)
	}
	return r != 0, nil
}
