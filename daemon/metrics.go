package daemon

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/health"
	"github.com/fenced/fenced/daemon/resource"
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// metrics are fenced's Prometheus metrics. Gauges that mirror state are
// computed at scrape time from the daemon; counters are updated in place.
type metrics struct {
	reg      *prometheus.Registry
	fences   *prometheus.CounterVec
	attempts *prometheus.CounterVec
	duration *prometheus.HistogramVec
	blocked  prometheus.Counter
	checks   *prometheus.CounterVec
	inflight prometheus.Gauge
	alerts   *prometheus.CounterVec
	dropped  prometheus.Counter
	renewals *prometheus.CounterVec
	renewal  prometheus.Histogram
	paths    *prometheus.CounterVec
}

// scrape is what the gauges computed at scrape time read.
type scrape struct {
	status    func() api.Status
	devices   func() []health.Health   // this node's device checks
	history   func() []fencing.Record  // the replicated fence history
	resources func() []resource.Status // the resource group's
}

func newMetrics(src scrape) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_fence_operations_total", Help: "Fence operations run by this node, by target, action and outcome.",
		}, []string{"target", "action", "outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_fence_device_actions_total", Help: "Device actions within fence operations, by device and result.",
		}, []string{"device", "action", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fenced_fence_device_action_duration_seconds", Help: "Duration of device actions including the read-back.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 20, 60},
		}, []string{"device", "action"}),
		blocked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_takeover_blocked_total", Help: "Takeover attempts blocked because every fence path failed.",
		}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_device_checks_total", Help: "Device health checks made by this node, by device and result (ok, auth, unreachable, other).",
		}, []string{"device", "result"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_fence_operations_in_flight", Help: "Fence operations running on this node.",
		}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_alert_runs_total", Help: "Alert agent runs on this node, by alert and result (ok, failed, timeout, error).",
		}, []string{"alert", "result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_alerts_dropped_total", Help: "Alert events dropped because the alert queue was full.",
		}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_lease_renewals_total", Help: "Lease renewals of this node as primary, by result (ok; slow: took longer than a heartbeat; failed).",
		}, []string{"result"}),
		renewal: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fenced_lease_renewal_duration_seconds", Help: "How long this node's lease renewals as primary took to be confirmed by a majority (raft's barrier or a renewal round, whichever first).",
			Buckets: []float64{.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		paths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_lease_renewals_by_path_total", Help: "Lease renewals of this node as primary that succeeded, by the path that confirmed each first (barrier: raft's; round: a renewal round over the beacon channel).",
		}, []string{"path"}),
	}
	// Every result from the start, so that the first failure is an
	// increase a rule can see, not a series that appears.
	for _, r := range []string{renewalOK, renewalSlow, renewalFailed} {
		m.renewals.WithLabelValues(r)
	}
	for _, p := range []string{"barrier", "round"} {
		m.paths.WithLabelValues(p)
	}
	m.reg.MustRegister(m.fences, m.attempts, m.duration, m.blocked, m.checks, m.inflight, m.alerts, m.dropped, m.renewals, m.renewal, m.paths, buildInfo(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(&stateCollector{src: src}, &resourceCollector{status: src.resources})
	return m
}

func (m *metrics) fenceStarted() {
	if m != nil {
		m.inflight.Inc()
	}
}

func (m *metrics) fenceDone(r fencing.Record) {
	if m == nil {
		return
	}
	m.inflight.Dec()
	m.fences.WithLabelValues(r.Target, r.Action, r.Outcome).Inc()
	for _, a := range r.Attempts {
		m.attempts.WithLabelValues(a.Device, a.Action, a.Result).Inc()
		m.duration.WithLabelValues(a.Device, a.Action).Observe(a.Duration.Seconds())
	}
}

// deviceChecked counts a finished device check.
func (m *metrics) deviceChecked(h health.Health) {
	if m == nil {
		return
	}
	result := h.Kind
	if h.State == health.StateOK {
		result = "ok"
	}
	m.checks.WithLabelValues(h.Device, result).Inc()
}

// alertRan counts a finished alert run.
func (m *metrics) alertRan(alert, result string) {
	if m != nil {
		m.alerts.WithLabelValues(alert, result).Inc()
	}
}

// renewed counts a lease renewal by the path that confirmed it.
func (m *metrics) renewed(path string) {
	if m != nil {
		m.paths.WithLabelValues(path).Inc()
	}
}

func (m *metrics) alertDropped() {
	if m != nil {
		m.dropped.Inc()
	}
}

// buildInfo is fenced_build_info: 1, labelled with the build.
func buildInfo() prometheus.Collector {
	revision := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fenced_build_info", Help: "fenced's build: 1, labelled with its version, Go version and revision.",
		ConstLabels: prometheus.Labels{"version": api.Version, "goversion": runtime.Version(), "revision": revision}})
	g.Set(1)
	return g
}

// Results of fenced_lease_renewals_total.
const (
	renewalOK     = "ok"
	renewalSlow   = "slow"
	renewalFailed = "failed"
)

// leaseRenewed counts a finished lease renewal that took took; one slower
// than heartbeat eats into the lease (the early sign of a primary about to
// give it up).
func (m *metrics) leaseRenewed(took, heartbeat time.Duration, err error) {
	if m == nil {
		return
	}
	switch {
	case err != nil:
		m.renewals.WithLabelValues(renewalFailed).Inc()
		return
	case took > heartbeat:
		m.renewals.WithLabelValues(renewalSlow).Inc()
	default:
		m.renewals.WithLabelValues(renewalOK).Inc()
	}
	m.renewal.Observe(took.Seconds())
}

func (m *metrics) takeoverBlocked() {
	if m != nil {
		m.blocked.Inc()
	}
}

// stateCollector exports the daemon's state at scrape time.
type stateCollector struct{ src scrape }

var (
	descQuorum  = prometheus.NewDesc("fenced_quorum", "1 if a raft leader with a majority of the configured nodes is known.", nil, nil)
	descVotes   = prometheus.NewDesc("fenced_quorum_votes_seen", "Configured nodes seen alive through gossip, this node included.", nil, nil)
	descNeeded  = prometheus.NewDesc("fenced_quorum_votes_needed", "Votes a primary needs: a majority of the configured nodes.", nil, nil)
	descRole    = prometheus.NewDesc("fenced_role", "1 for this node's current role.", []string{"role"}, nil)
	descEpoch   = prometheus.NewDesc("fenced_epoch", "Highest epoch (fencing token) this node knows.", nil, nil)
	descMembers = prometheus.NewDesc("fenced_members", "Configured nodes by gossip state.", []string{"state"}, nil)
	descLease   = prometheus.NewDesc("fenced_lease_remaining_seconds", "Time left on this node's primary lease (0 when not primary).", nil, nil)
	descBlocked = prometheus.NewDesc("fenced_takeover_blocked", "1 while the current takeover is blocked on a fence.", nil, nil)
	descNodeUp  = prometheus.NewDesc("fenced_node_up", "1 if the configured node is seen alive through gossip, by kind (data or witness).", []string{"node", "kind"}, nil)
	descInfo    = prometheus.NewDesc("fenced_node_info", "1, labelled with this node's name and its cluster's (to name an instance in dashboards and alerts).", []string{"cluster", "node"}, nil)
	descHolder  = prometheus.NewDesc("fenced_holder", "1 for the node the replicated state names holder of the storage (the primary, or the node taking over), by its state (acquiring, fencing, blocked, mounting, mounted, releasing, released); absent before the first.", []string{"node", "state"}, nil)

	// Device health, for the devices this node checks (those that fence
	// another node); absent until a device's first check.
	descDevHealthy = prometheus.NewDesc("fenced_device_healthy", "1 if the device's last check from this node succeeded, 0 if it failed.", []string{"device"}, nil)
	descDevAge     = prometheus.NewDesc("fenced_device_last_check_age_seconds", "Time since the device's last finished check from this node started.", []string{"device"}, nil)
	descDevLatency = prometheus.NewDesc("fenced_device_last_check_duration_seconds", "How long the device's last check from this node took.", []string{"device"}, nil)
	descDevEvery   = prometheus.NewDesc("fenced_device_check_interval_seconds", "How often this node checks the device (devices.NAME.monitor_interval).", []string{"device"}, nil)
	descPath       = prometheus.NewDesc("fenced_fence_path_working", "1 if every device of some fence level of the node passed its last check from this node, 0 if every level has a failing device; absent while unknown.", []string{"node"}, nil)
	descDevMonitor = prometheus.NewDesc("fenced_device_monitor_devices", "Fence devices this node's device checker checks (those that fence another node).", nil, nil)

	descStorage     = prometheus.NewDesc("fenced_storage_state", "1 for the current state of the storage (the resource group) on this node.", []string{"state"}, nil)
	descRaftTerm    = prometheus.NewDesc("fenced_raft_term", "This node's current raft term.", nil, nil)
	descRaftLeader  = prometheus.NewDesc("fenced_raft_leader", "1 for the raft leader this node knows (absent when it knows none).", []string{"leader"}, nil)
	descRaftState   = prometheus.NewDesc("fenced_raft_state", "1 for this node's raft state.", []string{"state"}, nil)
	descLastFence   = prometheus.NewDesc("fenced_last_fence_timestamp_seconds", "When the last fence of each node (from the replicated history) finished, or started while it runs, by outcome (Unix time).", []string{"target", "outcome"}, nil)
	descConfigMatch = prometheus.NewDesc("fenced_config_match", "1 if this node's cluster-wide configuration is the one the cluster committed, 0 if it differs (not eligible for primacy); absent until one is committed.", nil, nil)
)

var storageStates = []string{tenure.StorageStopped, tenure.StorageStarting, tenure.StorageRunning, tenure.StorageStopping, tenure.StorageFailed}

var raftStates = []string{"leader", "follower", "candidate", "shutdown"}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQuorum, descVotes, descNeeded, descRole, descEpoch, descMembers, descLease, descBlocked,
		descNodeUp, descInfo, descHolder, descDevHealthy, descDevAge, descDevLatency, descDevEvery, descPath, descDevMonitor, descStorage, descRaftTerm, descRaftLeader,
		descRaftState, descLastFence, descConfigMatch} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.status()
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, s.Cluster, s.Node)
	if s.Primary.Node != "" {
		ch <- prometheus.MustNewConstMetric(descHolder, prometheus.GaugeValue, 1, s.Primary.Node, s.Primary.State)
	}
	ch <- prometheus.MustNewConstMetric(descQuorum, prometheus.GaugeValue, b2f(s.Quorum.Have))
	ch <- prometheus.MustNewConstMetric(descVotes, prometheus.GaugeValue, float64(s.Quorum.Seen))
	ch <- prometheus.MustNewConstMetric(descNeeded, prometheus.GaugeValue, float64(s.Quorum.Needed))
	for _, r := range tenure.Roles {
		ch <- prometheus.MustNewConstMetric(descRole, prometheus.GaugeValue, b2f(s.Self.Role == r), r)
	}
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(s.Self.KnownEpoch))
	states := map[string]int{"alive": 0, "suspect": 0, "dead": 0, "left": 0, "unknown": 0}
	for _, n := range s.Nodes {
		states[n.Gossip]++
		ch <- prometheus.MustNewConstMetric(descNodeUp, prometheus.GaugeValue, b2f(n.Gossip == "alive" || n.Gossip == "suspect"), n.Name, n.Kind)
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(n), st)
	}
	ch <- prometheus.MustNewConstMetric(descLease, prometheus.GaugeValue, s.Self.LeaseLeftSec)
	ch <- prometheus.MustNewConstMetric(descBlocked, prometheus.GaugeValue, b2f(s.Primary.State == quorum.HolderBlocked))
	devices := c.src.devices()
	for _, h := range devices {
		if h.State == health.StatePending {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descDevHealthy, prometheus.GaugeValue, b2f(h.State == health.StateOK), h.Device)
		ch <- prometheus.MustNewConstMetric(descDevAge, prometheus.GaugeValue, time.Since(h.LastCheck).Seconds(), h.Device)
		ch <- prometheus.MustNewConstMetric(descDevLatency, prometheus.GaugeValue, h.Latency.Seconds(), h.Device)
		if h.Interval > 0 {
			ch <- prometheus.MustNewConstMetric(descDevEvery, prometheus.GaugeValue, h.Interval.Seconds(), h.Device)
		}
	}
	for _, p := range s.FencePaths {
		if p.State == api.PathWorking || p.State == api.PathFailing {
			ch <- prometheus.MustNewConstMetric(descPath, prometheus.GaugeValue, b2f(p.State == api.PathWorking), p.Node)
		}
	}
	ch <- prometheus.MustNewConstMetric(descDevMonitor, prometheus.GaugeValue, float64(len(devices)))
	for _, st := range storageStates {
		ch <- prometheus.MustNewConstMetric(descStorage, prometheus.GaugeValue, b2f(s.Self.Storage == st), st)
	}
	ch <- prometheus.MustNewConstMetric(descRaftTerm, prometheus.GaugeValue, float64(s.Self.Term))
	if s.Quorum.Leader != "" {
		ch <- prometheus.MustNewConstMetric(descRaftLeader, prometheus.GaugeValue, 1, s.Quorum.Leader)
	}
	for _, st := range raftStates {
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, b2f(s.Self.Raft == st), st)
	}
	for target, r := range lastFences(c.src.history()) {
		at := r.Finished
		if at.IsZero() {
			at = r.Started
		}
		ch <- prometheus.MustNewConstMetric(descLastFence, prometheus.GaugeValue, float64(at.UnixNano())/1e9, target, r.Outcome)
	}
	if cs := s.Config; cs != nil && cs.Committed != "" {
		ch <- prometheus.MustNewConstMetric(descConfigMatch, prometheus.GaugeValue, b2f(cs.Match))
	}
}

// lastFences is the newest fence record of each target in history.
func lastFences(history []fencing.Record) map[string]fencing.Record {
	out := map[string]fencing.Record{}
	for _, r := range history {
		if r.Kind == fencing.KindFence {
			out[r.Target] = r
		}
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newMetricsServer returns the server of /metrics and the status page.
func (d *Daemon) newMetricsServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
	d.statusPageRoutes(mux) // the status page (statuspage.go)
	return &http.Server{Handler: mux, ReadHeaderTimeout: apiHeaderTimeout, ReadTimeout: apiBodyTimeout,
		WriteTimeout: apiWriteTimeout, IdleTimeout: apiIdleTimeout}
}
