package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/storage/tokenstore"
)

// exitStale is `fenced sim writer`'s exit code when the store rejected its
// epoch as stale.
const exitStale = 3

func init() {
	simCommands = append(simCommands, newSimStorageCmd, newSimWriterCmd)
}

// newSimStorageCmd serves the token-checking storage stand-in.
func newSimStorageCmd(ctx context.Context, s *stdio) *cobra.Command {
	var listen, logPath string
	cmd := &cobra.Command{
		Use:   "storage",
		Short: "Serve a token-checking storage stand-in on loopback",
		Long: `Serves POST /write with a JSON body {"node","epoch","seq","data"}. A write is
accepted (200) only when its epoch is at least the highest epoch accepted so
far, else refused as stale (409). Every attempt is appended to --log as a JSON
line (time, node, epoch, seq, result); an existing log is continued and its
highest epoch remembered. The tests' checker reads that log to prove that no
stale epoch was accepted and that no two nodes wrote under one epoch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			srv, err := tokenstore.Start(listen, logPath)
			if err != nil {
				return &exitError{code: exitStartup, err: err}
			}
			defer srv.Close()
			fmt.Fprintf(s.out, "tokenstore: serving %s (log %s, highest epoch %d)\n", srv.URL, logPath, srv.Highest())
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8090", "loopback address to listen on (port 0 picks one)")
	cmd.Flags().StringVar(&logPath, "log", "", "JSON-lines file every write attempt is appended to (empty: memory only)")
	return cmd
}

// newSimWriterCmd runs a writer with the epoch the storage hooks pass.
func newSimWriterCmd(ctx context.Context, s *stdio) *cobra.Command {
	var url, node, epochText string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "writer",
		Short: "Write to a token-checking store with this node's epoch until rejected as stale",
		Long: `Writes to the store every --interval with the epoch from $FENCED_EPOCH and the
node name from $FENCED_NODE (as fenced passes them to storage hooks), until
interrupted (exit 0) or a write is rejected as stale (exit 3).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if node == "" {
				node = os.Getenv("FENCED_NODE")
			}
			if epochText == "" {
				epochText = os.Getenv("FENCED_EPOCH")
			}
			epoch, err := strconv.ParseUint(epochText, 10, 64)
			if err != nil || epoch == 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("epoch %q (--epoch or $FENCED_EPOCH): want a positive integer", epochText)}
			}
			if node == "" {
				return &exitError{code: exitUsage, err: errors.New("node name required (--node or $FENCED_NODE)")}
			}
			if url == "" {
				return &exitError{code: exitUsage, err: errors.New("--url required")}
			}
			fmt.Fprintf(s.err, "tokenstore writer: node %s epoch %d writing to %s every %v\n", node, epoch, url, interval)
			w := &tokenstore.Writer{URL: url, Node: node, Epoch: epoch, Interval: interval, Log: s.err}
			err = w.Run(ctx)
			if errors.Is(err, tokenstore.ErrStale) {
				return &exitError{code: exitStale, err: err}
			}
			if err != nil {
				return &exitError{code: exitFailure, err: err}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&url, "url", "", "the store's URL (http://127.0.0.1:PORT)")
	fl.DurationVar(&interval, "interval", 100*time.Millisecond, "time between writes")
	fl.StringVar(&node, "node", "", "node name (default $FENCED_NODE)")
	fl.StringVar(&epochText, "epoch", "", "epoch (default $FENCED_EPOCH)")
	return cmd
}
