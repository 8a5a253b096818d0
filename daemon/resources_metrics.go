package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenced/fenced/daemon/resource"
)

// resourceCollector exports each resource of the group at scrape time.
type resourceCollector struct{ status func() []resource.Status }

var (
	descResState    = prometheus.NewDesc("fenced_resource_state", "1 for the current state of each resource of the group on this node.", []string{"resource", "kind", "state"}, nil)
	descResFailures = prometheus.NewDesc("fenced_resource_failures_total", "Failed starts, monitors and stops of the resource since the daemon started.", []string{"resource"}, nil)
	descResMonitor  = prometheus.NewDesc("fenced_resource_last_monitor_timestamp_seconds", "When the resource's last monitor or probe began (Unix time; 0 = never).", []string{"resource"}, nil)
	descResTook     = prometheus.NewDesc("fenced_resource_last_monitor_duration_seconds", "How long the resource's last monitor or probe took.", []string{"resource"}, nil)
)

var resourceStates = []string{resource.StateStopped, resource.StateStarting, resource.StateRunning, resource.StateStopping, resource.StateFailed}

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descResState, descResFailures, descResMonitor, descResTook} {
		ch <- d
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.status() {
		for _, st := range resourceStates {
			ch <- prometheus.MustNewConstMetric(descResState, prometheus.GaugeValue, b2f(s.State == st), s.Name, s.Kind, st)
		}
		ch <- prometheus.MustNewConstMetric(descResFailures, prometheus.CounterValue, float64(s.Failures), s.Name)
		var at float64
		if !s.LastMonitor.IsZero() {
			at = float64(s.LastMonitor.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(descResMonitor, prometheus.GaugeValue, at, s.Name)
		ch <- prometheus.MustNewConstMetric(descResTook, prometheus.GaugeValue, s.LastTook.Seconds(), s.Name)
	}
}
