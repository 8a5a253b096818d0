package daemon_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// A takeover blocked on a fence that keeps failing is one incident (issue
// 24): the primary dies with a BMC that acknowledges power-off and stays
// on, and the survivor retries the fence for seconds. Every poll of status
// and of fenced_takeover_blocked in that time says blocked, one
// takeover-blocked alert is raised and no "unblocked", and the history
// holds one fence record with a count of runs and the last error, not one
// a retry. When the BMC mends, the retry that works ends the block with
// one alert naming what truly ended it.
func TestBlockedTakeoverIsOneIncident(t *testing.T) {
	if _, err := os.Stat(alertFileSample); err != nil {
		t.Fatalf("Pacemaker's sample alert agents are missing (Debian's pacemaker-common): %v", err)
	}
	dir := t.TempDir()
	metrics := metricAddrs(t, 3)
	alertsOf := func(node string) string { return filepath.Join(dir, node+".alerts") }
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true,
		Configure: func(cfg *config.Config) {
			for name, d := range cfg.Devices {
				d.Timeout = config.Duration(2 * time.Second)
				if d.Params == nil {
					d.Params = map[string]string{}
				}
				d.Params["power_timeout"] = "0.3"
				cfg.Devices[name] = d
			}
		},
		NodeConfig: func(i int, cfg *config.Config) {
			cfg.Metrics.Listen = metrics[i]
			cfg.Alerts = []config.Alert{{Name: "file", Path: alertFileSample, Recipients: []config.AlertRecipient{{Value: alertsOf(cfg.Node)}}}}
		}})
	p, _, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	count := func(n *devcluster.Node, re string) int {
		b, _ := os.ReadFile(alertsOf(n.Name))
		return len(regexp.MustCompile(re).FindAll(b, -1))
	}
	c.BMCs[p.Index].SetIgnorePowerOff(true)
	p.Kill()
	var next *devcluster.Node
	waitUntil(t, "a takeover blocked", 30*time.Second, func() bool {
		for _, n := range c.Nodes {
			if n != p && count(n, `BLOCKED`) > 0 {
				next = n
				return true
			}
		}
		return false
	})
	idx := next.Index
	// The alert comes as the block begins; the replicated state says so
	// once its record commits. From then on, every poll must say blocked.
	waitUntil(t, "status to say blocked", 10*time.Second, func() bool {
		st, err := next.Status(ctxT(t, 5*time.Second))
		return err == nil && st.Primary.Blocked
	})
	polls, blockedPolls, metricOnes, pendingPolls := 0, 0, 0, 0
	steps := map[string]bool{}
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		polls++
		st, err := next.Status(ctxT(t, 5*time.Second))
		if err == nil && st.Primary.Blocked {
			blockedPolls++
		}
		// The retried fence shows as running, with the step its device
		// is at on the node that runs it (issue 24).
		for _, f := range st.PendingFences {
			if f.Target != p.Name || f.Executor != next.Name {
				continue
			}
			pendingPolls++
			for _, s := range f.Steps {
				if s.Device == p.Name+"-bmc" && s.Try >= 1 {
					steps[s.Step] = true
				}
			}
		}
		if scrape(t, metrics[idx], "fenced_takeover_blocked") == "1" {
			metricOnes++
		}
	}
	if blockedPolls != polls || metricOnes != polls {
		t.Errorf("of %d polls while the fence kept failing, status said blocked in %d and fenced_takeover_blocked was 1 in %d", polls, blockedPolls, metricOnes)
	}
	if pendingPolls == 0 || len(steps) == 0 {
		t.Errorf("of %d polls while the fence was retried, %d showed it running, with steps %v", polls, pendingPolls, steps)
	}
	t.Logf("%d of %d polls showed the fence running; steps seen: %v", pendingPolls, polls, steps)
	if b, u := count(next, `BLOCKED`), count(next, `unblocked`); b != 1 || u != 0 {
		t.Errorf("while blocked: %d takeover-blocked and %d unblocked alerts, want 1 and 0", b, u)
	}
	var h daemon.History
	cl := next.Client()
	defer cl.Close()
	if err := cl.Do(ctxT(t, 10*time.Second), "GET", "/v1/history", nil, nil, &h); err != nil {
		t.Fatal(err)
	}
	var fences []fencing.Record
	for _, r := range h.Records {
		if r.Kind == fencing.KindFence && r.Target == p.Name {
			fences = append(fences, r)
		}
	}
	if len(fences) != 1 || fences[0].Runs < 3 || !strings.Contains(fences[0].Error, "still reads back on") {
		t.Fatalf("fence records of %s while blocked: %+v; want one, with its runs counted and the last error", p.Name, fences)
	}
	t.Logf("%d polls in 8 s all blocked; one record of %d runs", polls, fences[0].Runs)

	c.BMCs[p.Index].SetIgnorePowerOff(false)
	waitUntil(t, "the takeover unblocked", 30*time.Second, func() bool { return count(next, `unblocked`) > 0 })
	if n := count(next, `unblocked: `+p.Name+` was fenced by `+next.Name); n != 1 {
		b, _ := os.ReadFile(alertsOf(next.Name))
		t.Fatalf("unblocked alerts naming the fence: %d, want 1:\n%s", n, b)
	}
	if _, _, err := c.Primary(ctxT(t, 30*time.Second), p); err != nil {
		t.Fatal(err)
	}
	if b := count(next, `BLOCKED`); b != 1 {
		t.Errorf("%d takeover-blocked alerts in all, want 1", b)
	}
}
