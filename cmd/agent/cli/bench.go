package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewCmdBench builds `agent bench`.
func NewCmdBench(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "Measure sandbox and tool-call latency",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent bench: not implemented yet")
		},
	}
}
