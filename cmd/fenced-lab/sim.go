package main

import (
	"context"

	"github.com/spf13/cobra"
)

func init() {
	extraCommands = append(extraCommands, newSimCmd)
}

// simCommands build the simulators under `fenced sim`; each simulator's
// file appends its constructor from init.
var simCommands []func(ctx context.Context, s *stdio) *cobra.Command

// newSimCmd is the hidden parent of the device simulators used by tests and
// the demo. They listen on loopback only.
func newSimCmd(ctx context.Context, s *stdio) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a device or storage simulator on loopback, for tests and demos",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	for _, f := range simCommands {
		cmd.AddCommand(f(ctx, s))
	}
	return cmd
}
