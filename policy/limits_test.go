package policy

import "testing"

func TestLimitsOrDefaults(t *testing.T) {
	d := DefaultLimits()
	if got := (Limits{}).OrDefaults(); got != d {
		t.Errorf("unset limits = %+v, want the defaults %+v", got, d)
	}
	set := Limits{MemoryBytes: 1 << 20, NanoCPUs: 5e8, Pids: 7, TmpfsBytes: 1 << 10}
	if got := set.OrDefaults(); got != set {
		t.Errorf("set limits = %+v, want them kept %+v", got, set)
	}
	if got := (Limits{Pids: -1, MemoryBytes: 3}).OrDefaults(); got.Pids != d.Pids || got.MemoryBytes != 3 {
		t.Errorf("mixed = %+v", got)
	}
}
