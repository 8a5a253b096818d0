package daemon_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
)

// BenchmarkFloatingIPFailover measures, over b.N SIGKILL failovers of the
// primary (3 nodes in network namespaces, default timings, IPMI fencing
// through simulated BMCs, the group Filesystem → IPaddr2 → Dummy):
//
//	gap     the longest silence of a client pinging the floating IP every
//	        20ms (the killed node's machine answers until its fence powers
//	        it off)
//	answer  SIGKILL → the client's pings answered again, by the new primary
//	acting  SIGKILL → the new primary acting (fence confirmed, group started)
//
// and the cost of the OCF agents themselves (shell scripts): each start on
// the new primary, and each monitor (every resource monitored every second).
//
//	go test ./daemon -run '^$' -bench FloatingIPFailover -benchtime 20x
func BenchmarkFloatingIPFailover(b *testing.B) {
	o := newOCFNet(b, config.Timing{}, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	p, e, err := o.waitPrimary(ctx)
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	s := o.sample()
	pg := o.ping(b)
	var gaps, answers, actings []time.Duration
	starts := map[string][]time.Duration{}
	monitors := map[string][]time.Duration{}
	seen := map[string]bool{}
	collectMonitors := func(ctx context.Context) {
		l, err := resourcesOf(ctx, p)
		if err != nil {
			return
		}
		for _, r := range l.Resources {
			if r.LastMonitor == nil || r.LastResult != "ok" {
				continue
			}
			key := r.Name + r.LastMonitor.String()
			if !seen[key] {
				seen[key] = true
				monitors[r.Name] = append(monitors[r.Name], time.Duration(r.LastMonitorMillis*float64(time.Millisecond)))
			}
		}
	}
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		// Let the group be monitored a few times, as a client is served.
		for range 12 {
			collectMonitors(ctx)
			time.Sleep(250 * time.Millisecond)
		}
		kill := time.Now()
		f, err := o.killPrimary(ctx, pg, p, e)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if !f.neighOK {
			b.Errorf("failover to %s: the client's neighbour entry did not move", f.new.Name)
		}
		gaps, answers, actings = append(gaps, f.gap), append(answers, f.killToOK), append(actings, f.acting)
		for name, took := range startTimes(f.new.Log, kill) {
			starts[name] = append(starts[name], took)
		}
		p, e = f.new, f.epoch
	}
	_, violations := s.Stop()
	for _, v := range violations {
		b.Errorf("SAFETY: %s", v)
	}
	var summary []string
	report := func(name string, v []time.Duration) {
		if len(v) == 0 {
			return
		}
		slices.Sort(v)
		p50, p99 := v[len(v)/2], v[(len(v)*99+99)/100-1]
		b.ReportMetric(float64(p50.Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, name+"-p99-ms")
		summary = append(summary, fmt.Sprintf("%s p50 %s p99 %s (n=%d)", name, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), len(v)))
	}
	report("gap", gaps)
	report("answer", answers)
	report("acting", actings)
	for _, r := range []string{"data", "vip", "app"} {
		report("start-"+r, starts[r])
	}
	for _, r := range []string{"data", "vip", "app"} {
		report("monitor-"+r, monitors[r])
	}
	b.Logf("%d SIGKILL failovers, default timings, Filesystem → IPaddr2 → Dummy:\n  %s", len(gaps), strings.Join(summary, "\n  "))
}

var reStartTook = regexp.MustCompile(`msg="resource started" .*resource=(\S+) .*took=(\S+)`)

// startTimes reads each resource's start duration from a node's log
// lines after since.
func startTimes(log string, since time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, at := range logLines(log, since, `msg="resource started"`) {
		if m := reStartTook.FindStringSubmatch(at); m != nil {
			if d, err := time.ParseDuration(m[2]); err == nil {
				out[m[1]] = d
			}
		}
	}
	return out
}

// logLines returns the lines of a node's log after since that contain
// needle.
func logLines(path string, since time.Time, needle string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, needle) {
			continue
		}
		m := reLogTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && t.After(since) {
			out = append(out, line)
		}
	}
	return out
}
