package daemon

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/fenced/fenced/daemon/alerts"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/health"
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/stonith/fencing"
)

// Alerts (package alerts): the daemon turns what happens into alert
// events, each raised by the node where it happens — a fence by the node
// that runs it, a change of primary by the new primary, a device's health
// by the node whose check changed, a configuration mismatch by the node
// that differs, quorum by each node for its own view — and hands them to
// the alert manager, which never blocks the caller.

func newAlerts(cfg *config.Config, log *slog.Logger, m *metrics) *alerts.Manager {
	alerts.Version = api.Version
	return alerts.New(alerts.Options{Self: cfg.Node, Cluster: cfg.Cluster.Name, Logger: log.With("component", "alerts"),
		Observe: m.alertRan, Dropped: m.alertDropped}, cfg.AlertAgents())
}

// alertPhase raises the alert of a change of the tenure's phase: primary
// changed (this node began acting).
func (d *Daemon) alertPhase(before, after tenure.Phase, v *machineSnapshot) {
	if after == tenure.Serving && before != tenure.Serving {
		d.alerts.Emit(alerts.Event{Name: alerts.PrimaryChanged, Kind: alerts.KindNode, Node: d.self, Desc: "primary", Epoch: v.epoch})
	}
}

// alertBlocked and alertUnblocked raise one alert when a takeover blocks
// and one when the block ends, however many fences are retried between.
func (d *Daemon) alertBlocked(v *machineSnapshot) {
	d.alerts.Emit(alerts.Event{Name: alerts.TakeoverBlocked, Kind: alerts.KindFencing, Node: d.self, Task: "takeover", RC: 1, HasRC: true,
		Desc: fmt.Sprintf("takeover by %s at epoch %d BLOCKED: %s", d.self, v.epoch, v.blocked), Epoch: v.epoch})
}

func (d *Daemon) alertUnblocked(epoch uint64, how string) {
	d.alerts.Emit(alerts.Event{Name: alerts.TakeoverUnblocked, Kind: alerts.KindFencing, Node: d.self, Task: "takeover", RC: 0, HasRC: true,
		Desc: fmt.Sprintf("takeover by %s at epoch %d unblocked: %s", d.self, epoch, how), Epoch: epoch})
}

// unblockedHow says truly why a block on nodes ended: the takeover was
// given up, or each node's newest record in the replicated history (a
// fence read back, an admin's confirmation, a release, a lease that
// certainly ended). fallback is the machine's own account.
func (d *Daemon) unblockedHow(on []string, v *machineSnapshot, fallback string) string {
	if v.phase < tenure.Waiting || v.phase > tenure.Serving {
		return fmt.Sprintf("the takeover was given up (now %s)", v.role)
	}
	hist := d.raft.FSM().State().History
	var parts []string
	for _, n := range on {
		for i := len(hist) - 1; i >= 0; i-- {
			r := hist[i]
			if r.Target != n || r.Outcome != fencing.OutcomeSuccess {
				continue
			}
			switch r.Kind {
			case fencing.KindFence:
				parts = append(parts, fmt.Sprintf("%s was fenced by %s (%s, read back)", n, r.Executor, r.Action))
			case fencing.KindConfirm:
				parts = append(parts, fmt.Sprintf("%s was confirmed stopped by an admin (fencectl confirm, requested by %s)", n, dashIfEmpty(r.RequestedBy)))
			case fencing.KindRelease:
				parts = append(parts, fmt.Sprintf("%s released the group", n))
			case fencing.KindExpiry, fencing.KindWatchdog:
				parts = append(parts, fmt.Sprintf("%s: %s recorded by %s", n, r.Kind, r.Executor))
			default:
				continue
			}
			break
		}
	}
	if len(parts) < len(on) || len(parts) == 0 {
		return fallback
	}
	return strings.Join(parts, "; ")
}

// alertFenceStarted and alertFenceDone raise the fence alerts (kind
// fencing, node the target, task the action; rc 0 confirmed, 1 failed,
// 2 outcome unknown).
func (d *Daemon) alertFenceStarted(req driver.FenceRequest) {
	d.alerts.Emit(alerts.Event{Name: alerts.FenceStarted, Kind: alerts.KindFencing, Node: req.Target, Task: req.Action, Epoch: req.Epoch,
		Desc: fmt.Sprintf("Operation %s of %s by %s for %s: started (%s)", req.Action, req.Target, d.self, req.RequestedBy, req.Reason)})
}

func (d *Daemon) alertFenceDone(rec fencing.Record) {
	ev := alerts.Event{Name: alerts.FenceSucceeded, Kind: alerts.KindFencing, Node: rec.Target, Task: rec.Action, Epoch: rec.Epoch, HasRC: true,
		Desc: fmt.Sprintf("Operation %s of %s by %s for %s: OK", rec.Action, rec.Target, d.self, rec.RequestedBy)}
	if rec.Outcome != fencing.OutcomeSuccess {
		ev.Name, ev.RC = alerts.FenceFailed, 1
		if rec.Outcome == fencing.OutcomeUnknown {
			ev.RC = 2
		}
		ev.Desc = fmt.Sprintf("Operation %s of %s by %s for %s: %s: %s", rec.Action, rec.Target, d.self, rec.RequestedBy, rec.Outcome, rec.Error)
	}
	d.alerts.Emit(ev)
}

// alertSelfFence starts the self-fence alerts at once: the node resets
// right after, so they are not queued (and may not finish).
func (d *Daemon) alertSelfFence(reason string) {
	d.alerts.Urgent(alerts.Event{Name: alerts.SelfFence, Kind: alerts.KindFencing, Node: d.self, Task: "reboot", RC: 0, HasRC: true,
		Desc: fmt.Sprintf("Operation self-fence of %s by %s: %s", d.self, d.self, reason), Epoch: d.Epoch()})
}

// deviceAlerts raises an alert when a device's health, as this node's
// checks see it, changes: ok ↔ failing, or the kind of failure.
type deviceAlerts struct {
	mu   sync.Mutex
	last map[string]string
}

func (da *deviceAlerts) observe(self string, emit func(alerts.Event), h health.Health) {
	state := h.State
	if h.State == health.StateFailing {
		state += " (" + h.Kind + ")"
	}
	da.mu.Lock()
	if da.last == nil {
		da.last = map[string]string{}
	}
	prev, seen := da.last[h.Device]
	da.last[h.Device] = state
	da.mu.Unlock()
	if prev == state || (!seen && h.State == health.StateOK) {
		// Healthy from the first check on is no news.
		return
	}
	value := state
	if h.State == health.StateFailing {
		value += ": " + h.Error
	}
	emit(alerts.Event{Name: alerts.DeviceChanged, Kind: alerts.KindAttribute, Node: self,
		Attribute: "fence-device-" + h.Device, Value: value})
}
