package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

const alertFileSample = "/usr/share/pacemaker/alerts/alert_file.sh.sample"

// TestAlertEvents (issue 15): every node runs Pacemaker's alert_file
// sample, unmodified, and an agent that hangs on fence events. Each kind of
// event arrives as a line in the file of the node where it happened: the
// primary, a device's health changing and back, a configuration mismatch
// and back, a fence that fails and a takeover blocked on it, the fence that
// succeeds and unblocks it, and quorum lost and regained. The hanging agent
// is killed at its timeout with its process group, and a takeover while it
// hangs is not delayed by it.
func TestAlertEvents(t *testing.T) {
	if _, err := os.Stat(alertFileSample); err != nil {
		t.Fatalf("Pacemaker's sample alert agents are missing (Debian's pacemaker-common): %v", err)
	}
	dir := t.TempDir()
	hang := filepath.Join(dir, "hang.sh")
	// Records its child's pid, then waits for it for ever.
	// The agent finds its directory through a param (params are its
	// environment).
	writeFile(t, hang, "#!/bin/sh\nsleep 1000 &\necho $! >\"$HANG_DIR/hang-$CRM_alert_node_sequence.pid\"\nwait")
	os.Chmod(hang, 0o755)
	const hangTimeout = 8 * time.Second
	metrics := metricAddrs(t, 3)
	alertsOf := func(node string) string { return filepath.Join(dir, node+".alerts") }
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true,
		Configure: func(cfg *config.Config) {
			for name, d := range cfg.Devices {
				d.MonitorInterval = config.Duration(monitorEvery)
				d.Timeout = config.Duration(2 * time.Second)
				cfg.Devices[name] = d
			}
		},
		NodeConfig: func(i int, cfg *config.Config) {
			nd := filepath.Join(dir, cfg.Node)
			os.MkdirAll(nd, 0o755)
			cfg.Metrics.Listen = metrics[i]
			cfg.Alerts = []config.Alert{
				{Name: "file", Path: alertFileSample, Recipients: []config.AlertRecipient{{Value: alertsOf(cfg.Node)}}},
				{Name: "hang", Path: hang, Timeout: config.Duration(hangTimeout), Events: []string{"fence"},
					Params: map[string]string{"HANG_DIR": nd}},
			}
		}})
	expect := func(n *devcluster.Node, re string) {
		t.Helper()
		rx := regexp.MustCompile(re)
		waitUntil(t, n.Name+" alert "+re, 20*time.Second, func() bool {
			b, _ := os.ReadFile(alertsOf(n.Name))
			return rx.Match(b)
		})
	}
	p, _, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	expect(p, `Node '`+p.Name+`' is now 'primary'`)
	// Each run of an agent is counted.
	waitUntil(t, p.Name+" counts the alert runs", 10*time.Second, func() bool {
		n, _ := strconv.Atoi(scrape(t, metrics[p.Index], `fenced_alert_runs_total{alert="file",result="ok"}`))
		return n > 0
	})
	a := c.Other(p)
	q := c.Other(p, a)

	// A device's health changes, and back.
	if err := c.BMCs[a.Index].SetPassword("changed"); err != nil {
		t.Fatal(err)
	}
	expect(p, `Attribute 'fence-device-`+a.Name+`-bmc' on node '`+p.Name+`' was updated to 'failing \(auth\): `)
	c.BMCs[a.Index].SetPassword(devcluster.BMCPassword)
	expect(p, `Attribute 'fence-device-`+a.Name+`-bmc' on node '`+p.Name+`' was updated to 'ok'`)

	// A configuration mismatch, and back.
	good, _ := os.ReadFile(a.Config)
	editConfig(t, a, func(cfg *config.Config) {
		d := cfg.Devices[q.Name+"-bmc"]
		d.Retries = 3
		cfg.Devices[q.Name+"-bmc"] = d
	})
	if _, err := reload(t, a); err != nil {
		t.Fatal(err)
	}
	expect(a, `Attribute 'config' on node '`+a.Name+`' was updated to 'mismatch: this node's configuration \(fingerprint [0-9a-f]+\) differs from the cluster's .* in devices\.`+q.Name+`-bmc\.retries'`)
	os.WriteFile(a.Config, good, 0o600)
	if _, err := reload(t, a); err != nil {
		t.Fatal(err)
	}
	expect(a, `Attribute 'config' on node '`+a.Name+`' was updated to 'match: fingerprint `)

	// The primary dies with a BMC that acknowledges power-off and stays on:
	// the fence fails at its read-back and the takeover blocks; the BMC
	// mended, the retry fences it and the takeover goes on. (A changed
	// password would not do: the survivors fence through sessions they
	// hold, which a BMC keeps after a password change.)
	c.BMCs[p.Index].SetIgnorePowerOff(true)
	p.Kill()
	var next *devcluster.Node
	waitUntil(t, "a takeover blocked", 20*time.Second, func() bool {
		for _, n := range []*devcluster.Node{a, q} {
			if b, _ := os.ReadFile(alertsOf(n.Name)); strings.Contains(string(b), "BLOCKED") {
				next = n
				return true
			}
		}
		return false
	})
	expect(next, `Fencing Operation off of `+p.Name+` by `+next.Name+` for `+next.Name+` \(takeover\): started`)
	expect(next, `Fencing Operation off of `+p.Name+` by `+next.Name+` for `+next.Name+` \(takeover\): failed: `)
	expect(next, `Fencing takeover by `+next.Name+` at epoch \d+ BLOCKED: `)
	c.BMCs[p.Index].SetIgnorePowerOff(false)
	expect(next, `Fencing Operation off of `+p.Name+` by `+next.Name+` for `+next.Name+` \(takeover\): OK`)
	expect(next, `Fencing takeover by `+next.Name+` at epoch \d+ unblocked: `+p.Name+` was fenced by `+next.Name)
	expect(next, `Node '`+next.Name+`' is now 'primary'`)

	// Power the old primary on again (unfence), then kill the new one: the
	// takeover runs while the fence alerts' agent hangs, and is not held up.
	cl := next.Client()
	if err := cl.Do(ctxT(t, 30*time.Second), "POST", "/v1/unfence", nil, daemon.AdminRequest{Node: p.Name}, nil); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	waitUntil(t, p.Name+" back", 20*time.Second, func() bool {
		st, err := p.Status(context.Background())
		return err == nil && st.Quorum.Have
	})
	third := c.Other(next, p)
	killed := time.Now()
	next.Kill()
	n2, _, err := c.Primary(ctxT(t, 30*time.Second), next)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	t.Logf("takeover by %s %v after the kill, with the fence alerts' agent hanging (timeout %v)", n2.Name, took.Round(time.Millisecond), hangTimeout)
	if took >= hangTimeout {
		t.Errorf("the takeover took %v, as long as the hanging alert agent's timeout", took)
	}
	pids, _ := filepath.Glob(filepath.Join(dir, n2.Name, "hang-*.pid"))
	if len(pids) == 0 {
		t.Fatalf("the hanging agent never ran on %s", n2.Name)
	}
	var hanging []int
	for _, f := range pids {
		b, _ := os.ReadFile(f)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			hanging = append(hanging, pid)
		}
	}
	waitUntil(t, "the hanging agents killed with their children", hangTimeout+10*time.Second, func() bool {
		for _, pid := range hanging {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return true
	})
	if b, _ := os.ReadFile(n2.Log); !strings.Contains(string(b), `msg="alert agent killed at its timeout"`) {
		t.Error("the killed agent's run was not logged")
	}

	// The survivors lose quorum when one more goes, and regain it.
	lone := n2
	other := third
	if other == n2 {
		other = p
	}
	other.Kill()
	expect(lone, fmt.Sprintf(`Attribute 'quorum' on node '%s' was updated to 'lost: \d of 3 votes reachable, 2 needed`, lone.Name))
	for _, n := range c.Nodes {
		// A failover is no loss of quorum.
		if b, _ := os.ReadFile(alertsOf(n.Name)); n != lone && strings.Contains(string(b), "'quorum'") {
			t.Errorf("%s alerted quorum during a failover:\n%s", n.Name, b)
		}
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	expect(lone, `Attribute 'quorum' on node '`+lone.Name+`' was updated to 'regained: `)
	for _, n := range c.Nodes {
		if b, _ := os.ReadFile(alertsOf(n.Name)); strings.Contains(string(b), devcluster.BMCPassword) {
			t.Errorf("%s's alerts hold the BMC password", n.Name)
		}
	}
}
