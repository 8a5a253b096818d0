package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	// Built-in fence agents register themselves with agents.Default.
	_ "github.com/fenced/fenced/agents/exec"
	_ "github.com/fenced/fenced/agents/ipmi"
	_ "github.com/fenced/fenced/agents/pdu"
	_ "github.com/fenced/fenced/agents/redfish"
	_ "github.com/fenced/fenced/agents/san"
)

// Exit codes of fenced. Documented in README.md and `fenced --help`.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure
	exitUsage   = 2 // bad command line
	exitConfig  = 3 // configuration invalid
	exitStartup = 4 // could not start: port in use, data dir unwritable, ...
	exitHalted  = 5 // the replicated log holds an entry of a newer fenced
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// stdio holds the streams a command writes to, injectable for tests.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// subcommands built by other files of this package (agent, sim, ...).
var extraCommands []func(ctx context.Context, s *stdio) *cobra.Command

// Run runs fenced with args and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := &stdio{in: stdin, out: stdout, err: stderr}
	root := newRootCmd(ctx, s)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "fenced:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "fenced:", err)
	return exitUsage
}

func newRootCmd(ctx context.Context, s *stdio) *cobra.Command {
	root := &cobra.Command{
		Use:   "fenced",
		Short: "HA cluster fencing daemon with STONITH",
		Long: `fenced keeps exactly one node of a cluster primary with the shared storage
mounted. Nodes find each other by gossip, elect a primary with a majority of
the configured nodes (raft), and a new primary fences the old one through its
BMC, PDU, fabric or plugin agents, confirms it is down by reading the state
back, and only then mounts the storage with a new epoch (fencing token).

Exit codes:
  0  success
  1  runtime failure (for "agent": the FenceAgentAPI failure code)
  2  bad command line
  3  configuration invalid
  4  could not start (address in use, data directory not writable, ...)
  5  halted: the replicated log holds an entry of a newer fenced (upgrade
     this node; see README, "Upgrades and downgrades")`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.CompletionOptions.HiddenDefaultCmd = true
	for _, f := range extraCommands {
		root.AddCommand(f(ctx, s))
	}
	setExamples(root)
	return root
}
