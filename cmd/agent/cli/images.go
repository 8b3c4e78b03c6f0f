package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewCmdImages builds `agent images`.
func NewCmdImages(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "images",
		Short: "Build, list, save and load images offline",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent images: not implemented yet")
		},
	}
}
