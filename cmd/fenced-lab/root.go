package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes of fenced-lab (those of fenced, for the commands that moved
// here from it).
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure
	exitUsage   = 2 // bad command line
	exitConfig  = 3 // a file given is invalid
	exitStartup = 4 // could not start: port in use, ...
)

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

// subcommands built by other files of this package.
var extraCommands []func(ctx context.Context, s *stdio) *cobra.Command

// Run runs fenced-lab with args and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := &stdio{in: stdin, out: stdout, err: stderr}
	root := &cobra.Command{
		Use:   "fenced-lab",
		Short: "fenced's demonstration and test simulators (not part of the packages)",
		Long: `fenced-lab runs what fenced's demonstration and tests need beside the daemon:
a local 3-node cluster with simulated BMCs showing a failover with fencing
(demo), and the simulators (sim: an IPMI BMC, a Redfish BMC, a Brocade fabric,
a token-checking storage stand-in and its writer). The simulators listen on
loopback, but for the IPMI BMC, which serves any address of this machine given
to it with --listen.

Exit codes:
  0  success
  1  runtime failure
  2  bad command line
  3  a file given is invalid
  4  could not start (address in use, ...)`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.CompletionOptions.DisableDefaultCmd = true
	for _, f := range extraCommands {
		root.AddCommand(f(ctx, s))
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "fenced-lab:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "fenced-lab:", err)
	return exitUsage
}
