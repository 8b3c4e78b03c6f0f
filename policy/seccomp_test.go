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
	for _, n := range []string{"ptrace", "io_uring_setup", "bpf", "unshare", "setns", "mount", "keyctl", "userfaultfd", "perf_event_open", "process_vm_readv", "process_vm_writev", "io_uring_enter", "io_uring_register", "kcmp", "pidfd_getfd", "socket", "clone", "clone3", "personality"} {
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

func TestStrictSeccompSocketFamilies(t *testing.T) {
	allowed := map[uint64]bool{}
	refusedAbove := uint64(0)
	for _, s := range StrictSeccomp().Syscalls {
		if len(s.Names) != 1 || s.Names[0] != "socket" {
			continue
		}
		if len(s.Args) != 1 || s.Args[0].Index != 0 {
			t.Fatalf("socket rule %+v", s)
		}
		switch {
		case s.Action == "SCMP_ACT_ALLOW" && s.Args[0].Op == "SCMP_CMP_EQ":
			allowed[s.Args[0].Value] = true
		case s.Action == "SCMP_ACT_ERRNO" && s.Args[0].Op == "SCMP_CMP_GT" && s.ErrnoRet != nil && *s.ErrnoRet == 97:
			refusedAbove = s.Args[0].Value
		default:
			t.Errorf("unexpected socket rule %+v", s)
		}
	}
	for fam, want := range map[uint64]bool{1: true, 2: true, 10: true, 16: true, 17: false, 40: false, 38: false, 15: false} {
		if allowed[fam] != want {
			t.Errorf("family %d allowed=%v, want %v", fam, allowed[fam], want)
		}
	}
	if refusedAbove != 16 {
		t.Errorf("families above %d get EAFNOSUPPORT, want above AF_NETLINK (16)", refusedAbove)
	}
}
