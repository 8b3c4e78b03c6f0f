package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cast"

	"github.com/localagent/agent/policy"
)

// maxProjectConfig bounds the size of a repository's .agent/config.yaml.
const maxProjectConfig = 64 << 10

// readProjectConfig reads dir/.agent/config.yaml the way a file from
// untrusted code must be read: refused when .agent or config.yaml is a
// symlink (a merged `.agent -> tools/devcfg` must not silently become the
// project's configuration, nor a link lead to a file elsewhere on the
// host), when it is not a regular file, or when it is larger than
// maxProjectConfig. ok is false when there is no such file. A refusal is
// an error; the caller turns it into a warning and applies nothing of it.
func readProjectConfig(dir string) (data []byte, ok bool, err error) {
	agentDir := filepath.Join(dir, ".agent")
	fi, err := os.Lstat(agentDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(agentDir)
		return nil, true, fmt.Errorf("%s is a symlink (to %q): a repository's agent configuration must be a real directory, so its config.yaml is ignored", agentDir, target)
	}
	if !fi.IsDir() {
		return nil, false, nil
	}
	file := filepath.Join(agentDir, "config.yaml")
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		target, _ := os.Readlink(file)
		return nil, true, fmt.Errorf("%s is a symlink (to %q): a repository's agent configuration must be a regular file, so it is ignored", file, target)
	}
	if err != nil {
		return nil, true, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, true, err
	}
	if !st.Mode().IsRegular() {
		return nil, true, fmt.Errorf("%s is not a regular file, so it is ignored", file)
	}
	data, err = io.ReadAll(io.LimitReader(f, maxProjectConfig+1))
	if err != nil {
		return nil, true, err
	}
	if len(data) > maxProjectConfig {
		return nil, true, fmt.Errorf("%s is larger than %d KiB, so it is ignored", file, maxProjectConfig>>10)
	}
	return data, true, nil
}

// limitKind says how a project key compares with the user's value: a
// repository's config may lower a limit, never raise it.
type limitKind int

const (
	notLimit limitKind = iota
	sizeLimit
	numberLimit
	durationLimit
	switchLimit // a bool: the repository may turn it off, not on
)

// projectLimits are the project keys that are limits.
var projectLimits = map[string]limitKind{
	"sandbox.memory":       sizeLimit,
	"sandbox.tmpfs":        sizeLimit,
	"sandbox.disk":         sizeLimit,
	"sandbox.cpus":         numberLimit,
	"sandbox.pids":         numberLimit,
	"agent.max_iterations": numberLimit,
	"agent.sub_agents":     switchLimit,
	"llm.ctx":              numberLimit,
	"llm.parallel":         numberLimit,
	"llm.start_timeout":    durationLimit,
}

// lowersLimit checks a repository's value for key against the user's
// effective one (flags, environment, the user's config, defaults). It
// returns "" when the project value may apply, else why it may not. A
// zero or unparsable value never applies: zero means "the default" for
// most limits, and the default may be higher than what the user chose.
func lowersLimit(key string, proj, user any) string {
	kind := projectLimits[key]
	if kind == notLimit {
		return ""
	}
	raise := fmt.Sprintf("a repository's config may only lower a limit, and %v is above your %v", proj, user)
	switch kind {
	case sizeLimit:
		p, perr := policy.ParseSize(cast.ToString(proj))
		u, uerr := policy.ParseSize(cast.ToString(user))
		switch {
		case perr != nil || p <= 0:
			return fmt.Sprintf("%v is not a positive size", proj)
		case uerr == nil && u > 0 && p > u:
			return raise
		}
	case numberLimit:
		p, perr := cast.ToFloat64E(proj)
		u, uerr := cast.ToFloat64E(user)
		switch {
		case perr != nil || p <= 0:
			return fmt.Sprintf("%v is not a positive number", proj)
		case uerr == nil && u > 0 && p > u:
			return raise
		}
	case durationLimit:
		p, perr := cast.ToDurationE(proj)
		u, uerr := cast.ToDurationE(user)
		switch {
		case perr != nil || p <= 0:
			return fmt.Sprintf("%v is not a positive duration", proj)
		case uerr == nil && u > 0 && p > u:
			return raise
		}
	case switchLimit:
		p, perr := cast.ToBoolE(proj)
		u, uerr := cast.ToBoolE(user)
		switch {
		case perr != nil:
			return fmt.Sprintf("%v is not true or false", proj)
		case uerr == nil && p && !u:
			return fmt.Sprintf("a repository's config may only turn it off, and you have it off")
		}
	}
	return ""
}

// diskBounds reads sandbox.disk and sandbox.min_free ("0": none).
func diskBounds(cfg *Config) (limit, minFree int64, err error) {
	if limit, err = policy.ParseSize(cfg.Sandbox.Disk); err != nil {
		return 0, 0, fmt.Errorf("configuration sandbox.disk: %w", err)
	}
	if minFree, err = policy.ParseSize(cfg.Sandbox.MinFree); err != nil {
		return 0, 0, fmt.Errorf("configuration sandbox.min_free: %w", err)
	}
	return limit, minFree, nil
}
