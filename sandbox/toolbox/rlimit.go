package toolbox

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// RlimitsEnv names the environment variable through which the host asks
// the toolbox to set resource limits on itself, and so on every command it
// runs, where the engine applies no cgroup limits: "nproc:N".
// Soft and hard limits are both set; without CAP_SYS_RESOURCE nothing in
// the sandbox can raise them again.
const RlimitsEnv = "AGENT_TOOLBOX_RLIMITS"

// ApplyRlimits sets the limits spec names (see RlimitsEnv); "" sets none.
func ApplyRlimits(spec string) error {
	if spec == "" {
		return nil
	}
	for _, kv := range strings.Split(spec, ",") {
		name, val, _ := strings.Cut(kv, ":")
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: bad limit %q", RlimitsEnv, kv)
		}
		var res int
		switch name {
		case "nproc":
			res = 6 // RLIMIT_NPROC
		default:
			return fmt.Errorf("%s: unknown limit %q", RlimitsEnv, name)
		}
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("setrlimit %s %d: %w", name, n, err)
		}
	}
	return nil
}
