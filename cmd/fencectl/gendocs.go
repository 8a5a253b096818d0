package main

import (
	"github.com/spf13/cobra"

	"github.com/fenced/fenced/cmd/internal/docgen"
	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, func(*app) *cobra.Command {
		// Hidden: packaging runs it on the freshly built binary, so the man
		// pages and completions come from the very commands being shipped.
		// Section 1: a user command (members of group fenced may run it).
		return docgen.Command(api.Version, "1", docgen.Extras{
			Files: [][2]string{
				{"/run/fenced/fenced.sock", "The local daemon's control socket (api.socket; --socket names another): root and members of group fenced may use it."},
				{"/etc/fenced/fenced.yaml", "The daemon's configuration (fenced.yaml(5)); fencectl reload makes the daemon read it again."},
			},
			SeeAlso: []string{"fenced(8)", "fenced.yaml(5)", "crm_mon(8)"},
		})
	})
}
