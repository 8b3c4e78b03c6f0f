package policy

import specs "github.com/opencontainers/runtime-spec/specs-go"

// Errno values the profile returns (Linux, all architectures).
const (
	errnoENOSYS       = 38
	errnoEAFNOSUPPORT = 97
)

// Socket families (socket(2)'s first argument) a sandbox may use: local
// sockets, the two IP families (the sandbox has only a loopback interface;
// egress goes through the proxy on it) and netlink, which C libraries use to
// list interfaces. Every other family (AF_VSOCK to the host's hypervisor,
// AF_PACKET, AF_ALG, AF_BLUETOOTH, AF_XDP, ...) is refused.
const (
	afUNIX    = 1
	afINET    = 2
	afINET6   = 10
	afNETLINK = 16
)

// SocketFamilies are the socket families the profile allows, by number.
var SocketFamilies = []uint64{afUNIX, afINET, afINET6, afNETLINK}

// Namespace flags of clone(2). A sandbox has no capabilities, so creating
// namespaces could only ever go through an unprivileged user namespace —
// exactly the kernel surface the strict profile closes.
const cloneNamespaceFlags = 0x00020000 | // CLONE_NEWNS
	0x02000000 | // CLONE_NEWCGROUP
	0x04000000 | // CLONE_NEWUTS
	0x08000000 | // CLONE_NEWIPC
	0x10000000 | // CLONE_NEWUSER
	0x20000000 | // CLONE_NEWPID
	0x40000000 // CLONE_NEWNET

// strictSyscalls are what ordinary development work inside a sandbox needs:
// files, memory, processes and threads, signals, time, local sockets and
// pipes, System V/POSIX IPC. Everything else is refused with EPERM.
// Deliberately absent (the engine's default profile allows some of them):
// ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, io_uring_*, bpf,
// perf_event_open, userfaultfd, keyctl/add_key/request_key, unshare, setns,
// mount and the new mount API, pivot_root, chroot, open_by_handle_at,
// name_to_handle_at, fanotify_init, syslog, module/kexec/reboot/swap calls,
// clock and host name setters, iopl/ioperm/modify_ldt, personality changes,
// NUMA page migration.
var strictSyscalls = []string{
	// files and directories
	"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
	"open", "openat", "openat2", "creat", "close", "close_range", "lseek", "_llseek",
	"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "stat64", "fstat64", "lstat64", "fstatat64", "statfs64", "fstatfs64",
	"access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
	"mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
	"link", "linkat", "symlink", "symlinkat", "mknod", "mknodat",
	"chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "chown32", "fchown32", "lchown32",
	"truncate", "ftruncate", "truncate64", "ftruncate64", "fallocate", "fadvise64", "fadvise64_64", "readahead",
	"fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
	"utime", "utimes", "utimensat", "futimesat", "getcwd", "chdir", "fchdir", "umask",
	"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
	"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
	"dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "fcntl64", "flock", "ioctl",
	"sendfile", "sendfile64", "splice", "tee", "vmsplice", "copy_file_range", "memfd_create",
	"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
	// waiting for events
	"select", "_newselect", "pselect6", "poll", "ppoll",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
	"eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create", "timerfd_settime", "timerfd_gettime",
	// memory
	"brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync",
	"mlock", "mlock2", "munlock", "mlockall", "munlockall", "membarrier",
	// processes and threads (clone is allowed below with a filter)
	"fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "waitpid",
	"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal",
	"getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
	"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
	"getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32", "getresgid32", "getgroups32",
	"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
	"setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32", "setresgid32", "setgroups32", "setfsuid32", "setfsgid32",
	"capget", "prctl", "arch_prctl", "set_thread_area", "get_thread_area", "set_tid_address",
	"set_robust_list", "get_robust_list", "rseq", "futex", "futex_time64", "futex_waitv",
	"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
	"sched_getscheduler", "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
	"sched_rr_get_interval", "sched_getattr", "sched_setattr", "getpriority", "setpriority",
	"ioprio_get", "ioprio_set", "getrlimit", "setrlimit", "ugetrlimit", "prlimit64", "getrusage", "times",
	"sysinfo", "uname", "olduname", "getrandom", "getcpu",
	// signals
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending",
	"rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
	"sigaction", "sigprocmask", "sigreturn", "sigsuspend", "sigpending", "sigaltstack", "pause", "restart_syscall",
	// time
	"nanosleep", "clock_nanosleep", "clock_nanosleep_time64", "clock_gettime", "clock_gettime64",
	"clock_getres", "clock_getres_time64", "gettimeofday", "time", "alarm", "setitimer", "getitimer",
	"timer_create", "timer_settime", "timer_settime64", "timer_gettime", "timer_gettime64", "timer_getoverrun", "timer_delete",
	// sockets (the sandbox has no network; unix sockets and socketpairs are
	// local); socket itself is allowed below for some families only
	"socketpair", "bind", "connect", "listen", "accept", "accept4",
	"getsockname", "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
	"shutdown", "setsockopt", "getsockopt", "socketcall",
	// System V and POSIX IPC (the sandbox has a private IPC namespace)
	"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semctl", "semtimedop", "semtimedop_time64",
	"msgget", "msgsnd", "msgrcv", "msgctl", "ipc",
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedsend_time64", "mq_timedreceive", "mq_timedreceive_time64",
	"mq_notify", "mq_getsetattr",
}

// StrictSeccomp is the project's seccomp profile, the one every sandbox
// gets unless its configuration opts out (sandbox.seccomp: default keeps
// the engine's own profile): an allowlist of what development work needs
// (see strictSyscalls; git, make, a C compiler, Go, Python and Node build
// and test under it), clone without namespace flags, clone3 answered with
// ENOSYS so that C libraries fall back to the filtered clone, socket only
// for SocketFamilies (EAFNOSUPPORT for families above AF_NETLINK, EPERM for
// the rest), and personality only to query or keep the Linux default.
// Everything else fails with EPERM: io_uring, ptrace, process_vm_readv and
// writev, bpf, user namespaces among them (the engine's default profile
// allows the first three). It lists no architectures, so only the native
// one is allowed (no 32-bit syscall entry on a 64-bit host).
func StrictSeccomp() *specs.LinuxSeccomp {
	enosys := uint(errnoENOSYS)
	eafnosupport := uint(errnoEAFNOSUPPORT)
	p := &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno,
		Syscalls: []specs.LinuxSyscall{
			{Names: append([]string(nil), strictSyscalls...), Action: specs.ActAllow},
			{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual},
			}},
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
			{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: 0, Value: 0, Op: specs.OpEqualTo}, // PER_LINUX
			}},
			{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: 0, Value: 0xffffffff, Op: specs.OpEqualTo}, // query
			}},
			{Names: []string{"socket"}, Action: specs.ActErrno, ErrnoRet: &eafnosupport, Args: []specs.LinuxSeccompArg{
				{Index: 0, Value: afNETLINK, Op: specs.OpGreaterThan},
			}},
		},
	}
	for _, fam := range SocketFamilies {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
			{Index: 0, Value: fam, Op: specs.OpEqualTo},
		}})
	}
	return p
}
