package images

import "time"

// Event is one line of progress from a long operation. Renderers (plain
// lines, a spinner, JSON) live in the command layer; this package only
// emits events.
type Event struct {
	// Image is the short image name ("sandbox"), or "" for bundle work.
	Image string
	// Step is the phase: "check", "debootstrap", "trim", "import",
	// "verify", "tag", "save", "load".
	Step string
	// Message is a human-readable line.
	Message string
	// Elapsed is the time since the step started; set when Done.
	Elapsed time.Duration
	// Done marks the end of a step.
	Done bool
}

// ProgressFunc receives progress events. It is called from the goroutine
// doing the work and must not block for long. A nil ProgressFunc is
// allowed.
type ProgressFunc func(Event)

func (p ProgressFunc) emit(e Event) {
	if p != nil {
		p(e)
	}
}

// step reports a step's start and end with its duration.
type stepTimer struct {
	p     ProgressFunc
	image string
	name  string
	start time.Time
}

func (p ProgressFunc) start(image, step, msg string) *stepTimer {
	p.emit(Event{Image: image, Step: step, Message: msg})
	return &stepTimer{p: p, image: image, name: step, start: time.Now()}
}

func (s *stepTimer) info(msg string) {
	s.p.emit(Event{Image: s.image, Step: s.name, Message: msg, Elapsed: time.Since(s.start)})
}

func (s *stepTimer) done(msg string) time.Duration {
	d := time.Since(s.start)
	s.p.emit(Event{Image: s.image, Step: s.name, Message: msg, Elapsed: d, Done: true})
	return d
}
