package sandbox

// WithoutFrameChecks turns off the session's checks on what the sandbox
// sends (random request ids, no answer nobody asked for, the frame size
// bound) for sessions e opens from now on. Security tests use it for their
// control runs only.
func WithoutFrameChecks(e *Engine) {
	e.lenientFrames = true
	e.frameLimit = -1
}

// UseSignalFreeze makes e freeze sandboxes by stopping their processes from
// inside (the toolbox's freeze mode), as it does on an engine without a
// cgroup freezer, so that the freeze tests cover it under Docker too.
func UseSignalFreeze(e *Engine) { e.SignalFreeze = true }

// WithoutExclusiveClaims makes p write claim records over existing ones
// and trust its own listing of unclaimed members, as a pool without the
// exclusive claim record would. The race tests use it for their control
// runs only.
func WithoutExclusiveClaims(p *Pool) { p.overwriteClaims = true }

// WithoutExecGate lets e pause a sandbox while one of its execs is
// starting, as before the gate. The exec/pause race test uses it for its
// control run only.
func WithoutExecGate(e *Engine) { e.execs.off = true }
