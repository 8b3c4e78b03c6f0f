package cli

import (
	"io"
	"os"
	"sync"
)

// keyPump shares one non-file input between forms shown one after another.
// A form's program reads its input in a goroutine that cannot be stopped
// unless the input is an *os.File (bubbletea cancels those), so on a plain
// reader the goroutine of a finished form would still be waiting and take
// the next form's first key. The pump does the only reading; each form gets
// a view of it that goes dead, without taking anything, when the form ends.
type keyPump struct {
	once sync.Once
	in   io.Reader
	ch   chan []byte
	mu   sync.Mutex
	rest []byte
}

func (p *keyPump) start() {
	p.once.Do(func() {
		p.ch = make(chan []byte)
		go func() {
			defer close(p.ch)
			for {
				buf := make([]byte, 256)
				n, err := p.in.Read(buf)
				if n > 0 {
					p.ch <- buf[:n]
				}
				if err != nil {
					return
				}
			}
		}()
	})
}

// view is one form's input.
type keyView struct {
	p    *keyPump
	done chan struct{}
}

func (v *keyView) Read(b []byte) (int, error) {
	v.p.mu.Lock()
	if len(v.p.rest) > 0 {
		n := copy(b, v.p.rest)
		v.p.rest = v.p.rest[n:]
		v.p.mu.Unlock()
		return n, nil
	}
	v.p.mu.Unlock()
	select {
	case <-v.done:
		return 0, io.EOF
	case chunk, ok := <-v.p.ch:
		if !ok {
			return 0, io.EOF
		}
		n := copy(b, chunk)
		if n < len(chunk) {
			v.p.mu.Lock()
			v.p.rest = append(v.p.rest, chunk[n:]...)
			v.p.mu.Unlock()
		}
		return n, nil
	}
}

// formInput returns the reader a form should read and a function to call
// when the form is done. A terminal (*os.File) is given as it is: the form
// program puts it in raw mode and stops reading it itself.
func (s *IOStreams) formInput() (io.Reader, func()) {
	if _, ok := s.In.(*os.File); ok || s.In == nil {
		return s.In, func() {}
	}
	s.pumpMu.Lock()
	if s.pump == nil {
		s.pump = &keyPump{in: s.In}
	}
	p := s.pump
	s.pumpMu.Unlock()
	p.start()
	v := &keyView{p: p, done: make(chan struct{})}
	return v, func() { close(v.done) }
}
