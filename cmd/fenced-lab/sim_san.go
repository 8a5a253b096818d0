package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents/san/fabricsim"
)

func init() {
	simCommands = append(simCommands, newSimSANCmd)
}

// newSimSANCmd runs the Brocade FOS REST zoning simulator standalone.
func newSimSANCmd(ctx context.Context, s *stdio) *cobra.Command {
	var (
		listen, zoningFile, user, passFile, certOut string
		useTLS, noEffect                            bool
		faults                                      fabricsim.Faults
	)
	cmd := &cobra.Command{
		Use:   "san",
		Short: "Simulate a Brocade FOS REST fabric (zoning) on loopback",
		Long: `Serves the zoning part of the Brocade Fabric OS REST API (login/logout,
brocade-zone defined and effective configuration, transactions, checksums)
on a loopback address, for the san fence agent.

The password is read from --password-file or $FENCED_SIM_PASSWORD (never from
the command line); without either it is "password". Without --zoning the
fabric holds the example zoning of three hosts and one array (see
fabricsim.ExampleZoning); --zoning reads the same shape as JSON:
  {"zones":[{"name":"z1","members":["10:00:...","alias1"]}],
   "aliases":[{"name":"alias1","members":["50:06:..."]}],
   "cfgs":[{"name":"cfg1","zones":["z1"]}], "enabled":"cfg1",
   "default_zone_access":0}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			z := fabricsim.ExampleZoning()
			if zoningFile != "" {
				b, err := os.ReadFile(zoningFile)
				if err != nil {
					return &exitError{code: exitConfig, err: fmt.Errorf("--zoning: %w", err)}
				}
				z = fabricsim.Zoning{}
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&z); err != nil {
					return &exitError{code: exitConfig, err: fmt.Errorf("--zoning %s: %w", zoningFile, err)}
				}
			}
			pass := os.Getenv("FENCED_SIM_PASSWORD")
			if passFile != "" {
				b, err := os.ReadFile(passFile)
				if err != nil {
					return &exitError{code: exitConfig, err: fmt.Errorf("--password-file: %w", err)}
				}
				pass = strings.TrimRight(strings.SplitN(string(b), "\n", 2)[0], "\r")
			}
			if pass == "" {
				pass = "password"
			}
			f, err := fabricsim.New(fabricsim.Options{Users: map[string]string{user: pass}, Zoning: z})
			if err != nil {
				return &exitError{code: exitConfig, err: err}
			}
			faults.EnableNoEffect = noEffect
			f.SetFaults(faults)
			srv, err := fabricsim.Start(f, listen, useTLS)
			if err != nil {
				return &exitError{code: exitStartup, err: err}
			}
			defer srv.Close()
			if certOut != "" && srv.CertPEM != nil {
				if err := os.WriteFile(certOut, srv.CertPEM, 0o644); err != nil {
					return &exitError{code: exitStartup, err: fmt.Errorf("--cert-out: %w", err)}
				}
			}
			fmt.Fprintf(s.out, "fabricsim: serving %s (user %s)\n", srv.URL, user)
			<-ctx.Done()
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", "127.0.0.1:8080", "loopback address to listen on (port 0 picks one)")
	fl.BoolVar(&useTLS, "tls", false, "serve HTTPS with a fresh self-signed certificate")
	fl.StringVar(&certOut, "cert-out", "", "write the self-signed certificate (PEM) here, for the agent's ca_file")
	fl.StringVar(&zoningFile, "zoning", "", "initial zoning database (JSON)")
	fl.StringVar(&user, "username", "admin", "user name to accept")
	fl.StringVar(&passFile, "password-file", "", "file whose first line is the password to accept")
	fl.IntVar(&faults.ConcurrentChanges, "conflicts", 0, "another admin commits before each of the next N saves/enables (-1: always)")
	fl.BoolVar(&noEffect, "enable-no-effect", false, "accept enables but never update the effective configuration")
	fl.DurationVar(&faults.EffectiveDelay, "effective-delay", 0, "time for an enable to reach the effective configuration")
	fl.IntVar(&faults.ServerErrors, "server-errors", 0, "answer the next N requests with 503 (-1: always)")
	fl.DurationVar(&faults.Latency, "latency", 0, "added to every request")
	return cmd
}
