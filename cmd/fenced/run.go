package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon"
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
once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(s, level)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			host, _ := os.Hostname()
			cfg, err := daemon.LoadConfig(path, node, host, agents.Default)
			if err != nil {
				return &exitError{exitConfig, err}
			}
			for _, w := range cfg.Warnings() {
				log.Warn("configuration", "warning", w.String())
			}
			d, err := daemon.New(cfg, daemon.Options{Logger: log, Notify: systemdNotifier(log), WatchdogInterval: watchdogInterval()})
			if err != nil {
				return &exitError{exitStartup, err}
			}
			if err := d.Run(ctx); err != nil {
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

func newValidateCmd(_ context.Context, s *stdio) *cobra.Command {
	var path, node string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a configuration file and list every problem",
		Long: `Check a configuration file: syntax, unknown fields, types, node list, timing
relations, devices and their agents' parameters, resources and their OCF
agents' parameters (from each agent's meta-data). With --node, also run each
OCF agent's validate-all on this machine as that node. Every problem is listed
as FILE:LINE: PATH: MESSAGE. Exit status 0 when valid, 3 when not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := daemon.CheckConfig(path, agents.Default)
			if err == nil && node != "" {
				_, err = cfg.SelectNode(node, "")
				if err == nil {
					err = daemon.ValidateNode(cmd.Context(), cfg)
				}
			}
			if err != nil {
				fmt.Fprintln(s.err, err)
				return &exitError{exitConfig, errors.New("")}
			}
			for _, w := range cfg.Warnings() {
				fmt.Fprintln(s.err, w)
			}
			fmt.Fprintf(s.out, "%s: ok (%d nodes, majority %d)\n", path, len(cfg.Nodes), cfg.Majority())
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", defaultConfig, "configuration file")
	cmd.Flags().StringVar(&node, "node", "", "also check that NAME is a configured node, and run the OCF agents' validate-all as NAME")
	return cmd
}

// newLogger logs key=value lines to stderr; under journald (JOURNAL_STREAM
// set) without timestamps, since the journal adds its own.
func newLogger(s *stdio, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if os.Getenv("JOURNAL_STREAM") != "" {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	return slog.New(slog.NewTextHandler(s.err, opts)), nil
}
