package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// Extra mounts (dependency caches) go only under CacheRoot, from real
// directories: a target elsewhere could shadow the workspace, the toolbox
// or the egress socket.
func TestSpecMounts(t *testing.T) {
	s := testSpec(t)
	cache := t.TempDir()
	s.Mounts = []Mount{{Source: cache, Target: CacheRoot + "/go"}}
	d, err := s.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	_, hc, err := containerConfig(d, UserChoice{UID: 1, GID: 1})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range hc.Mounts {
		if m.Source == cache && m.Target == CacheRoot+"/go" && !m.ReadOnly {
			found = true
		}
	}
	if !found {
		t.Fatalf("cache mount missing: %+v", hc.Mounts)
	}

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(cache, link); err != nil {
		t.Fatal(err)
	}
	for _, m := range []Mount{
		{Source: cache, Target: "/workspace"},
		{Source: cache, Target: ToolboxPath},
		{Source: cache, Target: CacheRoot},
		{Source: cache, Target: CacheRoot + "/../etc"},
		{Source: cache, Target: "cache/go"},
		{Source: "relative", Target: CacheRoot + "/x"},
		{Source: link, Target: CacheRoot + "/x"},
		{Source: filepath.Join(cache, "missing"), Target: CacheRoot + "/x"},
	} {
		s := testSpec(t)
		s.Mounts = []Mount{m}
		if _, err := s.withDefaults(); err == nil {
			t.Errorf("mount %+v was accepted", m)
		}
	}
}
