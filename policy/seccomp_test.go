package policy

import "testing"

func TestStrictSeccomp(t *testing.T) {
	p := StrictSeccomp()
	if p.DefaultAction != "SCMP_ACT_ERRNO" || len(p.Architectures) != 0 {
		t.Errorf("default %s arches %v", p.DefaultAction, p.Architectures)
	}
	allowed := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action == "SCMP_ACT_ALLOW" && len(s.Args) == 0 {
			for _, n := range s.Names {
				if allowed[n] {
					t.Errorf("%s listed twice", n)
				}
				allowed[n] = true
			}
		}
	}
	for _, n := range []string{"ptrace", "io_uring_setup", "bpf", "unshare", "setns", "mount", "keyctl", "userfaultfd", "perf_event_open", "process_vm_readv", "clone", "clone3", "personality"} {
		if allowed[n] {
			t.Errorf("%s allowed without a filter", n)
		}
	}
	for _, n := range []string{"read", "execve", "futex", "openat", "wait4", "pipe2"} {
		if !allowed[n] {
			t.Errorf("%s not allowed", n)
		}
	}
	// A fresh copy each time: callers may change it.
	p.Syscalls[0].Names[0] = "changed"
	if StrictSeccomp().Syscalls[0].Names[0] == "changed" {
		t.Error("StrictSeccomp shares its slices")
	}
}
