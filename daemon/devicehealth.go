package daemon

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/health"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// newDeviceChecker plans this node's device checks (package health): every
// device in the topology of a node other than this one, checked with its
// first such mapping (parameters and plug of the first node it fences, in
// configuration order), every devices.NAME.monitor_interval.
// A check's result goes to observe; warm says whether to hold a device's
// session open (wantWarm).
// sessionChanged is told when a device's session opens, closes or was
// tried (sessionsPending); leftOpen closes the sessions a crashed daemon
// left on a device (closeLeft).
func newDeviceChecker(cfg *config.Config, log *slog.Logger, engine *stonith.Engine, observe func(health.Health), warm func(string) bool,
	sessionChanged func(string), leftOpen func(context.Context, string, health.Keeper)) *health.Checker {
	return health.New(health.Options{
		Self: cfg.Node, Devices: deviceWatchList(cfg), Check: engine.Monitor, Logger: log.With("component", "health"),
		DefaultTimeout: cfg.Timing.FenceTimeout.D(), Observe: observe,
		Keep: func(dev health.Device) (health.Keeper, error) { return engine.Keep(dev.Target) },
		Warm: warm, WarmTimeout: sessionsAtJoin, SessionChanged: sessionChanged, LeftOpen: leftOpen,
	})
}

// deviceChecked is where a device check's result goes: metrics and alerts.
func (d *Daemon) deviceChecked(h health.Health) {
	d.metrics.deviceChecked(h)
	d.fence.devAlerts.observe(d.self, d.alerts.Emit, h)
}

// deviceWatchList is what cfg's node checks (see newDeviceChecker).
func deviceWatchList(cfg *config.Config) []health.Device {
	if self, ok := cfg.NodeByName(cfg.Node); ok && self.Witness() {
		return nil // a witness fences nobody and holds no device secrets
	}
	var devs []health.Device
	seen := map[string]bool{}
	for _, n := range cfg.Nodes {
		if n.Name == cfg.Node {
			continue
		}
		for _, lvl := range topology(cfg, n.Name) {
			for _, t := range lvl.Devices {
				if seen[t.Device] {
					continue
				}
				seen[t.Device] = true
				devs = append(devs, health.Device{Name: t.Device, Target: t, Interval: cfg.Devices[t.Device].DeviceMonitorInterval()})
			}
		}
	}
	return devs
}

// warmSuccessors is how many of the nodes that would take over from a
// holder keep a session open to its fence devices (besides the leader):
// BMCs have few session slots (IPMI requires only four), so not every
// node of a large cluster holds one.
const warmSuccessors = 2

// wantWarm says whether this node should hold a session to device now
// (package health, "Warm sessions"): a fence that matters for a takeover
// is of the holder, or of a former holder whose lease may still run, and
// runs on the leader — the current one when it is not that node, else the
// node that wins the election after it, which is one of the first in the
// detector's rank order (quorum.RankOrder: voters that may hold primacy
// first, in configuration order). Those keep the device's session warm:
// the leader and the first warmSuccessors of the rank order.
func (d *Daemon) wantWarm(device string) bool {
	if d.raft == nil {
		return false
	}
	v := d.raft.FSM().Holders()
	targets := make([]string, 0, 1+len(v.Formers))
	if v.Holder != "" {
		targets = append(targets, v.Holder)
	}
	for n := range v.Formers {
		targets = append(targets, n)
	}
	cfg := d.config() // the live configuration: a reload may change topologies
	leader := d.raft.Leader()
	for _, target := range targets {
		if target == d.self || !fencesWith(cfg, target, device) {
			continue
		}
		if leader == d.self {
			return true
		}
		order := rankOrder(cfg, v.Standby, target)
		if i := slices.Index(order, d.self); i >= 0 && i < warmSuccessors {
			return true
		}
	}
	return false
}

// warmLoop has the device checker reconsider its warm sessions (wantWarm)
// as soon as what they depend on changes: the leader, the holder, the
// former holders or the standby set. A session that stopped mattering is
// then logged out at once; the node that just took over otherwise held
// the session it fenced with for a whole poll, and a second failure in
// that time left it taking one of the old holder's BMC slots until the
// BMC expired it.
func (d *Daemon) warmLoop(done <-chan struct{}) {
	if d.raft == nil {
		return
	}
	last := ""
	for {
		changed, leader := d.raft.FSM().Changed(), d.raft.LeaderChanged()
		v := d.raft.FSM().Holders()
		key := d.raft.Leader() + "|" + v.Holder + "|" + strings.Join(slices.Sorted(maps.Keys(v.Formers)), ",") +
			"|" + strings.Join(slices.Sorted(maps.Keys(v.Standby)), ",")
		if key != last {
			if last != "" {
				d.fence.health.Rewarm()
			}
			last = key
		}
		select {
		case <-done:
			return
		case <-changed:
		case <-leader:
		}
	}
}

// mayNotHold says, under cfg and the standby set, which nodes may never
// hold primacy (witnesses and standby nodes): they rank last.
func mayNotHold(cfg *config.Config, standby map[string]bool) func(string) bool {
	return func(n string) bool {
		nd, _ := cfg.NodeByName(n)
		return nd.Witness() || standby[n]
	}
}

// rankOrder is the detector's rank order (quorum.RankOrder) of cfg's
// voters after leader.
func rankOrder(cfg *config.Config, standby map[string]bool, leader string) []string {
	voters := make([]string, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		voters[i] = n.Name
	}
	return quorum.RankOrder(voters, leader, mayNotHold(cfg, standby))
}

// fencesWith reports whether device is in target's fence topology under cfg.
func fencesWith(cfg *config.Config, target, device string) bool {
	for _, lvl := range topology(cfg, target) {
		if slices.ContainsFunc(lvl.Devices, func(t stonith.Target) bool { return t.Device == device }) {
			return true
		}
	}
	return false
}

// deviceHealth is the API's form of a device's health on this node.
func (d *Daemon) deviceHealth(name string) api.DeviceHealth {
	h, ok := d.fence.health.Get(name)
	if !ok {
		return api.DeviceHealth{State: api.HealthUnmonitored}
	}
	out := api.DeviceHealth{State: h.State, ErrorKind: h.Kind, Error: h.Error, Failures: h.Failures,
		IntervalSeconds: h.Interval.Seconds(), LastCheck: wallPtr(h.LastCheck), Since: wallPtr(h.Since),
		CheckingSince: wallPtr(h.Checking), Session: h.Session, Note: h.Note}
	if !h.LastCheck.IsZero() {
		out.LatencyMillis = float64(h.Latency.Microseconds()) / 1000
	}
	return out
}

// fencePaths says for every configured node whether this node's checks
// find a working fence path to it.
func (d *Daemon) fencePaths() []api.FencePath {
	cfg := d.config()
	out := make([]api.FencePath, 0, len(cfg.Nodes))
	for _, n := range cfg.Nodes {
		levels := make([][]string, len(n.Fence))
		first := map[string]int{}
		for i, l := range n.Fence {
			for _, ref := range l.Devices {
				levels[i] = append(levels[i], ref.Device)
				if _, ok := first[ref.Device]; !ok {
					first[ref.Device] = i + 1
				}
			}
		}
		fp := api.FencePath{Node: n.Name, State: health.Path(levels, d.fence.health.Get), Devices: []api.FencePathDevice{}}
		for _, dev := range health.Devices(levels) {
			h := d.deviceHealth(dev)
			fp.Devices = append(fp.Devices, api.FencePathDevice{Device: dev, Level: first[dev], State: h.State, ErrorKind: h.ErrorKind, Since: h.Since})
		}
		out = append(out, fp)
	}
	return out
}

// wallPtr is t in UTC to the millisecond, or nil when zero.
func wallPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Millisecond)
	return &u
}
