package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/apiclient"
)

// Exit codes of fencectl, documented in --help.
const (
	exitOK           = 0
	exitFailure      = 1 // the daemon refused or the operation failed
	exitUsage        = 2 // bad command line
	exitNoDaemon     = 3 // the daemon is not running (socket missing or refusing)
	exitNotConfirmed = 4 // a destructive command was not confirmed with --yes
	exitPermission   = 5 // the socket exists but this user may not open it
	exitNoAnswer     = 6 // no answer within --timeout, or interrupted: the outcome is unknown
)

// codes names each exit code in -o json errors.
var codes = map[int]string{exitFailure: api.CodeFailed, exitUsage: api.CodeUsage, exitNoDaemon: api.CodeNotRunning,
	exitNotConfirmed: api.CodeNotConfirmed, exitPermission: api.CodePermissionDenied, exitNoAnswer: api.CodeNoAnswer}

// Default answer timeouts, by what a command asks of the daemon (see
// --timeout).
const (
	timeoutQuery  = 30 * time.Second
	timeoutDevice = 2 * time.Minute // device status talks to the device
	timeoutChange = time.Minute     // standby, transfer: one commit
	// fence, unfence, confirm: longer than the daemon's own bound, so
	// its answer (success or failure) arrives before fencectl gives up.
	timeoutAdmin = api.AdminTimeout + time.Minute
)

// annTimeout is the command annotation holding its default timeout.
const annTimeout = "fencectl/timeout"

func withTimeout(c *cobra.Command, d time.Duration) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[annTimeout] = d.String()
	return c
}

type exitError struct {
	code int
	err  error
	// apiCode is the daemon's error code, when it answered with one.
	apiCode string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

type app struct {
	socket  string
	output  string
	timeout time.Duration // 0: the command's default
	out     io.Writer
	errw    io.Writer
	in      io.Reader

	// reqTimeout is the resolved timeout of the running command, and
	// check where to look when it expires ("" for a query).
	reqTimeout time.Duration
	check      string
}

// commands built by other files of this package.
var extraCommands []func(a *app) *cobra.Command

// Run runs fencectl with args and returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{out: stdout, errw: stderr, in: stdin, output: "table"}
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code, apiCode := exitUsage, ""
	var ee *exitError
	if errors.As(err, &ee) {
		code, apiCode = ee.code, ee.apiCode
		err = ee.err
	}
	a.printError(code, apiCode, err)
	return code
}

// printError reports a failed command on stderr: a line of text, or with
// -o json an api.Error document, so a program reading fencectl's output
// gets JSON on both streams.
func (a *app) printError(code int, apiCode string, err error) {
	msg := err.Error()
	if a.output == "json" {
		if apiCode == "" {
			apiCode = codes[code]
		}
		enc := json.NewEncoder(a.errw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(api.Error{SchemaVersion: api.SchemaVersion, Message: msg, Code: apiCode, ExitCode: code})
		return
	}
	if msg == "" {
		return
	}
	// The message may quote the daemon; keep line breaks, escape the rest.
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = api.EscapeText(l)
	}
	fmt.Fprintln(a.errw, "fencectl:", strings.Join(lines, "\n"))
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "fencectl",
		Short: "Control the fenced daemon",
		Long: `fencectl talks to the local fenced daemon through its unix socket.

With -o json every command prints one JSON document with a schemaVersion on
stdout (status --watch: one per line, per change). When a command fails,
stderr carries a JSON error document {"schemaVersion", "error", "code",
"exitCode"} and stdout nothing, except the record of a fence that ran and
failed. The schemas are published in fenced's source, docs/schema/.

--timeout bounds the wait for the daemon's answer. By default: 30s for
status, history, device list and version; 2m for device status; 1m for
standby, transfer, reload and config accept; 1m30s for report; 11m for fence, unfence and confirm (the daemon bounds
those at 10m, so its answer comes first). When it expires, the request may
still be running in the cluster: check ` + "`fencectl history`" + `.

Exit codes:
  0  success
  1  the daemon refused the request or the operation failed
  2  bad command line
  3  the daemon is not running (no socket, or nothing answers on it)
  4  a destructive command was not confirmed (--yes)
  5  permission denied on the socket (run as root or as a member of api.group)
  6  no answer within --timeout, or interrupted: the outcome is unknown`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.out)
	root.SetErr(a.errw)
	root.CompletionOptions.HiddenDefaultCmd = true
	root.PersistentFlags().StringVarP(&a.socket, "socket", "s", "/run/fenced/fenced.sock", "the daemon's API socket")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().DurationVar(&a.timeout, "timeout", 0, "how long to wait for the daemon's answer (default: by command, see above)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if a.output != "table" && a.output != "json" {
			out := a.output
			a.output = "table"
			return &exitError{code: exitUsage, err: fmt.Errorf("--output %q: want table or json", out)}
		}
		if a.timeout < 0 {
			return &exitError{code: exitUsage, err: fmt.Errorf("--timeout %v: must be positive", a.timeout)}
		}
		a.reqTimeout = a.timeout
		if d, err := time.ParseDuration(cmd.Annotations[annTimeout]); err == nil {
			if a.reqTimeout == 0 {
				a.reqTimeout = d
			}
			switch d {
			case timeoutAdmin:
				a.check = "fencectl history"
			case timeoutChange:
				a.check = "fencectl status"
			}
		}
		if a.reqTimeout == 0 {
			a.reqTimeout = timeoutQuery
		}
		return nil
	}
	for _, f := range extraCommands {
		root.AddCommand(f(a))
	}
	setExamples(root)
	return root
}

// call performs one API request and decodes the JSON answer into out,
// mapping failures to exit codes.
func (a *app) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	c := apiclient.New(a.socket)
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, a.reqTimeout)
	defer cancel()
	return a.callError(ctx, c.Do(rctx, method, path, query, body, out))
}

// callError maps a failed request to fencectl's exit codes (nil: nil); ctx
// is the command's, whose end means an interrupt.
func (a *app) callError(ctx context.Context, err error) error {
	var ae *apiclient.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, apiclient.ErrNotRunning):
		return &exitError{code: exitNoDaemon, err: err}
	case errors.Is(err, apiclient.ErrPermission):
		return &exitError{code: exitPermission, err: err}
	case errors.As(err, &ae):
		return &exitError{code: exitFailure, err: err, apiCode: ae.Code}
	case ctx.Err() != nil:
		msg := "interrupted before fenced answered"
		if a.check != "" {
			msg += ": the request may still be running; check `" + a.check + "`"
		}
		return &exitError{code: exitNoAnswer, err: errors.New(msg)}
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("no answer from fenced on %s within %v (--timeout)", a.socket, a.reqTimeout)
		if a.check != "" {
			msg += ": the request may still be running; check `" + a.check + "`"
		} else {
			msg += ": the daemon may be stuck or overloaded"
		}
		return &exitError{code: exitNoAnswer, err: errors.New(msg)}
	}
	return &exitError{code: exitFailure, err: err}
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

// cell is a table cell: "-" when empty, control characters escaped (text
// from the cluster may hold anything a client stored before it was
// cleaned).
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return api.EscapeText(s)
}
