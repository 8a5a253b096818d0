package daemon

import (
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/health"
)

// newDeviceMonitor plans this node's device checks (package health): every
// device in the topology of a node other than this one, checked with its
// first such mapping (parameters and plug of the first node it fences, in
// configuration order), every devices.NAME.monitor_interval.
func newDeviceMonitor(d *Daemon) *health.Monitor {
	return health.New(health.Options{
		Self: d.self, Devices: d.deviceWatchList(d.cfg), Check: d.engine.Monitor, Logger: d.log.With("component", "health"),
		DefaultTimeout: d.cfg.Timing.FenceTimeout.D(), Observe: func(h health.Health) {
			d.metrics.deviceChecked(h)
			d.devAlerts.observe(d, h)
		},
	})
}

// deviceWatchList is what this node checks under cfg (see newDeviceMonitor).
func (d *Daemon) deviceWatchList(cfg *config.Config) []health.Device {
	if self, ok := cfg.NodeByName(d.self); ok && self.Witness() {
		return nil // a witness fences nobody and holds no device secrets
	}
	var devs []health.Device
	seen := map[string]bool{}
	for _, n := range cfg.Nodes {
		if n.Name == d.self {
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

// deviceHealth is the API's form of a device's health on this node.
func (d *Daemon) deviceHealth(name string) api.DeviceHealth {
	h, ok := d.health.Get(name)
	if !ok {
		return api.DeviceHealth{State: api.HealthUnmonitored}
	}
	out := api.DeviceHealth{State: h.State, ErrorKind: h.Kind, Error: h.Error, Failures: h.Failures,
		IntervalSeconds: h.Interval.Seconds(), LastCheck: wallPtr(h.LastCheck), Since: wallPtr(h.Since),
		CheckingSince: wallPtr(h.Checking)}
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
		fp := api.FencePath{Node: n.Name, State: health.Path(levels, d.health.Get), Devices: []api.FencePathDevice{}}
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
