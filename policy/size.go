package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a byte size as people write it in configuration: a plain
// number of bytes, or a number with a binary unit k, m, g or t (optionally
// followed by "b" or "ib", any case): "512m", "4g", "1.5GiB", "65536".
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("size %q is empty: use a number of bytes or e.g. 512m, 4g", s)
	}
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	switch t[len(t)-1] {
	case 'k':
		mult = 1 << 10
	case 'm':
		mult = 1 << 20
	case 'g':
		mult = 1 << 30
	case 't':
		mult = 1 << 40
	}
	if mult != 1 {
		t = t[:len(t)-1]
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || n < 0 || math.IsNaN(n) || math.IsInf(n, 0) || n*float64(mult) > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is not a size: use a number of bytes or e.g. 512m, 4g", s)
	}
	return int64(n * float64(mult)), nil
}

// LimitsFrom builds Limits from configuration values (memory and tmpfs as
// sizes, CPUs as a fraction of cores, pids as a count). Empty or zero values
// take the DefaultLimits value; negative or unparsable ones are errors.
func LimitsFrom(memory string, cpus float64, pids int64, tmpfs string) (Limits, error) {
	l := DefaultLimits()
	if strings.TrimSpace(memory) != "" {
		n, err := ParseSize(memory)
		if err != nil {
			return l, fmt.Errorf("memory limit: %w", err)
		}
		if n > 0 && n < 6<<20 {
			return l, fmt.Errorf("memory limit %q is below the engine's minimum of 6m", memory)
		}
		if n > 0 {
			l.MemoryBytes = n
		}
	}
	switch {
	case cpus < 0 || math.IsNaN(cpus) || math.IsInf(cpus, 0):
		return l, fmt.Errorf("cpus %v must be a positive number of cores", cpus)
	case cpus > 0:
		l.NanoCPUs = int64(cpus * 1e9)
	}
	switch {
	case pids < 0:
		return l, fmt.Errorf("pids limit %d must be positive", pids)
	case pids > 0:
		l.Pids = pids
	}
	if strings.TrimSpace(tmpfs) != "" {
		n, err := ParseSize(tmpfs)
		if err != nil {
			return l, fmt.Errorf("tmpfs size: %w", err)
		}
		if n > 0 {
			l.TmpfsBytes = n
		}
	}
	return l, nil
}
