package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents/redfish/redfishsim"
)

func init() {
	simCommands = append(simCommands, newSimRedfishCmd)
}

// newSimRedfishCmd serves the Redfish BMC simulator standalone; with
// --host-cmd, power-on starts that command and power-off kills it, so the
// process stands for the node.
func newSimRedfishCmd(ctx context.Context, s *stdio) *cobra.Command {
	var listen, profile, user, passFile, caOut, hostCmd string
	var useTLS, on bool
	var powerDelay, sessionTimeout, latency time.Duration
	cmd := &cobra.Command{
		Use:   "redfish",
		Short: "Simulate a Redfish BMC (DMTF mockup, iDRAC, iLO, OpenBMC shape or a quirk) on loopback",
		Long: `Serves a Redfish service built from DMTF's public-rackmount1 mockup, shaped
like a vendor BMC or given one BMC quirk by --profile (` + strings.Join(redfishsim.Profiles(), ", ") + `;
agents/redfish/README.md describes each: sushy has no session service, slow-off
reads PoweringOff for 5s, push-button allows only PushPowerButton, session-limit
has 2 session slots, slow-task answers resets with a task that runs for 30s).
With --tls it serves HTTPS with a freshly generated CA and certificate; --ca-out
writes the CA certificate for clients (ca_file). The password is read from
--password-file or $FENCED_SIM_PASSWORD (never from the command line); without
either it is "password". With --host-cmd, power-on runs the command (through
/bin/sh -c) and power-off kills it, so fencing really stops the node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			password := os.Getenv("FENCED_SIM_PASSWORD")
			if passFile != "" {
				b, err := os.ReadFile(passFile)
				if err != nil {
					return &exitError{code: exitConfig, err: fmt.Errorf("--password-file: %w", err)}
				}
				password = strings.TrimRight(strings.SplitN(string(b), "\n", 2)[0], "\r")
			}
			if password == "" {
				password = "password"
			}
			offDelay := powerDelay
			if !cmd.Flags().Changed("power-delay") && redfishsim.ProfilePowerOffDelay(profile) > 0 {
				offDelay = 0 // the profile's own (slow-off)
			}
			opts := redfishsim.Options{
				Profile:        profile,
				Users:          []redfishsim.User{{Name: user, Password: password}},
				SessionTimeout: sessionTimeout,
				PowerOffDelay:  offDelay,
				PowerOnDelay:   powerDelay,
				Log:            slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: slog.LevelInfo})),
			}
			if !on {
				opts.InitialPowerState = "Off"
			}
			node := &hostProcess{command: hostCmd}
			if hostCmd != "" {
				opts.OnPowerOff = func(string) { _ = node.stop() }
				opts.OnPowerOn = func(string) { _ = node.start() }
				if on {
					if err := node.start(); err != nil {
						return &exitError{code: exitStartup, err: err}
					}
				}
			}
			defer node.stop()
			srv, err := redfishsim.Start(listen, useTLS, opts)
			if err != nil {
				return &exitError{code: exitStartup, err: err}
			}
			defer srv.Close()
			if latency > 0 {
				srv.SetFaults(redfishsim.Faults{Latency: latency})
			}
			if caOut != "" {
				if !useTLS {
					return &exitError{code: exitUsage, err: fmt.Errorf("--ca-out needs --tls")}
				}
				if err := os.WriteFile(caOut, srv.CACertPEM, 0o644); err != nil {
					return &exitError{code: exitStartup, err: fmt.Errorf("--ca-out: %w", err)}
				}
			}
			fmt.Fprintf(s.out, "redfish sim (profile %s) listening on %s (user %s; systems %s)\n",
				srv.Profile(), srv.URL, user, strings.Join(srv.SystemURIs(), ", "))
			<-ctx.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8443", "loopback TCP address to serve on (port 0 picks one; the URL is printed)")
	f.StringVar(&profile, "profile", redfishsim.ProfileDMTF, "BMC shape: "+strings.Join(redfishsim.Profiles(), ", "))
	f.BoolVar(&useTLS, "tls", false, "serve HTTPS with a generated certificate")
	f.StringVar(&caOut, "ca-out", "", "write the CA certificate (PEM) to this file (with --tls)")
	f.StringVar(&user, "user", "admin", "account name")
	f.StringVar(&passFile, "password-file", "", "file whose first line is the password")
	f.StringVar(&hostCmd, "host-cmd", "", "command standing for the node: started on power-on, killed on power-off")
	f.BoolVar(&on, "on", true, "start powered on")
	f.DurationVar(&powerDelay, "power-delay", 500*time.Millisecond, "time PowerState reads PoweringOff/PoweringOn (slow-off: PoweringOff lasts 5s unless this is given)")
	f.DurationVar(&sessionTimeout, "session-timeout", 30*time.Minute, "idle session timeout")
	f.DurationVar(&latency, "latency", 0, "added latency per request")
	return cmd
}
