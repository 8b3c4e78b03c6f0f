package llamaserver

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Offload is where llama-server put the model, read from the lines it
// logs while loading. It is the only place that tells a GPU server that
// really uses its GPU from one that quietly fell back to the CPU (a CUDA
// build without the driver library, a Vulkan build without a device).
type Offload struct {
	// Backends are the ggml backends the server loaded ("CUDA", "Vulkan",
	// "CPU").
	Backends []string `json:"backends,omitempty"`
	// Devices are the devices llama-server uses for the model, as it
	// names them ("CUDA0 (NVIDIA H100 80GB HBM3)").
	Devices []string `json:"devices,omitempty"`
	// Layers of TotalLayers were offloaded to a GPU; Known is false when
	// the log said nothing about offloading (an older build, a log that
	// rotated away).
	Layers      int  `json:"layers"`
	TotalLayers int  `json:"total_layers"`
	Known       bool `json:"known"`
	// NoGPU is set when llama-server said it found no usable GPU.
	NoGPU bool `json:"no_gpu,omitempty"`
	// VRAMMiB is what the server allocated on GPU devices: model weights,
	// KV cache and compute buffers.
	VRAMMiB float64 `json:"vram_mib"`
	// Lines are the log lines these figures come from (raw server output:
	// escape before display).
	Lines []string `json:"lines,omitempty"`
}

var (
	reLoadedBackend = regexp.MustCompile(`load_backend: loaded (\S+) backend`)
	reUsingDevice   = regexp.MustCompile(`using device (\S+) \((.*?)\)(?: \([^)]*\))? - \d+ MiB free`)
	reOffloaded     = regexp.MustCompile(`offloaded (\d+)/(\d+) layers to GPU`)
	reBuffer        = regexp.MustCompile(`\s(\S+) (?:model|KV|compute|RS|output) buffer size\s*=\s*([0-9.]+) MiB`)
	reFoundDevices  = regexp.MustCompile(`(?i)(ggml_cuda_init: found \d+ CUDA devices|ggml_vulkan: Found \d+ Vulkan devices|ggml_vulkan: \d+ = |Device \d+: )`)
	reNoGPU         = regexp.MustCompile(`no usable GPU found`)
)

// ParseOffload reads llama-server's start-up log.
func ParseOffload(log string) Offload {
	var o Offload
	gpu := map[string]bool{}
	var buffers []struct {
		dev string
		mib float64
	}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		keep := false
		if m := reLoadedBackend.FindStringSubmatch(line); m != nil {
			o.Backends = appendNew(o.Backends, m[1])
			keep = true
		}
		if m := reUsingDevice.FindStringSubmatch(line); m != nil {
			o.Devices = appendNew(o.Devices, m[1]+" ("+m[2]+")")
			gpu[m[1]] = true
			keep = true
		}
		if m := reOffloaded.FindStringSubmatch(line); m != nil {
			o.Layers, _ = strconv.Atoi(m[1])
			o.TotalLayers, _ = strconv.Atoi(m[2])
			o.Known = true
			keep = true
		}
		if m := reBuffer.FindStringSubmatch(line); m != nil {
			mib, _ := strconv.ParseFloat(m[2], 64)
			buffers = append(buffers, struct {
				dev string
				mib float64
			}{m[1], mib})
			keep = true
		}
		if reNoGPU.MatchString(line) {
			o.NoGPU = true
			keep = true
		}
		if reFoundDevices.MatchString(line) {
			keep = true
		}
		if keep && len(o.Lines) < 40 {
			o.Lines = append(o.Lines, strings.TrimSpace(line))
		}
	}
	for _, b := range buffers {
		if gpu[b.dev] {
			o.VRAMMiB += b.mib
		}
	}
	return o
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// OnGPU reports whether the log shows layers on a GPU.
func (o Offload) OnGPU() bool { return o.Layers > 0 || o.VRAMMiB > 0 }

// readOffload reads the start of the container's log (the loading lines
// come first; a long-running server's request lines are cut off).
func (m *Manager) readOffload(ctx context.Context, id string) Offload {
	rc, err := m.eng.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return Offload{}
	}
	defer rc.Close()
	var buf bytes.Buffer
	w := &limitWriter{w: &buf, n: 2 << 20}
	_, _ = stdcopy.StdCopy(w, w, rc)
	return ParseOffload(buf.String())
}

// limitWriter keeps the first n bytes and then fails, which stops the copy.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.ErrShortWrite
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.w.Write(p)
	l.n -= n
	return n, err
}
