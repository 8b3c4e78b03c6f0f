package llamaserver

import (
	"fmt"
	"strings"
)

// Cause is a likely reason a server failed to start, with what to do.
type Cause struct {
	// Reason is short ("out of memory").
	Reason string
	// Fix says what the user can do.
	Fix string
}

// diagnosis patterns, checked in order against the engine's error and the
// server's log. The engine gives no typed error for a missing device driver
// or a busy port, and llama-server none at all, so text is all there is;
// each pattern is a message these programs are known to print.
var diagnoses = []struct {
	needles []string
	cause   Cause
}{
	{[]string{`could not select device driver "nvidia"`, `could not select device driver "cdi"`, "unknown or invalid runtime name: nvidia"},
		Cause{"no GPU runtime: the Docker engine cannot pass NVIDIA GPUs to containers",
			"install nvidia-container-toolkit and restart Docker (`agent doctor` checks it), or run on the CPU with --gpus none"}},
	{[]string{"unresolvable CDI devices", "CDI device injection failed"},
		Cause{"the engine knows no CDI device of that name",
			"generate the CDI spec (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`), or use --gpus none"}},
	{[]string{"unknown device", "device error", "invalid device ordinal", "no CUDA-capable device"},
		Cause{"the requested GPU does not exist on this machine",
			"list GPUs with `nvidia-smi -L` and pass existing ids to --gpus, or use --gpus all"}},
	{[]string{"port is already allocated", "address already in use"},
		Cause{"the port is already in use", "stop what listens there or pick another port with --port"}},
	{[]string{"out of memory", "failed to allocate", "cudaMalloc failed", "unable to allocate", "std::bad_alloc", "OOM-killed"},
		Cause{"out of memory", "use a smaller --ctx, fewer --parallel slots, a smaller (more quantized) model, or free memory"}},
	{[]string{"executable file not found", "exec format error", "not found in $PATH", "exec llama-server failed"},
		Cause{"the image has no llama-server", "build the image with `agent images build llama-server` or pass an image that has it with --image"}},
	{[]string{"failed to open", "No such file or directory", "failed to load model", "error loading model"},
		Cause{"the model could not be loaded", "check that --model names a complete, readable .gguf file (`agent doctor` reads its header)"}},
	{[]string{"unknown argument", "invalid argument", "error: unrecognized"},
		Cause{"llama-server rejected an argument", "check the extra arguments after -- against `llama-server --help` of this image"}},
}

// Diagnose guesses why a start failed from the engine's error text and the
// server's log. ok is false when nothing matched.
func Diagnose(text string) (Cause, bool) {
	lower := strings.ToLower(text)
	for _, d := range diagnoses {
		for _, n := range d.needles {
			if strings.Contains(lower, strings.ToLower(n)) {
				return d.cause, true
			}
		}
	}
	return Cause{}, false
}

// StartError says why the server did not become ready.
type StartError struct {
	// What happened ("llama-server exited with code 1 while loading").
	What string
	// Cause is the likely reason, when one was recognised.
	Cause *Cause
	// LogTail is the last lines of the server's log, if any.
	LogTail string
	// Err is the underlying engine error, if any.
	Err error
}

func (e *StartError) Error() string {
	var b strings.Builder
	b.WriteString(e.What)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, "\nlikely cause: %s\nfix: %s", e.Cause.Reason, e.Cause.Fix)
	}
	if t := strings.TrimSpace(e.LogTail); t != "" {
		b.WriteString("\nlast lines of the server's log:\n")
		for _, l := range strings.Split(t, "\n") {
			b.WriteString("  | ")
			b.WriteString(l)
			b.WriteString("\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func (e *StartError) Unwrap() error { return e.Err }

func newStartError(what string, err error, logTail string) *StartError {
	se := &StartError{What: what, Err: err, LogTail: logTail}
	text := logTail
	if err != nil {
		text = err.Error() + "\n" + logTail
	}
	if c, ok := Diagnose(text); ok {
		se.Cause = &c
	}
	return se
}
