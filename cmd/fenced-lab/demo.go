package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage/tokenstore"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

func init() {
	extraCommands = append(extraCommands, newDemoCmd)
}

func newDemoCmd(ctx context.Context, s *stdio) *cobra.Command {
	var binDir string
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a local 3-node cluster with simulated BMCs and show a failover with fencing",
		Long: `Run a local demonstration, no root needed: three fenced processes on
loopback, each with a simulated IPMI BMC whose power-off really kills that
node, and a token-checking storage stand-in that the primary writes to with
its epoch. The primary is paused (SIGSTOP); the others elect a new primary,
which fences the old one through its BMC, confirms the power-off by reading it
back, and only then starts the storage with a higher epoch. A write the old
primary had in flight arrives late and is rejected as stale. Prints the
timeline, then fencectl status and history.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runDemo(ctx, s.out, binDir, keep); err != nil {
				return &exitError{exitFailure, err}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&binDir, "bin", "", "directory holding the fenced, fencectl and fenced-lab binaries (default: this binary's directory)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's directory (configs, logs, store log)")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, binDir string, keep bool) error {
	if binDir == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		binDir = filepath.Dir(self)
	}
	fenced, fencectl, lab := filepath.Join(binDir, "fenced"), filepath.Join(binDir, "fencectl"), filepath.Join(binDir, "fenced-lab")
	for _, b := range []string{fenced, fencectl} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("demo needs %s (build with `make build`): %w", b, err)
		}
	}
	dir, err := os.MkdirTemp("", "fenced-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%6.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ms := func(n int) config.Duration { return config.Duration(time.Duration(n) * time.Millisecond) }
	c, err := devcluster.New(devcluster.Options{
		Nodes: 3, Dir: dir, Bin: fenced, Lab: lab, BMC: true, Store: true,
		Timing: config.Timing{Heartbeat: ms(200), Lease: ms(2000), Margin: ms(200), Grace: ms(1500), FenceTimeout: ms(10000)},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 50*time.Second)
	defer cancel()

	say("starting 3 fenced nodes on loopback, each with a simulated IPMI BMC (lease 2s, margin 200ms)")
	if err := c.Start(); err != nil {
		return err
	}
	p, e1, err := c.Primary(ctx)
	if err != nil {
		return err
	}
	say("elected: %s is primary with epoch %d (a majority of the 3 configured nodes agreed)", p.Name, e1)
	if _, err := c.WaitWrite(ctx, p.Name, e1); err != nil {
		return err
	}
	say("storage started on %s with fencing token %d: its writes are accepted", p.Name, e1)
	time.Sleep(time.Second)

	say("pausing %s with SIGSTOP (the daemon and its storage writer freeze; the BMC still answers)", p.Name)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	paused := time.Now()
	q, e2, err := c.Primary(ctx, p)
	if err != nil {
		return err
	}
	tookOver := time.Now()
	var fence *fencing.Record
	hist, err := historyOf(ctx, q, p.Name)
	if err != nil {
		return err
	}
	for i := range hist {
		if hist[i].Kind == fencing.KindFence && hist[i].Outcome == fencing.OutcomeSuccess {
			fence = &hist[i]
		}
	}
	if fence == nil {
		return errors.New("the new primary acted without a recorded fence of the old one")
	}
	at := fence.Attempts[len(fence.Attempts)-1]
	say("%s elected with epoch %d; it fenced %s via IPMI (%s): power off, read back %q in %d ms",
		q.Name, e2, p.Name, at.Device, at.ReadBack, at.Duration.Milliseconds())
	say("BMC of %s reports power %s; process running: %v", p.Name, onOff(c.BMCs[p.Index].PoweredOn()), p.Running())
	if _, err := c.WaitWrite(ctx, q.Name, e2); err != nil {
		return err
	}
	say("storage started on %s with epoch %d: %.2fs after the pause, %.2fs after the takeover began",
		q.Name, e2, time.Since(paused).Seconds(), time.Since(tookOver).Seconds())

	// A write the old primary sent just before it froze, delivered late
	// (e.g. held in a network or SAN queue): the store checks the token.
	code, body, err := lateWrite(c.Store.URL, p.Name, e1)
	if err != nil {
		return err
	}
	if code != http.StatusConflict {
		return fmt.Errorf("late write with epoch %d was not rejected: %d %s", e1, code, body)
	}
	say("a late write from %s carrying epoch %d arrives: REJECTED by the storage (%s)", p.Name, e1, body)

	entries, err := c.StoreEntries()
	if err != nil {
		return err
	}
	if err := tokenstore.Check(entries); err != nil {
		return fmt.Errorf("storage checker: %w", err)
	}
	say("checker: %d writes logged; no two holders overlapped, no stale epoch accepted", len(entries))

	// Let gossip notice the old primary is gone before showing the status.
	for wait := time.Now(); time.Since(wait) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
		st, err := q.Status(ctx)
		if err == nil && gossipState(st, p.Name) != "alive" && gossipState(st, p.Name) != "suspect" {
			break
		}
	}
	fmt.Fprintf(out, "\n$ fencectl status\n")
	runCtl(ctx, out, fencectl, q.Socket, "status")
	fmt.Fprintf(out, "\n$ fencectl history -v\n")
	runCtl(ctx, out, fencectl, q.Socket, "history", "-v")
	if keep {
		fmt.Fprintf(out, "\ndemo files kept in %s\n", dir)
	}
	say("done")
	return nil
}

func gossipState(st daemon.Status, node string) string {
	for _, n := range st.Nodes {
		if n.Name == node {
			return n.Gossip
		}
	}
	return ""
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func historyOf(ctx context.Context, n *devcluster.Node, node string) ([]fencing.Record, error) {
	cl := n.Client()
	defer cl.Close()
	var h daemon.History
	err := cl.Do(ctx, "GET", "/v1/history", map[string][]string{"node": {node}}, nil, &h)
	return h.Records, err
}

func lateWrite(url, node string, epoch uint64) (int, string, error) {
	b, _ := json.Marshal(tokenstore.WriteRequest{Node: node, Epoch: epoch, Seq: 1 << 30, Data: "late"})
	resp, err := http.Post(url+"/write", "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var wr tokenstore.WriteResponse
	_ = json.NewDecoder(resp.Body).Decode(&wr)
	msg := wr.Error
	if msg == "" {
		msg = wr.Result
	}
	return resp.StatusCode, msg, nil
}

func runCtl(ctx context.Context, out io.Writer, bin, socket string, args ...string) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"--socket", socket}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	_ = cmd.Run()
}
