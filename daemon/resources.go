package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/resource"
)

// statusReporter is what the resource group adds to the Resource contract
// for the API and metrics (discovered by type assertion, so a Resource a
// test injects needs none of it).
type statusReporter interface {
	Status() []resource.Status
}

// resourceStatus is each resource's status, or nil when the group reports
// none.
func (d *Daemon) resourceStatus() []resource.Status {
	if sr, ok := d.opts.Resource.(statusReporter); ok {
		return sr.Status()
	}
	return nil
}

// ResourcesNow builds the resource list.
func (d *Daemon) ResourcesNow() api.ResourceList {
	l := api.ResourceList{SchemaVersion: api.SchemaVersion, Node: d.self, Role: d.Role(), Epoch: d.Epoch(), Resources: []api.ResourceStatus{}}
	for _, s := range d.resourceStatus() {
		rs := api.ResourceStatus{Name: s.Name, Kind: s.Kind, State: s.State, MonitorIntervalSec: s.MonitorInterval.Seconds(),
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

// prober is the resource group's check, at start, that none of its
// resources runs on this node (see resource.Group.Probe).
type prober interface {
	Probe(ctx context.Context) error
}

// newResourceGroup builds the configured resource group (resources, or the
// storage shorthand), or nil when none is configured.
func newResourceGroup(cfg *config.Config, log *slog.Logger) (Resource, error) {
	g, err := resource.New(context.Background(), cfg, cfg.Node, log)
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
	if n, ok := cfg.NodeByName(cfg.Node); ok && n.Witness() {
		return nil // a witness runs no resource
	}
	if ps := resource.ValidateAll(ctx, cfg, cfg.Node); len(ps) > 0 {
		return ps
	}
	return nil
}
