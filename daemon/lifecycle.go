package daemon

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fenced/fenced/quorum"
)

// FaultStallEnv names a test-only fault: after the given duration
// (e.g. "3s") the daemon's main loop stops making progress, as if it were
// stuck, so tests can see the service watchdog stop being fed.
const FaultStallEnv = "FENCED_FAULT_STALL_AFTER"

// beat records that the main loop made progress. A loop that stopped
// beating stops the systemd watchdog pings, so systemd restarts the
// service (and a hardware watchdog would reset the node).
func (d *Daemon) beat() {
	if d.stallAfter > 0 && quorum.Since(d.started) > d.stallAfter {
		if d.stalled.CompareAndSwap(false, true) {
			d.log.Error("FAULT INJECTION: main loop stalled", "env", FaultStallEnv)
		}
		select {} // stuck for good
	}
	d.lastBeat.Store(int64(quorum.Now()))
}

func (d *Daemon) notify(state string) {
	if d.opts.Notify != nil {
		d.opts.Notify(state)
	}
}

// lifecycle tells the service manager about the daemon: READY=1 once it
// has joined the cluster (a leader is known and its state is loaded),
// WATCHDOG=1 while the main loop beats, STATUS= with role and epoch.
func (d *Daemon) lifecycle(ctx context.Context) {
	ready := false
	var lastStatus string
	interval := 500 * time.Millisecond
	if w := d.opts.WatchdogInterval; w > 0 && w/4 < interval {
		interval = w / 4
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !ready && d.raft.Leader() != "" {
			ready = true
			d.log.Info("joined the cluster", "leader", d.raft.Leader(), "epoch", d.KnownEpoch())
			d.notify("READY=1")
		}
		if w := d.opts.WatchdogInterval; w > 0 && quorum.Since(quorum.Mono(d.lastBeat.Load())) < w/2 {
			d.notify("WATCHDOG=1")
		}
		if s := d.statusLine(ready); s != lastStatus {
			lastStatus = s
			d.notify("STATUS=" + s)
		}
	}
}

func (d *Daemon) statusLine(joined bool) string {
	if !joined {
		return "joining the cluster"
	}
	st := d.raft.FSM().State()
	switch role := d.Role(); role {
	case RolePrimary, RolePrimaryElect:
		if st.HolderState == quorum.HolderBlocked {
			return fmt.Sprintf("%s, epoch %d, BLOCKED: %s", role, d.Epoch(), st.Reason)
		}
		return fmt.Sprintf("%s, epoch %d", role, d.Epoch())
	default:
		return fmt.Sprintf("%s, primary %s at epoch %d", role, dashIfEmpty(st.Holder), st.Epoch)
	}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stallFromEnv() time.Duration {
	v := os.Getenv(FaultStallEnv)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}
