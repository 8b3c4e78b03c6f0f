package llamaserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// GPUMemory is one host GPU's memory, in MiB.
type GPUMemory struct {
	// Index is the GPU's index as the driver numbers it (nvidia-smi's
	// index; N of /sys/class/drm/cardN for AMD).
	Index string
	Total int64
	Used  int64
	Free  int64
}

// nvidiaSMIArgs is the fixed query: no shell, no user input.
var nvidiaSMIArgs = []string{"--query-gpu=index,memory.total,memory.used,memory.free", "--format=csv,noheader,nounits"}

// ParseNvidiaSMI reads the output of nvidia-smi with nvidiaSMIArgs.
func ParseNvidiaSMI(out string) ([]GPUMemory, error) {
	var gpus []GPUMemory
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("nvidia-smi: unexpected line %q", line)
		}
		var n [3]int64
		for i := range n {
			v, err := strconv.ParseInt(strings.TrimSpace(f[i+1]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("nvidia-smi: unexpected line %q", line)
			}
			n[i] = v
		}
		gpus = append(gpus, GPUMemory{Index: strings.TrimSpace(f[0]), Total: n[0], Used: n[1], Free: n[2]})
	}
	if len(gpus) == 0 {
		return nil, errors.New("nvidia-smi listed no GPUs")
	}
	return gpus, nil
}

// ReadSysfsVRAM reads AMD GPUs' memory from drm (/sys/class/drm):
// cardN/device/mem_info_vram_{total,used}, in bytes.
func ReadSysfsVRAM(drm string) ([]GPUMemory, error) {
	cards, _ := filepath.Glob(filepath.Join(drm, "card*"))
	var gpus []GPUMemory
	for _, c := range cards {
		idx := strings.TrimPrefix(filepath.Base(c), "card")
		if _, err := strconv.Atoi(idx); err != nil {
			continue // card0-DP-1 and the like: connectors
		}
		total, err1 := readSysfsInt(filepath.Join(c, "device", "mem_info_vram_total"))
		used, err2 := readSysfsInt(filepath.Join(c, "device", "mem_info_vram_used"))
		if err1 != nil || err2 != nil {
			continue
		}
		t, u := total>>20, used>>20
		gpus = append(gpus, GPUMemory{Index: idx, Total: t, Used: u, Free: t - u})
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("no GPU memory in %s", drm)
	}
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	return gpus, nil
}

func readSysfsInt(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// HostGPUMemory asks the host's driver for its GPUs' memory: nvidia-smi
// when it is in PATH (a fixed query, bounded output, a timeout), else
// AMD's sysfs files under drm.
func HostGPUMemory(ctx context.Context, drm string) ([]GPUMemory, error) {
	if smi, err := exec.LookPath("nvidia-smi"); err == nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, smi, nvidiaSMIArgs...)
		var out bytes.Buffer
		cmd.Stdout = &limitWriter{w: &out, n: 64 << 10}
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("nvidia-smi: %w", err)
		}
		return ParseNvidiaSMI(out.String())
	}
	return ReadSysfsVRAM(drm)
}

// serverGPUSet is which host GPUs the server's container was given, from
// Status.Devices: all of them (device nodes, "nvidia: all") or the listed
// ids; ok is false when it has none.
func serverGPUSet(devs []string) (all bool, ids []string, ok bool) {
	for _, d := range devs {
		drv, v, found := strings.Cut(d, ": ")
		if !found || drv == "" || v == "all" {
			return true, nil, true
		}
		ids = append(ids, strings.Split(v, ",")...)
	}
	return false, ids, len(ids) > 0
}

// CheckVRAM decides whether a task's sandbox may have the GPUs task,
// given the managed server (nil when none is known), the host's GPU
// memory (memErr when it could not be read) and the free memory the
// server must keep on its GPUs (reserveMiB). It refuses when a GPU the
// two would share has less free than the reserve; it returns a warning
// when it could not tell.
func CheckVRAM(task GPUs, server *Status, mem []GPUMemory, memErr error, reserveMiB int64) (warning string, err error) {
	if task.Mode != GPUNvidia || server == nil {
		return "", nil
	}
	switch server.State {
	case StateAbsent, StateStopped:
		return "", nil
	}
	if server.Offload != nil && (server.Offload.NoGPU || (server.Offload.Known && !server.Offload.OnGPU())) {
		return "", nil // the server runs on the CPU
	}
	sAll, sIDs, ok := serverGPUSet(server.Devices)
	if !ok {
		return "", nil
	}
	shares := func(id string) bool {
		if sAll {
			return true
		}
		for _, s := range sIDs {
			if s == id {
				return true
			}
		}
		return false
	}
	var shared []string
	if task.All {
		if sAll {
			shared = []string{"all"}
		} else {
			shared = sIDs
		}
	} else {
		for _, id := range task.IDs {
			if shares(id) {
				shared = append(shared, id)
			}
		}
	}
	if len(shared) == 0 {
		return "", nil
	}
	if memErr != nil || len(mem) == 0 {
		why := "no GPU listed"
		if memErr != nil {
			why = memErr.Error()
		}
		return fmt.Sprintf("could not read GPU memory (%s): the sandbox shares the model server's GPU without a VRAM check", why), nil
	}
	used := ""
	if server.Offload != nil && server.Offload.VRAMMiB > 0 {
		used = fmt.Sprintf(", of which the model server allocated %.0f MiB", server.Offload.VRAMMiB)
	}
	var unknown []string
	for _, g := range mem {
		in := shared[0] == "all"
		for _, id := range shared {
			if id == g.Index {
				in = true
			}
		}
		if !in {
			continue
		}
		if g.Free < reserveMiB {
			return "", fmt.Errorf("GPU %s has %d MiB free of %d MiB (%d MiB used%s): giving it to the task's sandbox would leave the model server less than sandbox.gpu_reserve (%d MiB); use --gpus with another GPU id, stop the server (agent llm down), or lower sandbox.gpu_reserve",
				g.Index, g.Free, g.Total, g.Used, used, reserveMiB)
		}
	}
	if shared[0] != "all" {
		for _, id := range shared {
			found := false
			for _, g := range mem {
				found = found || g.Index == id
			}
			if !found {
				unknown = append(unknown, id)
			}
		}
	}
	if len(unknown) > 0 {
		return fmt.Sprintf("could not read the memory of GPU %s: the sandbox shares the model server's GPU without a VRAM check", strings.Join(unknown, ",")), nil
	}
	return "", nil
}
