package sandbox

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The signal freeze's holders, without an engine: what the toolbox would
// be asked to do is recorded. Another agent process is played by a second
// open file description of the same lock file (flock(2) locks conflict
// between descriptions as between processes).
func TestSignalFreezeHolders(t *testing.T) {
	dir := t.TempDir()
	old := freezeLockDir
	freezeLockDir = func() string { return dir }
	t.Cleanup(func() { freezeLockDir = old })

	var mu sync.Mutex
	var calls []string
	e := &Engine{SignalFreeze: true, signalRun: func(_ context.Context, _, mode string) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, mode)
		return nil
	}}
	took := func() []string {
		mu.Lock()
		defer mu.Unlock()
		c := calls
		calls = nil
		return c
	}
	ctx := context.Background()
	const id = "c0ffee"

	// Another process holds the sandbox frozen: a Thaw here must not
	// continue it, and execs are refused.
	other, err := openFreezeLock(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := e.Thaw(ctx, id); err != nil || len(took()) != 0 {
		t.Fatalf("thaw of another holder's freeze: %v, toolbox asked %v", err, calls)
	}
	if _, err := e.Exec(ctx, id, ExecOptions{Cmd: []string{"true"}}); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("exec while another process holds the freeze: %v", err)
	}
	// Freeze waits for the other holder's thaw, then freezes anew.
	done := make(chan error, 1)
	go func() { done <- e.Freeze(ctx, id) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("freeze returned while another process held the sandbox: %v", err)
	default:
	}
	other.Close() // the other holder's thaw (or death)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := took(); len(c) != 1 || c[0] != "freeze" {
		t.Fatalf("toolbox asked %v, want one freeze", c)
	}
	// Held here: another process cannot take it, and this process's own
	// execs are refused until the thaw.
	probe, err := os.Open(other.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := syscall.Flock(int(probe.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("another process could take a held freeze: %v", err)
	}
	if err := e.refuseIfFrozen(id); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("frozen sandbox not refused: %v", err)
	}
	if err := e.Thaw(ctx, id); err != nil {
		t.Fatal(err)
	}
	if c := took(); len(c) != 1 || c[0] != "thaw" {
		t.Fatalf("toolbox asked %v, want one thaw", c)
	}
	if err := e.refuseIfFrozen(id); err != nil {
		t.Fatalf("thawed sandbox refused: %v", err)
	}
	// Nobody holds it: a Thaw continues it anyway (a holder that died
	// left it stopped).
	if err := e.Thaw(ctx, id); err != nil || len(took()) != 1 {
		t.Fatalf("thaw with no holder: %v", err)
	}
}
