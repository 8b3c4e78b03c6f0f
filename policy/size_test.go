package policy

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"65536": 65536, "512m": 512 << 20, "4g": 4 << 30, "4G": 4 << 30, "1.5GiB": 3 << 29,
		"64kb": 64 << 10, " 2t ": 2 << 40, "0": 0,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "g", "-1m", "lots", "1x", "NaN", "1e30g"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func TestLimitsFrom(t *testing.T) {
	l, err := LimitsFrom("", 0, 0, "")
	if err != nil || l != DefaultLimits() {
		t.Fatalf("empty config: %+v, %v; want defaults", l, err)
	}
	l, err = LimitsFrom("256m", 0.5, 64, "16m")
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{MemoryBytes: 256 << 20, NanoCPUs: 500_000_000, Pids: 64, TmpfsBytes: 16 << 20}
	if l != want {
		t.Fatalf("got %+v, want %+v", l, want)
	}
	for _, bad := range []struct {
		mem   string
		cpus  float64
		pids  int64
		tmpfs string
	}{{"1k", 0, 0, ""}, {"x", 0, 0, ""}, {"", -1, 0, ""}, {"", 0, -5, ""}, {"", 0, 0, "y"}} {
		if _, err := LimitsFrom(bad.mem, bad.cpus, bad.pids, bad.tmpfs); err == nil {
			t.Errorf("LimitsFrom(%+v) accepted", bad)
		}
	}
}
