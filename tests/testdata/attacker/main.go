// Command attacker is the hostile process of the freeze tests: started in a
// sandbox, it outlives the agent's tool calls, waits (inotify) for the
// host's first touch of a watched path in the workspace and, at that
// moment, swaps a directory of the workspace for a symlink to a host path.
//
//	attacker -watch PATH -mask open|create -swap DIR -to TARGET -ready FILE -probe FILE
//
// It watches PATH and PROBE, then opens PROBE until its own open is
// reported, so that when it creates READY the watch is known to be in
// place. The first event on PATH makes it rename DIR to DIR.real, put a
// symlink to TARGET in its place, and exit.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	watch := flag.String("watch", "", "path whose event triggers the swap")
	mask := flag.String("mask", "open", "open (IN_OPEN on a file) or create (IN_CREATE in a directory)")
	swap := flag.String("swap", "", "directory to replace by a symlink")
	to := flag.String("to", "", "symlink target (a host path)")
	ready := flag.String("ready", "", "file created once the watch is in place")
	probe := flag.String("probe", "", "file used to check that the watch is in place")
	flag.Parse()
	// Leave no trace in the workspace the host will commit.
	_ = os.Remove(os.Args[0])
	if err := run(*watch, *mask, *swap, *to, *ready, *probe); err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		os.Exit(1)
	}
}

func run(watch, mask, swap, to, ready, probe string) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	m := uint32(unix.IN_OPEN)
	if mask == "create" {
		m = unix.IN_CREATE
	}
	wd, err := unix.InotifyAddWatch(fd, watch, m)
	if err != nil {
		return fmt.Errorf("watching %s: %w", watch, err)
	}
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return err
	}
	pwd, err := unix.InotifyAddWatch(fd, probe, unix.IN_OPEN)
	if err != nil {
		return err
	}
	go func() {
		for {
			if f, err := os.Open(probe); err == nil {
				_ = f.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	buf := make([]byte, 64<<10)
	armed := false
	for {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return err
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case int(ev.Wd) == pwd && !armed:
				armed = true
				if err := os.WriteFile(ready, nil, 0o644); err != nil {
					return err
				}
			case int(ev.Wd) == wd && armed:
				if err := os.Rename(swap, swap+".real"); err != nil {
					return err
				}
				if err := os.Symlink(to, swap); err != nil {
					return err
				}
				fmt.Println("swapped", swap, "->", to)
				return nil
			}
		}
	}
}
