package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/quorum"
)

func init() {
	extraCommands = append(extraCommands, newRecoverCmd)
}

func newRecoverCmd(_ context.Context, s *stdio) *cobra.Command {
	var path, node, reason string
	var fenced bool
	var floor uint64
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Start a new voting set from this node's data after a majority is lost for good",
		Long: fmt.Sprintf(`When a majority of the configured nodes is gone for good (two of three servers
burned), the survivor has no quorum and rightly does nothing. recover, run on
the survivor with its daemon stopped, makes it the only voter of a new voting
set built from its raft data:

  - the epoch continues %d above the highest epoch its log holds (every entry,
    committed or not; --epoch-floor raises it further): the lost majority may
    have granted epochs this node never stored, and a storage that checks
    tokens must refuse all of them;
  - the other configured nodes are declared stopped: they no longer may run
    the storage nor hold a lease;
  - the history records it: who (the calling user), when, which nodes were
    declared gone, the epochs before and after;
  - the voting set gets a new incarnation, part of raft's TLS trust root: a
    node still on the old data cannot talk raft to this one.

It is refused without --yes-i-have-fenced-the-others, while the daemon runs on
this data_dir, and while any other configured node answers in gossip (it looks
for --gossip-wait). Then start the daemon: it is primary alone.

Never start a declared node on its old data: empty its data_dir first.`, quorum.RecoverEpochGap),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !fenced {
				return &exitError{exitUsage, daemon.ErrNotDeclared}
			}
			host, _ := os.Hostname()
			cfg, err := daemon.LoadConfig(path, node, host, agents.Default)
			if err != nil {
				return &exitError{exitConfig, err}
			}
			by := "uid " + fmt.Sprint(os.Getuid())
			if u, err := user.Current(); err == nil {
				by = u.Username
			}
			if su := os.Getenv("SUDO_USER"); su != "" {
				by = su + " (sudo " + by + ")"
			}
			got, gone, err := daemon.Recover(cfg, daemon.RecoverRequest{Fenced: fenced, EpochFloor: floor, GossipWait: wait,
				By: by + "@" + cfg.Node, Reason: reason})
			if err != nil {
				if errors.Is(err, daemon.ErrNotDeclared) {
					return &exitError{exitUsage, err}
				}
				return &exitError{exitFailure, err}
			}
			fmt.Fprintf(s.out, "recovered: %s is the only voter now (incarnation %s); epoch %d → %d; declared gone: %s\n",
				cfg.Node, got.Incarnation, got.Before, got.Epoch, strings.Join(gone, ", "))
			fmt.Fprintln(s.out, "start the daemon (systemctl start fenced); empty the data_dir of every declared node before it starts again")
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", defaultConfig, "configuration file")
	cmd.Flags().StringVar(&node, "node", "", "this node's name among the configured nodes (default: the config's node, else the hostname)")
	cmd.Flags().BoolVar(&fenced, "yes-i-have-fenced-the-others", false, "declare every other configured node stopped for good (required)")
	cmd.Flags().Uint64Var(&floor, "epoch-floor", 0, "continue the epoch above this one too (e.g. the storage's highest token)")
	cmd.Flags().DurationVar(&wait, "gossip-wait", 3*time.Second, "how long gossip looks for the other nodes before it declares them gone")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the history")
	return cmd
}
