package sandbox

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ToolboxEnv names the environment variable that points at the toolbox
// binary when no path is configured.
const ToolboxEnv = "AGENT_TOOLBOX"

// ToolboxName is the toolbox binary's file name next to the agent binary.
const ToolboxName = "agent-toolbox"

// FindToolbox locates the static agent-toolbox binary that is mounted into
// every sandbox: the configured path, else $AGENT_TOOLBOX, else
// agent-toolbox next to the running executable. The result is absolute and
// has been checked to be a statically linked ELF executable, because a
// dynamically linked one would not run in a scratch or busybox image.
func FindToolbox(configured string) (string, error) {
	var tried []string
	try := func(p, from string) (string, error) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("toolbox path %s (%s): %w", p, from, err)
		}
		if err := CheckToolbox(abs); err != nil {
			return "", fmt.Errorf("%w (from %s)", err, from)
		}
		return abs, nil
	}
	if configured != "" {
		return try(configured, "configuration sandbox.toolbox")
	}
	if p := os.Getenv(ToolboxEnv); p != "" {
		return try(p, "$"+ToolboxEnv)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		p := filepath.Join(filepath.Dir(exe), ToolboxName)
		if _, err := os.Stat(p); err == nil {
			return try(p, "next to "+exe)
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("%s not found (looked for %v): run `make build`, or point $%s or the sandbox.toolbox setting at the binary", ToolboxName, tried, ToolboxEnv)
}

// CheckToolbox verifies that path is a regular, statically linked ELF
// executable (no program interpreter).
func CheckToolbox(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s not found at %s: run `make build`", ToolboxName, path)
	}
	if err != nil {
		return fmt.Errorf("toolbox %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("toolbox %s is not an executable file: run `make build`", path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("toolbox %s is not an ELF executable: run `make build`", path)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("toolbox %s is dynamically linked and would not run in every image: rebuild it with CGO_ENABLED=0 (`make build`)", path)
		}
	}
	return nil
}
