package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSaveLoadResolve(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.NewID()
	if err != nil || len(id) != 6 {
		t.Fatalf("id %q %v", id, err)
	}
	if _, err := s.Load(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("reserved id loads: %v", err)
	}
	tk := &Task{ID: id, Prompt: "p", State: Running, Branch: "agent/p-" + id, Created: time.Now()}
	if err := s.Save(tk); err != nil {
		t.Fatal(err)
	}
	got, err := s.Resolve(id[:3])
	if err != nil || got.Prompt != "p" || got.State != Running {
		t.Fatalf("resolve prefix: %+v %v", got, err)
	}
	if got, err := s.Resolve(tk.Branch); err != nil || got.ID != id {
		t.Errorf("resolve branch: %v", err)
	}
	if _, err := s.Resolve("zzzz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := s.Resolve("../etc/passwd"); !errors.Is(err, ErrNotFound) {
		t.Errorf("path traversal id: %v", err)
	}
	// Ambiguous prefix.
	for _, other := range []string{"abc001", "abc002"} {
		if err := s.Save(&Task{ID: other, Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Resolve("abc"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("ambiguous: %v", err)
	}
	ts, _ := s.List()
	if len(ts) != 3 {
		t.Errorf("list = %d", len(ts))
	}
	// No temporary files are left behind.
	ents, _ := os.ReadDir(s.Dir())
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("left %s", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), id+".json")); err != nil {
		t.Error(err)
	}
}

func TestClaimAndAlive(t *testing.T) {
	s, _ := Open(t.TempDir())
	if s.Alive("abc123") {
		t.Fatal("unclaimed task alive")
	}
	release, err := s.Claim("abc123")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Alive("abc123") {
		t.Error("claimed task not alive")
	}
	if _, err := s.Claim("abc123"); err == nil {
		t.Error("double claim")
	}
	release()
	if s.Alive("abc123") {
		t.Error("released task alive")
	}
}

// TestPruneReservations: a process killed between reserving an id and
// saving its record left an empty placeholder that no command listed;
// PruneReservations removes it, but not one a live process claims.
func TestPruneReservations(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dead, err := s.NewID()
	if err != nil {
		t.Fatal(err)
	}
	live, err := s.NewID()
	if err != nil {
		t.Fatal(err)
	}
	release, err := s.Claim(live)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	got, err := s.PruneReservations(0)
	if err != nil || len(got) != 1 || got[0] != dead {
		t.Fatalf("PruneReservations = %v, %v; want [%s]", got, err, dead)
	}
	if _, err := os.Stat(s.path(live)); err != nil {
		t.Error("a claimed reservation was removed")
	}
}
