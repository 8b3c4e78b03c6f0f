package policy

// Limits are the resource limits of one sandbox container.
type Limits struct {
	// MemoryBytes is the memory cgroup limit (swap is set equal, so none).
	MemoryBytes int64 `json:"memory_bytes"`
	// NanoCPUs is the CPU quota in billionths of a CPU.
	NanoCPUs int64 `json:"nano_cpus"`
	// Pids caps the number of processes and threads (cgroup pids limit;
	// ulimit nproc would count per host UID across containers).
	Pids int64 `json:"pids"`
	// TmpfsBytes caps each tmpfs (/tmp and the home directory).
	TmpfsBytes int64 `json:"tmpfs_bytes"`
}

// DefaultLimits are sane for a coding task on a workstation: enough to build
// and test a typical project, small enough that a runaway cannot starve the
// host.
func DefaultLimits() Limits {
	return Limits{
		MemoryBytes: 4 << 30,
		NanoCPUs:    2_000_000_000,
		Pids:        512,
		TmpfsBytes:  1 << 30,
	}
}

// OrDefaults returns l with every limit that is not set (zero or less)
// taken from DefaultLimits.
func (l Limits) OrDefaults() Limits {
	d := DefaultLimits()
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.NanoCPUs <= 0 {
		l.NanoCPUs = d.NanoCPUs
	}
	if l.Pids <= 0 {
		l.Pids = d.Pids
	}
	if l.TmpfsBytes <= 0 {
		l.TmpfsBytes = d.TmpfsBytes
	}
	return l
}
