package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/localagent/agent/orchestrator"
)

// unsafeEnv names the host-side defences to switch off, comma-separated
// ("no-freeze", "follow-symlinks", "no-freeze-lock"). It exists for the security tests'
// control runs, which must show that an attack succeeds without the
// defence; it is deliberately not a configuration key, and using it says
// so loudly.
const unsafeEnv = "AGENT_TEST_UNSAFE"

func unsafeFromEnv(f *Factory) orchestrator.UnsafeOptions {
	var u orchestrator.UnsafeOptions
	for _, v := range strings.Split(os.Getenv(unsafeEnv), ",") {
		switch strings.TrimSpace(v) {
		case "no-freeze":
			u.NoFreeze = true
		case "follow-symlinks":
			u.FollowSymlinks = true
		case "no-freeze-lock":
			u.NoFreezeLock = true
		case "add-special":
			u.AddSpecial = true
		case "keep-notes":
			u.KeepNotes = true
		}
	}
	if u.Any() && f.IO != nil {
		fmt.Fprintf(f.IO.ErrOut, "WARNING: %s=%s switches host-side defences off: for security tests only\n", unsafeEnv, os.Getenv(unsafeEnv))
	}
	return u
}
