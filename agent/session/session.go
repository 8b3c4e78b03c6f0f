package session

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/localagent/agent/agent/llm"
)

// Version is the transcript format version written in every header.
const Version = 1

// headerType marks the header line, so a reader can tell a transcript from
// any other JSONL file.
const headerType = "agent-session"

// Header is the first line of a transcript.
type Header struct {
	Type    string    `json:"type"` // always "agent-session"
	Version int       `json:"version"`
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Model   string    `json:"model,omitempty"`
	// Agent is the sub-agent's name; empty for a task's main agent.
	Agent string `json:"agent,omitempty"`
	Task  string `json:"task,omitempty"`

	// Workspace facts at the start of the session.
	Workspace  string `json:"workspace,omitempty"`
	Branch     string `json:"branch,omitempty"`
	BaseCommit string `json:"base_commit,omitempty"`
	Offline    bool   `json:"offline,omitempty"`
}

// NewID returns a random session id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrNotTranscript says a file is not a session transcript.
var ErrNotTranscript = errors.New("not a session transcript")

// Writer appends messages to a transcript. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// Create starts a new transcript at path (its directory is created) and
// writes the header. It fails if the file already exists: a transcript is
// never overwritten. Empty Type, Version, ID and Created are filled in.
func Create(path string, h Header) (*Writer, Header, error) {
	if h.Type == "" {
		h.Type = headerType
	}
	if h.Version == 0 {
		h.Version = Version
	}
	if h.ID == "" {
		h.ID = NewID()
	}
	if h.Created.IsZero() {
		h.Created = time.Now().UTC()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, h, fmt.Errorf("session: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, h, fmt.Errorf("session: creating transcript: %w", err)
	}
	w := &Writer{f: f, path: path}
	if err := w.writeLine(h); err != nil {
		_ = f.Close()
		return nil, h, err
	}
	return w, h, nil
}

// Open loads an existing transcript for appending: it returns its header
// and messages and a Writer positioned after the last complete line. A torn
// last line (a crash in the middle of a write) is cut off first, so the
// next message starts on a line of its own.
func Open(path string) (*Writer, Header, []llm.Message, error) {
	h, msgs, good, err := load(path)
	if err != nil {
		return nil, h, nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0o600)
	if err != nil {
		return nil, h, nil, fmt.Errorf("session: %w", err)
	}
	if err := f.Truncate(good); err != nil {
		_ = f.Close()
		return nil, h, nil, fmt.Errorf("session: cutting torn line: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, h, nil, fmt.Errorf("session: %w", err)
	}
	return &Writer{f: f, path: path}, h, msgs, nil
}

// Load reads a transcript. A torn last line is ignored; a bad line in the
// middle is an error (the file was edited or is not a transcript).
func Load(path string) (Header, []llm.Message, error) {
	h, msgs, _, err := load(path)
	return h, msgs, err
}

// load returns the header, the messages and the byte length of the
// complete lines. Every write ends with its newline, so a last line without
// one is a write cut short by a crash: it is dropped (and cut off by Open).
func load(path string) (Header, []llm.Message, int64, error) {
	var h Header
	f, err := os.Open(path)
	if err != nil {
		return h, nil, 0, fmt.Errorf("session: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 256<<10)
	var (
		msgs []llm.Message
		good int64
		n    int
	)
	for {
		line, rerr := r.ReadBytes('\n')
		if errors.Is(rerr, io.EOF) {
			break // a torn last line, or nothing
		}
		if rerr != nil {
			return h, nil, 0, fmt.Errorf("session: reading %s: %w", path, rerr)
		}
		good += int64(len(line))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		n++
		if n == 1 {
			if err := json.Unmarshal(line, &h); err != nil || h.Type != headerType {
				return h, nil, 0, fmt.Errorf("session: %s: %w", path, ErrNotTranscript)
			}
			continue
		}
		var m llm.Message
		if err := json.Unmarshal(line, &m); err != nil {
			return h, nil, 0, fmt.Errorf("session: %s line %d is damaged: %w", path, n, err)
		}
		msgs = append(msgs, m)
	}
	if n == 0 {
		return h, nil, 0, fmt.Errorf("session: %s has no header: %w", path, ErrNotTranscript)
	}
	return h, msgs, good, nil
}

// Append writes one message as one line, in a single write call, straight
// to the file (no user-space buffer), so a crash of this process loses at
// most that line.
func (w *Writer) Append(m llm.Message) error {
	return w.writeLine(m)
}

func (w *Writer) writeLine(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return errors.New("session: transcript is closed")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode adds the newline
		return fmt.Errorf("session: encoding: %w", err)
	}
	if _, err := w.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("session: writing %s: %w", w.path, err)
	}
	return nil
}

// Path is the transcript's file.
func (w *Writer) Path() string { return w.path }

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
