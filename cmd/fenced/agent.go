package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/fenceapi"
)

func init() {
	extraCommands = append(extraCommands, newAgentCmd)
}

// newAgentCmd runs a built-in agent through the FenceAgentAPI, so Pacemaker
// (or a shell) can use fenced's agents like fence-agents programs.
func newAgentCmd(ctx context.Context, s *stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "agent [NAME [--name=value ...] [-o ACTION]]",
		Short: "Run a built-in fence agent the FenceAgentAPI way (or list agents)",
		Long: `Runs a built-in fence agent like a ClusterLabs fence agent: parameters as
--name=value options, or as name=value lines on stdin when no options are
given; actions on, off, reboot, status, monitor, list, metadata, validate-all.
Exit codes: status 0 on, 2 off, 1 error or unknown; other actions 0 success,
1 failure. Secrets are only read from stdin or files, never from options.
With no NAME, lists the registered agents.`,
		// fence-agents style options (-o off, --ip=...) pass through untouched.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
				if len(args) > 0 {
					return cmd.Help()
				}
				tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "AGENT\tDESCRIPTION")
				for _, name := range agents.Default.Names() {
					k, _ := agents.Default.Lookup(name)
					fmt.Fprintf(tw, "%s\t%s\n", name, k.Description)
				}
				return tw.Flush()
			}
			code := fenceapi.Main(ctx, agents.Default, args[0], args[1:], s.in, s.out, s.err)
			if code != 0 {
				// Main already reported; only the exit code is left to pass on.
				return &exitError{code: code, err: fmt.Errorf("")}
			}
			return nil
		},
	}
}
