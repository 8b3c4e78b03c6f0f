package toolbox

import (
	"strings"
	"testing"
	"time"
)

// FreezeAll signals every process of the caller's uid: outside a sandbox
// (here, the test's own machine) it must refuse before sending anything.
func TestFreezeAllRefusesOutsideASandbox(t *testing.T) {
	if err := FreezeAll(time.Second); err == nil || !strings.Contains(err.Error(), "not in a sandbox") {
		t.Fatalf("FreezeAll outside a sandbox: %v", err)
	}
	if err := ThawAll(); err == nil || !strings.Contains(err.Error(), "not in a sandbox") {
		t.Fatalf("ThawAll outside a sandbox: %v", err)
	}
}

func TestParseStat(t *testing.T) {
	for line, want := range map[string]byte{
		"12 (sh) S 1 12 12 0":       'S',
		"13 (a) b) (c) T 1 13 13 0": 'T',
		"14 (bash) t 1 14":          't',
		"15 (x y) Z 1":              'Z',
		"16 (weird)) D 1 16":        'D',
	} {
		st, _, ok := parseStat([]byte(line))
		if !ok || st != want {
			t.Errorf("parseStat(%q) = %c %v, want %c", line, st, ok, want)
		}
	}
	if _, _, ok := parseStat([]byte("17 (trunc")); ok {
		t.Error("truncated stat parsed")
	}
}
