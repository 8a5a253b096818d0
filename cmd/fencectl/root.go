package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
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

// apiErr is a non-2xx answer from the daemon.
type apiErr struct {
	Status int
	Msg    string `json:"error"`
	Code   string `json:"code"`
}

func (e *apiErr) Error() string { return e.Msg }

// call performs one API request and decodes the JSON answer into out.
func (a *app) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.socket)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = strings.NewReader(string(b))
	}
	u := "http://fenced" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			return &exitError{exitNoDaemon, fmt.Errorf("fenced is not running (cannot connect to %s: %v)", a.socket, errors.Unwrap(ne.Err))}
		}
		return &exitError{exitFailure, err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return &exitError{exitFailure, err}
	}
	if resp.StatusCode/100 != 2 {
		e := &apiErr{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Msg == "" {
			e.Msg = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		}
		return &exitError{exitFailure, e}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &exitError{exitFailure, fmt.Errorf("%s %s: undecodable answer: %w", method, path, err)}
		}
	}
	return nil
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
