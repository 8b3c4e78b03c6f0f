package failpoint

import (
	"os"
	"strings"
	"syscall"
	"time"
)

// Env names the failpoint to trigger; SignalEnv the signal to send.
const (
	Env       = "AGENT_FAILPOINT"
	SignalEnv = "AGENT_FAILPOINT_SIGNAL"
)

// Points lists every failpoint, in the order a task and then its merge pass
// them. Tests iterate over it; Hit panics on a name not listed here, so the
// list cannot drift from the code.
var Points = []string{
	"task-record-saved",   // the record is written, no branch or worktree yet
	"task-worktree-added", // branch and worktree exist, record not yet updated
	"task-sandbox-created",
	"sub-worktree-added",  // a sub-agent's branch and worktree exist, not yet in the record
	"sub-worktree-filled", // its files are written, the record says they are not
	"sub-applied",         // its work is in the parent's files, the record does not say so
	"task-before-commit",  // the agent is done, its sandbox removed
	"task-committed",      // the commit exists, the record does not say review yet
	"merge-before-checkout",
	"merge-checkout-updated", // the user's files are updated, the branch not yet moved
	"merge-ref-updated",      // the branch moved, the record does not say merged yet
	"merge-before-cleanup",
	"discard-worktree-removed",
}

var known = func() map[string]bool {
	m := map[string]bool{}
	for _, p := range Points {
		m[p] = true
	}
	return m
}()

// Hit triggers the failpoint name when the environment asks for it.
func Hit(name string) {
	if !known[name] {
		panic("failpoint: unknown point " + name)
	}
	want := os.Getenv(Env)
	if want == "" || want != name {
		return
	}
	sig := syscall.SIGKILL
	switch strings.ToUpper(strings.TrimPrefix(strings.ToUpper(os.Getenv(SignalEnv)), "SIG")) {
	case "TERM":
		sig = syscall.SIGTERM
	case "INT":
		sig = syscall.SIGINT
	}
	_ = syscall.Kill(os.Getpid(), sig)
	if sig == syscall.SIGKILL {
		// The kill is asynchronous only in theory; never run on.
		for {
			time.Sleep(time.Hour)
		}
	}
	// TERM and INT: give the handler a moment to cancel the context, then
	// carry on as the real signal would let the process do.
	time.Sleep(50 * time.Millisecond)
}
