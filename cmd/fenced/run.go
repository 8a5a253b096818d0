package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/logring"
	"github.com/fenced/fenced/quorum"
)

const defaultConfig = "/etc/fenced/fenced.yaml"

func init() {
	extraCommands = append(extraCommands, newRunCmd, newValidateCmd)
}

func newRunCmd(ctx context.Context, s *stdio) *cobra.Command {
	var path, node, level string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the fencing daemon on this node",
		Long: `Run the fencing daemon. It joins the cluster, takes part in the election and,
when it becomes primary, fences the previous holder if needed and starts the
storage with the new epoch.

SIGTERM or SIGINT stops gracefully: the storage is released, primacy is handed
to another node, and the node leaves the gossip pool. A second signal stops at
once.

SIGHUP (or fencectl reload) reads the configuration file again and applies what
can change while running — devices and their parameters (a rotated password's
file), fence topologies, device monitor intervals, alerts — after checking the
whole file as at start. A file with problems, or one that changes what needs a
restart (the node list or addresses, timing, storage and resources, paths, the
cluster key, metrics.listen), is refused with its problems logged, and the
running configuration stays in force.

The daemon logs key=value lines to stderr (the journal, under systemd) and
keeps its newest 1 MiB of them in memory: fencectl report takes the journal's
lines when there is one, else those.

The daemon runs its Go code on one processor (GOMAXPROCS=1) unless the
GOMAXPROCS environment variable says otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, ring, err := newLogger(s, level)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			oneProcessor()
			host, _ := os.Hostname()
			cfg, err := daemon.LoadConfig(path, node, host, agents.Default)
			if err != nil {
				return &exitError{exitConfig, err}
			}
			for _, w := range daemon.Warnings(cfg, agents.Default) {
				log.Warn("configuration", "warning", w.String())
			}
			d, err := daemon.New(cfg, daemon.Options{Logger: log, LogRing: ring, Notify: systemdNotifier(log), WatchdogInterval: watchdogInterval()})
			if err != nil {
				return &exitError{exitStartup, err}
			}
			stopHUP := reloadOnHUP(ctx, d)
			defer stopHUP()
			if err := d.Run(ctx); errors.Is(err, daemon.ErrHalted) {
				return &exitError{exitHalted, err}
			} else if err != nil {
				return &exitError{exitFailure, err}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", defaultConfig, "configuration file")
	cmd.Flags().StringVar(&node, "node", "", "this node's name among the configured nodes (default: the config's node, else the hostname)")
	cmd.Flags().StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	return cmd
}

// oneProcessor runs the daemon's goroutines on one processor unless the
// environment sets GOMAXPROCS. An idle daemon wakes some thirty times a
// second (beacons, raft heartbeats, gossip, lease renewals), each time for
// tens of microseconds; with a second processor the Go scheduler also
// wakes a second thread to look for work at each of them, which costs about
// a fifth of an idle node's CPU. Nothing the daemon does needs two cores at
// once: its work is waiting on the network, disks and BMCs, and Go preempts
// a goroutine that runs for more than 10 ms, so the control loop's
// deadlines (hundreds of ms apart) are kept. A blocking system call (fsync)
// hands the processor to another thread as before.
func oneProcessor() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

// reloadOnHUP reloads d's configuration on every SIGHUP until ctx ends
// or the returned function is called.
func reloadOnHUP(ctx context.Context, d *daemon.Daemon) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-hup:
				// Reload logs what it did or why it refused.
				_, _ = d.Reload(ctx)
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-stopped
	}
}

func newValidateCmd(_ context.Context, s *stdio) *cobra.Command {
	var path, node string
	var offline bool
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a configuration file and list every problem",
		Long: `Check a configuration file: syntax, unknown fields, types, node list, timing
relations, devices and their agents' parameters, the files it names (the
cluster key, every NAME_file parameter such as password_file, community_file
or ca_file, hook and alert programs), resources and their OCF agents'
parameters (from each agent's meta-data), and this machine's side of it: the
data directory, the control socket's path and group, and this node's own
addresses — what fenced run checks before it starts. With --offline, only the
syntax and the rules: no file is read but the configuration, no agent is run
and no OCF meta-data is read, so a configuration can be checked on a
workstation or in CI. Every problem is listed as FILE:LINE: PATH: MESSAGE;
warnings (valid, but worth knowing: a secret's file others can read, a node
that holds resources without a watchdog device) follow it, and do not fail.

The file is checked for the node this machine runs as, as fenced run picks
it: --node, else the file's node (either must be a configured node), else the
hostname. Each file is checked only where it is used: a witness needs the
cluster key and the alerts' programs, but neither the device secrets nor the
resources' programs. When the hostname names no configured node and neither
--node nor node: is given, the file is checked as for any data node, and a
note says that fenced run here needs --node. With --node, each OCF agent's
validate-all also runs on this machine as that node.

When a fenced answers on the file's api.socket (this machine's daemon), the
file is also compared with the configuration the cluster committed and with
each node's, as far as that daemon knows them: the keys that differ are named
(never a value), with how to declare node-local those that may rightly be each
node's own (storage.node_local, resources[].node_local, node_params). These are
notes: they do not fail the check.

On success it prints the fingerprint of the cluster-wide part of the
configuration (what every node must agree on; see fencectl status): equal
fingerprints on two nodes mean equal cluster-wide configurations.

Exit status 0 when valid, 3 when not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg *config.Config
			var err error
			host, _ := os.Hostname()
			if offline {
				if node != "" {
					return &exitError{exitUsage, errors.New("--node runs the OCF agents' validate-all: it does not go with --offline")}
				}
				cfg, err = daemon.CheckConfigOffline(path, agents.Default)
			} else {
				cfg, err = daemon.CheckConfig(path, node, host, agents.Default)
			}
			if err == nil && node != "" {
				err = daemon.ValidateNode(cmd.Context(), cfg)
			}
			if err != nil {
				fmt.Fprintln(s.err, err)
				return &exitError{exitConfig, errors.New("")}
			}
			for _, w := range daemon.Warnings(cfg, agents.Default) {
				fmt.Fprintln(s.err, w)
			}
			if !offline {
				compareWithCluster(cmd.Context(), cfg, s.err)
			}
			what := ""
			switch {
			case offline:
				what = ", offline: files and agents not checked"
			case cfg.Node == "":
				fmt.Fprintf(s.err, "note: this machine's hostname %q is not a configured node, and neither --node nor the file's node names one: "+
					"checked as for any data node; `fenced run` here needs --node NAME\n", host)
			default:
				what = ", as node " + cfg.Node
				if n, _ := cfg.NodeByName(cfg.Node); n.Witness() {
					what += " (a witness: device secrets and the resources' programs not needed here)"
				}
			}
			fmt.Fprintf(s.out, "%s: ok (%d nodes, majority %d; cluster configuration fingerprint %s%s)\n", path, len(cfg.Nodes), cfg.Majority(),
				quorum.FingerprintOf(cfg.ClusterKeys()), what)
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", defaultConfig, "configuration file")
	cmd.Flags().StringVar(&node, "node", "", "check as node NAME (default: the file's node, else the hostname), and run the OCF agents' validate-all as NAME")
	cmd.Flags().BoolVar(&offline, "offline", false, "check syntax and rules only: read no other file, run no agent")
	return cmd
}

// newLogger logs key=value lines to stderr; under journald (JOURNAL_STREAM
// set) without timestamps, since the journal adds its own. The same lines,
// with their time, go to a ring in memory too: the diagnostics bundle's
// log when there is no journal to ask.
func newLogger(s *stdio, level string) (*slog.Logger, *logring.Ring, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	ring := logring.New(logring.DefaultSize)
	ringOpts := *opts
	if os.Getenv("JOURNAL_STREAM") != "" {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	return slog.New(slog.NewMultiHandler(slog.NewTextHandler(s.err, opts), ring.Handler(&ringOpts))), ring, nil
}
