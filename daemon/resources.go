package daemon

import (
	"context"
	"net/http"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/resource"
)

// statusReporter is what the resource group adds to the Resource contract
// for the API and metrics (discovered by type assertion, so a Resource a
// test injects needs none of it).
type statusReporter interface {
	Status() []resource.Status
}

// ResourceList is GET /v1/resources: this node's resource group, in start
// order. Only the primary runs the group; on other nodes every resource
// reads "stopped" (or what the probe at start found).
type ResourceList struct {
	SchemaVersion int              `json:"schemaVersion"`
	Node          string           `json:"node"`
	Role          string           `json:"role"`
	Epoch         uint64           `json:"epoch"`
	Resources     []ResourceStatus `json:"resources"`
}

// ResourceStatus is one resource of the group.
type ResourceStatus struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"` // "ocf:heartbeat:IPaddr2", "mount", "hooks", "storage"
	State string `json:"state"`
	// MonitorIntervalSec is how often the primary monitors it.
	MonitorIntervalSec float64 `json:"monitorIntervalSeconds"`
	// LastMonitor is when the last monitor (or probe) began; LastResult is
	// "ok", "probe: not running" or the error; LastMonitorMillis its
	// duration.
	LastMonitor       *time.Time `json:"lastMonitor,omitempty"`
	LastResult        string     `json:"lastResult,omitempty"`
	LastMonitorMillis float64    `json:"lastMonitorMillis,omitempty"`
	// Failures counts failed starts, monitors and stops since the daemon
	// started; LastError is the latest.
	Failures  int    `json:"failures"`
	LastError string `json:"lastError,omitempty"`
}

// ResourcesNow builds the resource list.
func (d *Daemon) ResourcesNow() ResourceList {
	l := ResourceList{SchemaVersion: SchemaVersion, Node: d.self, Role: d.Role(), Epoch: d.epoch.Load(), Resources: []ResourceStatus{}}
	sr, ok := d.opts.Resource.(statusReporter)
	if !ok {
		return l
	}
	for _, s := range sr.Status() {
		rs := ResourceStatus{Name: s.Name, Kind: s.Kind, State: s.State, MonitorIntervalSec: s.MonitorInterval.Seconds(),
			LastResult: s.LastResult, LastMonitorMillis: float64(s.LastTook.Microseconds()) / 1000,
			Failures: s.Failures, LastError: s.LastError}
		if !s.LastMonitor.IsZero() {
			t := s.LastMonitor.UTC().Truncate(time.Millisecond)
			rs.LastMonitor = &t
		}
		l.Resources = append(l.Resources, rs)
	}
	return l
}

func (d *Daemon) resourceRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/resources", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.ResourcesNow())
	})
}

// newResourceGroup builds the configured resource group (resources, or the
// storage shorthand), or nil when none is configured.
func newResourceGroup(cfg *config.Config, d *Daemon) (Resource, error) {
	g, err := resource.New(context.Background(), cfg, cfg.Node, d.log)
	if err != nil || g == nil {
		return nil, err
	}
	// The group monitors in the background, each resource on its own
	// interval; the primary polls it at least every heartbeat.
	cfg.Storage.MonitorInterval = config.Duration(min(g.MonitorInterval(), cfg.Timing.Heartbeat.D()))
	return g, nil
}

// ValidateNode runs, for the selected node, what only that machine can
// check: each OCF agent's validate-all with its parameters (`fenced
// validate --node`). Problems carry FILE:LINE: PATH like Validate's.
func ValidateNode(ctx context.Context, cfg *config.Config) error {
	if ps := resource.ValidateAll(ctx, cfg, cfg.Node); len(ps) > 0 {
		return ps
	}
	return nil
}
