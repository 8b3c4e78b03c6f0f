package llm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	Event string // "" for the default "message" type
	Data  []byte
	// Cut is set when the body ended before the event's closing blank
	// line: its data may be incomplete.
	Cut bool
}

// sseReader splits a text/event-stream body into events (WHATWG HTML,
// "Parsing an event stream"): "data:" lines are joined with "\n", a line
// starting with ":" is a comment (keep-alive ping) and is skipped, a blank
// line dispatches. Lines may be arbitrarily long: a tool call's arguments can
// arrive in one line, so this does not use bufio.Scanner and its token cap.
type sseReader struct {
	r     *bufio.Reader
	line  []byte
	data  []byte
	event string
	has   bool // a field was seen since the last dispatch
	// onField, when set, is called for every line that is not a comment
	// or blank: the reply's progress (keep-alive comments are not).
	onField func()
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// Next returns the next event, or io.EOF when the body ended cleanly between
// events. An event that the body cut off before its blank line is still
// returned (servers often close right after "data: [DONE]\n"); any other read
// error is returned as is.
func (s *sseReader) Next() (sseEvent, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && s.has {
				ev := s.dispatch()
				ev.Cut = true
				return ev, nil
			}
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if s.has {
				return s.dispatch(), nil
			}
			continue
		}
		if line[0] == ':' {
			continue // comment: keep-alive
		}
		if s.onField != nil {
			s.onField()
		}
		if line[0] == '{' || line[0] == '[' {
			// Not SSE at all: a JSON body (typically {"error":...}) sent with
			// 200 by a server that failed before it started streaming.
			// Treating it as data lets the caller surface the message.
			s.appendData(line)
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			s.appendData(value)
		case "event":
			s.event = string(value)
			s.has = true
		case "error":
			// llama-server writes a failure inside a stream as the
			// non-standard line "error: {json}" rather than an "event:".
			s.event = "error"
			s.appendData(value)
		}
		// "id", "retry" and unknown fields are ignored, as the spec says.
	}
}

func (s *sseReader) appendData(v []byte) {
	if s.has && s.data != nil {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, v...)
	if s.data == nil {
		s.data = []byte{}
	}
	s.has = true
}

func (s *sseReader) dispatch() sseEvent {
	ev := sseEvent{Event: s.event, Data: s.data}
	s.event, s.data, s.has = "", nil, false
	return ev
}

// readLine returns one line without its "\n" or "\r\n". The slice is valid
// until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		s.line = append(s.line, frag...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(s.line) > 0 && errors.Is(err, io.EOF) {
			break // last line without a newline
		}
		return nil, err
	}
	l := s.line
	if n := len(l); n > 0 && l[n-1] == '\n' {
		l = l[:n-1]
	}
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}
