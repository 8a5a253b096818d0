package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/cmd/internal/docgen"
	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, func(context.Context, *stdio) *cobra.Command {
		// Hidden: packaging runs it on the freshly built binary, so the man
		// pages and completions come from the very commands being shipped.
		// Section 8: a daemon and the administrator's commands around it.
		return docgen.Command(api.Version, "8", docgen.Extras{
			Files: [][2]string{
				{"/etc/fenced/fenced.yaml", "The configuration (fenced.yaml(5)); run --config and validate --config name another."},
				{"/etc/fenced/gossip.key", "The cluster key (gossip.key_file), the same on every node, mode 0400: fenced keygen creates it. During a rotation it holds several, one a line, the first encrypting."},
				{"/etc/fenced/secrets/", "The fence devices' passwords and communities, one file each (password_file, community_file), mode 0400; not needed on a witness."},
				{"/var/lib/fenced/", "The data directory (data_dir): the raft log and snapshots, and fenced.lock, held while the daemon runs."},
				{"/run/fenced/fenced.sock", "The control socket (api.socket) fencectl(1) talks to; root and members of group fenced may use it."},
				{"/usr/lib/systemd/system/fenced.service", "The systemd unit: systemctl enable --now fenced starts the daemon at boot."},
				{"/usr/share/fenced/prometheus/fenced-rules.yml", "Prometheus alerting rules for the metrics served on metrics.listen: list it under rule_files in prometheus.yml."},
				{"/usr/share/fenced/grafana/fenced-dashboard.json", "A Grafana dashboard of those metrics: import it and pick the Prometheus data source."},
			},
			SeeAlso: []string{"fencectl(1)", "fenced.yaml(5)", "systemctl(1)", "stonith_admin(8)"},
		})
	})
}
