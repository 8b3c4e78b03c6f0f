package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X .../cli.Version=...".
var Version = "dev"

// versionInfo is what `agent version --json` prints.
type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

func currentVersion() versionInfo {
	v := versionInfo{Version: Version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Revision = s.Value
			}
		}
	}
	return v
}

// String is the one line `agent version` and `agent --version` print.
func (v versionInfo) String() string {
	rev := ""
	if len(v.Revision) >= 12 {
		rev = " (" + v.Revision[:12] + ")"
	}
	return fmt.Sprintf("agent %s%s %s %s/%s", v.Version, rev, v.Go, v.OS, v.Arch)
}

// NewCmdVersion builds `agent version`.
func NewCmdVersion(f *Factory) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  agent version\n  agent version --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion()
			if jsonOut {
				return writeJSON(f.IO.Out, v)
			}
			fmt.Fprintln(f.IO.Out, v.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, `print {"version", "revision", "go", "os", "arch"} as JSON`)
	return cmd
}
