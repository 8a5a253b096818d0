package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

func init() {
	simCommands = append(simCommands, newSimIPMICmd)
}

// newSimIPMICmd runs go-ipmi's reference BMC standalone; with --host-cmd,
// power-on starts that command and power-off kills it with every process it
// started, so the process stands for the node.
func newSimIPMICmd(ctx context.Context, s *stdio) *cobra.Command {
	var listen, user, passFile, hostCmd string
	var on bool
	cmd := &cobra.Command{
		Use:   "ipmi",
		Short: "Simulate an IPMI BMC (go-ipmi reference BMC, lanplus suites 3 and 17)",
		Long: `Serves IPMI v2.0 RMCP+ (cipher suites 3 and 17) and v1.5 LAN on a UDP address:
loopback by default, or any address of this machine given with --listen (a lab
in network namespaces, a BMC address on a bridge); the simulator itself then
runs on loopback behind a relay from that address. The password is read from
--password-file or $FENCED_SIM_PASSWORD (never from the command line); without
either it is "password". With --host-cmd, power-on runs the command (through
/bin/sh -c, in a process group of its own) and power-off kills that whole
group and waits until it is gone, so fencing really stops the processes
standing for the node (a process that leaves the group, with setsid, escapes).`,
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
			// The simulator serves loopback only: another address gets a
			// relay in front of it.
			relayed := !isLoopback(listen)
			if relayed {
				cfg.Addr = "127.0.0.1:0"
			}
			bmc, err := ipmisim.StartBMC(cfg)
			if err != nil {
				return &exitError{code: exitStartup, err: err}
			}
			defer bmc.Close()
			addr := bmc.Addr()
			if relayed {
				r, err := relayUDP(listen, bmc.Addr())
				if err != nil {
					return &exitError{code: exitStartup, err: fmt.Errorf("--listen %s: %w", listen, err)}
				}
				defer r.Close()
				addr = r.Addr()
			}
			fmt.Fprintf(s.out, "ipmi sim listening on %s (user %s)\n", addr, user)
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:6230", "UDP address to serve on (any address of this machine; port 0 picks one, printed)")
	cmd.Flags().StringVar(&user, "user", "admin", "IPMI user name")
	cmd.Flags().StringVar(&passFile, "password-file", "", "file whose first line is the password")
	cmd.Flags().StringVar(&hostCmd, "host-cmd", "", "command standing for the node: started on power-on, killed with its process group on power-off")
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
	// A group of its own: the shell may start more than one process (a
	// pipeline, a daemon in the background), and power-off stops them all.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return fmt.Errorf("host command: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	h.cmd, h.done = c, done
	return nil
}

// stop kills the host's whole process group and waits until none of it is
// left: power-off is answered only once the node is really gone.
func (h *hostProcess) stop() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return nil
	}
	pgid := h.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-h.done
	// Children the shell left behind are orphans now: wait until none of
	// the group runs (a zombie waiting for init to reap it runs nothing).
	for deadline := time.Now().Add(5 * time.Second); groupRuns(pgid) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	h.cmd = nil
	return nil
}

// groupRuns reports whether a process of group pgid is alive and not a
// zombie, from /proc/PID/stat ("PID (COMM) STATE PPID PGRP ...").
func groupRuns(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[0] != "Z" && f[0] != "X" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// isLoopback reports whether addr's host is a loopback IP ("" and
// localhost count as loopback).
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true // let the simulator report it
	}
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip == nil || ip.IsLoopback()
}
