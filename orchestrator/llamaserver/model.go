package llamaserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/localagent/agent/orchestrator/gguf"
)

// MinSlotCtx is the smallest per-slot context that is useful to a coding
// agent: the system prompt and tool definitions alone take a few thousand
// tokens.
const MinSlotCtx = 8192

// ModelCheck is what CheckModel found.
type ModelCheck struct {
	Header *gguf.Header
	// Warnings are problems that do not stop the server from starting.
	Warnings []string
}

// CheckModel reads the model's GGUF header and compares the requested
// context with what the model and an agent need. It fails on a missing,
// unreadable, non-GGUF or truncated file, with a message that says so.
func CheckModel(path string, ctx, parallel int) (*ModelCheck, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("model file %s does not exist: pass the path of a .gguf file with --model", path)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("model file %s is not readable by you: fix its permissions", path)
	case err != nil:
		return nil, fmt.Errorf("model file %s: %w", path, err)
	case st.IsDir():
		return nil, fmt.Errorf("model %s is a directory: pass the .gguf file inside it with --model", path)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("model %s is not a regular file", path)
	}
	h, err := gguf.ReadFile(path)
	switch {
	case errors.Is(err, gguf.ErrNotGGUF):
		return nil, fmt.Errorf("%w: llama-server needs a .gguf model (convert other formats with llama.cpp's convert_hf_to_gguf.py)", err)
	case errors.Is(err, gguf.ErrTruncated):
		return nil, fmt.Errorf("%w: the download or copy is probably incomplete; fetch the file again", err)
	case err != nil:
		return nil, err
	}
	mc := &ModelCheck{Header: h}
	if h.ContextLength > 0 && uint64(ctx) > h.ContextLength {
		mc.Warnings = append(mc.Warnings, fmt.Sprintf(
			"--ctx %d exceeds the context the model was trained with (%d): answers degrade past it unless the model supports RoPE scaling",
			ctx, h.ContextLength))
	}
	if parallel > 0 && ctx/parallel < MinSlotCtx {
		mc.Warnings = append(mc.Warnings, fmt.Sprintf(
			"each of the %d slots gets %d tokens of context (--ctx %d / --parallel %d); an agent needs at least %d: raise --ctx or lower --parallel",
			parallel, ctx/parallel, ctx, parallel, MinSlotCtx))
	}
	return mc, nil
}
