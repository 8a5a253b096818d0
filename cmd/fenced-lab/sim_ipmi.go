package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

func init() {
	simCommands = append(simCommands, newSimIPMICmd)
}

// newSimIPMICmd runs go-ipmi's reference BMC standalone on loopback; with
// --host-cmd, power-on starts that command and power-off kills it, so the
// process stands for the node.
func newSimIPMICmd(ctx context.Context, s *stdio) *cobra.Command {
	var listen, user, passFile, hostCmd string
	var on bool
	cmd := &cobra.Command{
		Use:   "ipmi",
		Short: "Simulate an IPMI BMC (go-ipmi reference BMC, lanplus suites 3 and 17) on loopback",
		Long: `Serves IPMI v2.0 RMCP+ (cipher suites 3 and 17) and v1.5 LAN on a loopback
UDP address. The password is read from --password-file or $FENCED_SIM_PASSWORD
(never from the command line); without either it is "password". With
--host-cmd, power-on runs the command (through /bin/sh -c) and power-off kills
it, so fencing really stops the process standing for the node.`,
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
			node := &hostProcess{command: hostCmd}
			cfg := ipmisim.BMCConfig{Addr: listen, Username: user, Password: password, PoweredOn: on}
			if hostCmd != "" {
				cfg.OnPowerOff, cfg.OnPowerOn = node.stop, node.start
				if on {
					if err := node.start(); err != nil {
						return &exitError{code: exitStartup, err: err}
					}
				}
			}
			defer node.stop()
			bmc, err := ipmisim.StartBMC(cfg)
			if err != nil {
				return &exitError{code: exitStartup, err: err}
			}
			defer bmc.Close()
			fmt.Fprintf(s.out, "ipmi sim listening on %s (user %s)\n", bmc.Addr(), user)
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:6230", "loopback UDP address to serve on")
	cmd.Flags().StringVar(&user, "user", "admin", "IPMI user name")
	cmd.Flags().StringVar(&passFile, "password-file", "", "file whose first line is the password")
	cmd.Flags().StringVar(&hostCmd, "host-cmd", "", "command standing for the node: started on power-on, killed on power-off")
	cmd.Flags().BoolVar(&on, "on", true, "start powered on")
	return cmd
}

// hostProcess is the process a simulated BMC powers.
type hostProcess struct {
	command string
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
}

func (h *hostProcess) start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.command == "" || h.cmd != nil {
		return nil
	}
	c := exec.Command("/bin/sh", "-c", h.command)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Start(); err != nil {
		return fmt.Errorf("host command: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	h.cmd, h.done = c, done
	return nil
}

// stop kills the host and waits for it: power-off is answered only once
// the node is really gone.
func (h *hostProcess) stop() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return nil
	}
	_ = h.cmd.Process.Kill()
	<-h.done
	h.cmd = nil
	return nil
}
