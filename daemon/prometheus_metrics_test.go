package daemon

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/health"
	"github.com/fenced/fenced/daemon/resource"
	"github.com/fenced/fenced/stonith/fencing"
)

// gathered is every series of m as "name{k="v",...} value", sorted labels,
// and the metric families for the linter.
func gathered(t *testing.T, m *metrics) (map[string]float64, []*dto.MetricFamily) {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			var ls []string
			for _, l := range s.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch {
			case s.Gauge != nil:
				out[key] = s.GetGauge().GetValue()
			case s.Counter != nil:
				out[key] = s.GetCounter().GetValue()
			case s.Histogram != nil:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return out, mfs
}

// TestMetricsForMonitoring: the metrics the alerting rules and the
// dashboard read (issue 24): this node's names, the holder, each device's
// check interval, and the lease renewals counted by result (every result
// present from the start, so a rule sees the first failure as an
// increase) with the duration of those that committed. All of fenced's
// metrics pass Prometheus's own linter.
func TestMetricsForMonitoring(t *testing.T) {
	st := api.Status{Cluster: "prod", Node: "node1", Primary: api.PrimaryInfo{Node: "node2", State: "mounted"}}
	m := newMetrics(scrape{
		status: func() api.Status { return st },
		devices: func() []health.Health {
			return []health.Health{
				{Device: "node2-bmc", State: health.StateOK, LastCheck: time.Now(), Interval: 30 * time.Second},
				{Device: "pdu", State: health.StatePending, Interval: time.Minute},
			}
		},
		history:   func() []fencing.Record { return nil },
		resources: func() []resource.Status { return nil },
	})
	expect := func(when string, want map[string]float64) {
		t.Helper()
		got, _ := gathered(t, m)
		for k, v := range want {
			if g, ok := got[k]; v < 0 && ok || v >= 0 && (!ok || g != v) {
				t.Errorf("%s: %s = %v (present: %v), want %v (-1: absent)", when, k, g, ok, v)
			}
		}
	}
	expect("at start", map[string]float64{
		`fenced_lease_renewals_total{result="ok"}`:      0,
		`fenced_lease_renewals_total{result="slow"}`:    0,
		`fenced_lease_renewals_total{result="failed"}`:  0,
		`fenced_lease_renewal_duration_seconds{}`:       0,
		`fenced_node_info{cluster="prod",node="node1"}`: 1,
		`fenced_holder{node="node2",state="mounted"}`:   1,
		// A device not yet checked has no series.
		`fenced_device_check_interval_seconds{device="node2-bmc"}`: 30,
		`fenced_device_check_interval_seconds{device="pdu"}`:       -1,
	})
	hb := time.Second
	m.leaseRenewed(5*time.Millisecond, hb, nil)
	m.leaseRenewed(1500*time.Millisecond, hb, nil)
	m.leaseRenewed(3*time.Second, hb, errors.New("timed out enqueuing operation"))
	st.Primary = api.PrimaryInfo{}
	expect("after three renewals, without a holder", map[string]float64{
		`fenced_lease_renewals_total{result="ok"}`:     1,
		`fenced_lease_renewals_total{result="slow"}`:   1,
		`fenced_lease_renewals_total{result="failed"}`: 1,
		// Only the renewals that committed have a duration.
		`fenced_lease_renewal_duration_seconds{}`:     2,
		`fenced_holder{node="node2",state="mounted"}`: -1,
	})
	_, mfs := gathered(t, m)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "fenced_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}
