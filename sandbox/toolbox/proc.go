package toolbox

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// killGroupFor bounds how long killGroup keeps trying; members forking as
// fast as they can (a fork bomb) are all gone long before that.
const killGroupFor = 5 * time.Second

// killGroup SIGKILLs process group pgid again and again until no live
// member remains: a member that forks while the signal is delivered can
// leave a child behind, so one kill is not enough. Zombies do not count:
// they are dead and wait only for their parent (or init) to reap them.
func killGroup(pgid int) {
	if pgid <= 1 {
		return // never signal our own group or every process
	}
	deadline := time.Now().Add(killGroupFor)
	pause := 200 * time.Microsecond
	for {
		err := syscall.Kill(-pgid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if !groupAlive(pgid) || time.Now().After(deadline) {
			return
		}
		time.Sleep(pause)
		pause = min(pause*2, 10*time.Millisecond)
	}
}

// groupAlive reports whether process group pgid has a member that is not a
// zombie, by scanning /proc (no new process needed: a fork bomb may have
// used up the pids limit).
func groupAlive(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return true // cannot tell; keep killing until the deadline
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return true
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		state, _, pg, ok := procStat(name)
		if ok && pg == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procStat reads the state, parent and process group of /proc/PID/stat.
// The command name may hold spaces and parentheses, so fields are counted
// from the last ')'.
func procStat(pid string) (state byte, ppid, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	// state ppid pgrp ...
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, 0, false
	}
	pp, err1 := strconv.Atoi(string(f[1]))
	pg, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return 0, 0, 0, false
	}
	return f[0][0], pp, pg, true
}

var subreaperOnce sync.Once

// startShell starts a command's shell and records it as running. Starting
// and sweeping orphans share a lock, so a sweep never mistakes a shell
// that was just forked for an orphan.
func (s *Server) startShell(cmd *exec.Cmd) error {
	if s.KillOrphans {
		subreaperOnce.Do(func() {
			// PR_SET_CHILD_SUBREAPER: orphans of our descendants become our
			// children instead of init's, where we can find and end them.
			_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, 36, 1, 0)
		})
	}
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	if s.shells == nil {
		s.shells = map[int]struct{}{}
	}
	s.shells[cmd.Process.Pid] = struct{}{}
	preferForOOM(cmd.Process.Pid)
	return nil
}

// preferForOOM makes the command (and everything it forks from now on,
// which inherits the value) the out-of-memory killer's first choice, so a
// memory bomb kills itself and not the toolbox or the container's init.
// Raising the score needs no privilege. Best effort: a child the shell
// forks in the microseconds before this write keeps the default score.
func preferForOOM(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000\n"), 0)
}

// shellDone records that a command's shell was reaped and, when it was the
// last running command, ends every orphan left behind.
func (s *Server) shellDone(pid int) {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	delete(s.shells, pid)
	if s.KillOrphans && len(s.shells) == 0 {
		killOrphans(s.background)
	}
}

// killOrphans SIGKILLs and reaps every child of this process, repeatedly:
// killing an orphan re-parents its own children to us. With no command
// running, every child is an orphan that escaped its command's group;
// members of the process groups in keep (background processes, which end
// through process_stop or the session's end) are left alone.
func killOrphans(keep map[int]struct{}) {
	self := os.Getpid()
	deadline := time.Now().Add(killGroupFor)
	for time.Now().Before(deadline) {
		kids := childrenOf(self, keep)
		if len(kids) == 0 {
			return
		}
		for _, k := range kids {
			if !k.zombie {
				_ = syscall.Kill(k.pid, syscall.SIGKILL)
			}
		}
		for _, k := range kids {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(k.pid, &ws, syscall.WNOHANG, nil)
		}
		time.Sleep(time.Millisecond)
	}
}

type child struct {
	pid    int
	zombie bool
}

func childrenOf(ppid int, keep map[int]struct{}) []child {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	var kids []child
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		state, pp, pg, ok := procStat(name)
		if !ok || pp != ppid {
			continue
		}
		if _, kept := keep[pg]; kept {
			continue
		}
		pid, _ := strconv.Atoi(name)
		kids = append(kids, child{pid: pid, zombie: state == 'Z'})
	}
	return kids
}

// oomKills returns the memory cgroup's count of out-of-memory kills, or -1
// when it cannot be read (no cgroup mounted, old kernel). cgroup v1 has it
// as "oom_kill N" in memory/memory.oom_control, v2 in memory.events.
func (s *Server) oomKills() int64 {
	dir := s.CgroupDir
	if dir == "" {
		dir = "/sys/fs/cgroup"
	}
	for _, p := range []string{
		filepath.Join(dir, "memory", "memory.oom_control"),
		filepath.Join(dir, "memory.events"),
	} {
		if n, ok := readCounter(p, "oom_kill"); ok {
			return n
		}
	}
	return -1
}

func readCounter(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		if ok && string(k) == key {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
