package orchestrator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// ProposedMemoryPath holds the notes task taskID wrote with remember: they
// are proposals until the user keeps or merges the task (AdoptNotes) and
// go when it is discarded (DropNotes). A discarded task thereby leaves
// nothing in any later task's prompt.
func ProposedMemoryPath(stateDir, repoGitDir, taskID string) string {
	p := MemoryPath(stateDir, repoGitDir)
	return p[:len(p)-len(".md")] + ".task-" + taskID + ".md"
}

// repoMemory is agent.Memory on a file. Notes are appended one per line
// with O_APPEND (a note is written whole or not at all in practice: one
// small write), so no journal is needed: a crash loses at most the note
// being written, and the file never holds a half-applied change of state.
// A task writes to its own proposals (path); it reads the repository's
// memory (kept) and them.
type repoMemory struct {
	path, kept, task string
	mu               sync.Mutex
}

var _ agent.Memory = (*repoMemory)(nil)

func (o *Orchestrator) memoryFor(t *store.Task) agent.Memory {
	if t.RepoGitDir == "" {
		return nil
	}
	kept := MemoryPath(o.opts.StateDir, t.RepoGitDir)
	if o.opts.Unsafe.KeepNotes {
		return &repoMemory{path: kept, task: t.ID}
	}
	return &repoMemory{path: ProposedMemoryPath(o.opts.StateDir, t.RepoGitDir, t.ID), kept: kept, task: t.ID}
}

func readNotes(path string) (string, error) {
	f, err := os.Open(path)
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

func (m *repoMemory) Notes() (string, error) {
	own, err := readNotes(m.path)
	if err != nil || m.kept == "" {
		return own, err
	}
	kept, err := readNotes(m.kept)
	return kept + own, err
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
	_, err = fmt.Fprintf(f, "- %s (task %s, %s)\n", note, m.task, time.Now().UTC().Format("2006-01-02"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ProposedNotes returns the notes task t proposed, one per line.
func (o *Orchestrator) ProposedNotes(t *store.Task) []string {
	if t.RepoGitDir == "" {
		return nil
	}
	s, _ := readNotes(ProposedMemoryPath(o.opts.StateDir, t.RepoGitDir, t.ID))
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// adoptNotes moves the notes task t proposed into its repository's
// memory: the user kept or merged the task. A note already there is not
// added again, so a kill between the append and the removal converges.
func (o *Orchestrator) adoptNotes(t *store.Task) error {
	notes := o.ProposedNotes(t)
	if len(notes) == 0 {
		return nil
	}
	kept := MemoryPath(o.opts.StateDir, t.RepoGitDir)
	have, err := readNotes(kept)
	if err != nil {
		return err
	}
	old := map[string]bool{}
	for _, l := range strings.Split(have, "\n") {
		old[strings.TrimSpace(l)] = true
	}
	var add strings.Builder
	for _, n := range notes {
		if !old[n] {
			add.WriteString(n + "\n")
		}
	}
	if add.Len() > 0 {
		f, err := os.OpenFile(kept, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		_, err = f.WriteString(add.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return o.dropNotes(t)
}

// dropNotes removes the notes task t proposed.
func (o *Orchestrator) dropNotes(t *store.Task) error {
	if t.RepoGitDir == "" {
		return nil
	}
	err := os.Remove(ProposedMemoryPath(o.opts.StateDir, t.RepoGitDir, t.ID))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
