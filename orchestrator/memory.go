package orchestrator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/orchestrator/store"
)

// MaxMemoryBytes caps a repository's memory file; remember refuses to grow
// it further (the user trims it with `agent memory --edit`).
const MaxMemoryBytes = 64 << 10

// MemoryPath is the file holding the memory of the repository whose git
// directory is repoGitDir, under the state directory: never inside the
// repository, where the sandbox (and every branch) would see it.
func MemoryPath(stateDir, repoGitDir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(repoGitDir)))
	return filepath.Join(stateDir, "memory", hex.EncodeToString(sum[:8])+".md")
}

// repoMemory is agent.Memory on a file. Notes are appended one per line
// with O_APPEND (a note is written whole or not at all in practice: one
// small write), so no journal is needed: a crash loses at most the note
// being written, and the file never holds a half-applied change of state.
type repoMemory struct {
	path string
	mu   sync.Mutex
}

var _ agent.Memory = (*repoMemory)(nil)

func (o *Orchestrator) memoryFor(t *store.Task) agent.Memory {
	if t.RepoGitDir == "" {
		return nil
	}
	return &repoMemory{path: MemoryPath(o.opts.StateDir, t.RepoGitDir)}
}

func (m *repoMemory) Notes() (string, error) {
	f, err := os.Open(m.path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxMemoryBytes+1))
	return string(b), err
}

func (m *repoMemory) Remember(note string) error {
	note = agent.CleanNote(note)
	if note == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(m.path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(m.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if st, err := f.Stat(); err == nil && st.Size() > MaxMemoryBytes {
		f.Close()
		return fmt.Errorf("the memory file %s is full (%d bytes); trim it with `agent memory --edit`", m.path, st.Size())
	}
	_, err = fmt.Fprintf(f, "- %s (%s)\n", note, time.Now().UTC().Format("2006-01-02"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
