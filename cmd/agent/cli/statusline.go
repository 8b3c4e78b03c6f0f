package cli

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// spinner holds the frames of a terminal spinner.
var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// clearLine moves the cursor to the start of the line and erases it.
const clearLine = "\r\x1b[2K"

// statusLine is the last line on a terminal: redrawn in place while
// something runs, cleared before any other output. The lock of its owner
// guards it.
type statusLine struct {
	w  io.Writer
	up bool // drawn and not cleared since
	// width is the terminal's width (nil or 0: unknown). The line is cut
	// to one column less, so it never wraps: clearLine erases one
	// physical line, and a wrapped status line would leave a copy behind
	// on every redraw.
	width func() int
}

func (s *statusLine) draw(text string) {
	w := 0
	if s.width != nil {
		w = s.width()
	}
	if w <= 0 {
		w = 80
	}
	fmt.Fprint(s.w, clearLine+fit(text, w-1))
	s.up = true
}

func (s *statusLine) clear() {
	if s.up {
		fmt.Fprint(s.w, clearLine)
		s.up = false
	}
}

// redrawEvery calls redraw with mu held every d, so a clock on a status
// line moves while nothing else happens, until stop is called. stop waits
// for a redraw under way, so it must not be called with mu held; calling
// it again does nothing.
func redrawEvery(d time.Duration, mu sync.Locker, redraw func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				mu.Lock()
				redraw()
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}
