package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/apiclient"
)

// Exit codes of fencectl, documented in --help.
const (
	exitOK           = 0
	exitFailure      = 1 // the daemon refused or the operation failed
	exitUsage        = 2 // bad command line
	exitNoDaemon     = 3 // the daemon is not running (socket missing or refusing)
	exitNotConfirmed = 4 // a destructive command was not confirmed with --yes
)

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

type app struct {
	socket string
	output string
	out    io.Writer
	errw   io.Writer
	in     io.Reader
}

// commands built by other files of this package.
var extraCommands []func(a *app) *cobra.Command

// Run runs fencectl with args and returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{out: stdout, errw: stderr, in: stdin}
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err.Error() != "" {
			fmt.Fprintln(stderr, "fencectl:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "fencectl:", err)
	return exitUsage
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "fencectl",
		Short: "Control the fenced daemon",
		Long: `fencectl talks to the local fenced daemon through its unix socket.

Exit codes:
  0  success
  1  the daemon refused the request or the operation failed
  2  bad command line
  3  the daemon is not running (no socket, or nothing answers on it)
  4  a destructive command was not confirmed (--yes)`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.out)
	root.SetErr(a.errw)
	root.CompletionOptions.HiddenDefaultCmd = true
	root.PersistentFlags().StringVarP(&a.socket, "socket", "s", "/run/fenced/fenced.sock", "the daemon's API socket")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if a.output != "table" && a.output != "json" {
			return &exitError{exitUsage, fmt.Errorf("--output %q: want table or json", a.output)}
		}
		return nil
	}
	for _, f := range extraCommands {
		root.AddCommand(f(a))
	}
	return root
}

// call performs one API request and decodes the JSON answer into out,
// mapping failures to exit codes.
func (a *app) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	c := apiclient.New(a.socket)
	defer c.Close()
	err := c.Do(ctx, method, path, query, body, out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, apiclient.ErrNotRunning):
		return &exitError{exitNoDaemon, err}
	}
	return &exitError{exitFailure, err}
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	d := time.Since(*t)
	if d < time.Second {
		return "now"
	}
	return d.Round(100*time.Millisecond).String() + " ago"
}
