package daemon_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/agents/pdu/pdutest"
	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

func newBMCCluster(t *testing.T, n int) *devcluster.Cluster {
	return startCluster(t, devcluster.Options{Nodes: n, BMC: true})
}

func history(t *testing.T, n *devcluster.Node, node string) []fencing.Record {
	t.Helper()
	var h daemon.History
	cl := n.Client()
	defer cl.Close()
	q := url.Values{}
	if node != "" {
		q.Set("node", node)
	}
	if err := cl.Do(context.Background(), "GET", "/v1/history", q, nil, &h); err != nil {
		t.Fatal(err)
	}
	return h.Records
}

// TestKillFenceTakeover: SIGKILL the primary → the new primary fences it
// through its BMC (power-off observed and read back) → acts with a higher
// epoch. Then `unfence` powers it on; it rejoins as a secondary.
func TestKillFenceTakeover(t *testing.T) {
	c := newBMCCluster(t, 3)
	watchSafety(t, c)
	p, e1, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGKILL)
	q, e2, err := c.Primary(ctxT(t, 20*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Fatalf("epoch %d not above %d", e2, e1)
	}
	if c.BMCs[p.Index].PoweredOn() {
		t.Fatalf("%s's BMC still powered on after the takeover", p.Name)
	}
	recs := history(t, q, p.Name)
	var fenced *fencing.Record
	for i := range recs {
		if recs[i].Kind == fencing.KindFence && recs[i].Outcome == fencing.OutcomeSuccess {
			fenced = &recs[i]
		}
	}
	if fenced == nil {
		t.Fatalf("no successful fence of %s in history: %+v", p.Name, recs)
	}
	if fenced.Executor != q.Name || fenced.Epoch != e2 || len(fenced.Attempts) == 0 || fenced.Attempts[len(fenced.Attempts)-1].ReadBack != "off" {
		t.Fatalf("fence record %+v", fenced)
	}
	// Unfence through the API of a node that is not the primary: the
	// request is forwarded to the primary-elect.
	other := c.Other(p, q)
	cl := other.Client()
	defer cl.Close()
	var rec fencing.Record
	if err := cl.Do(ctxT(t, 30*time.Second), "POST", "/v1/unfence", nil, daemon.AdminRequest{Node: p.Name}, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != fencing.OutcomeSuccess || rec.Executor != q.Name || !c.BMCs[p.Index].PoweredOn() {
		t.Fatalf("unfence: %+v (power %v)", rec, c.BMCs[p.Index].PoweredOn())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := p.Status(context.Background())
		if err == nil {
			if st.Self.Acting || st.Self.Epoch != 0 {
				t.Fatalf("unfenced %s acts as primary", p.Name)
			}
			if st.Self.KnownEpoch >= e2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("unfenced %s did not rejoin: %v", p.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestManualFenceAndConfirm drives fencectl-level admin calls through the
// API: a fence without devices reachable fails; confirm refuses a live node.
func TestManualFenceAndConfirm(t *testing.T) {
	c := newBMCCluster(t, 3)
	p, _, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var victim *devcluster.Node
	for _, n := range c.Nodes {
		if n != p {
			victim = n
			break
		}
	}
	cl := p.Client()
	defer cl.Close()
	err = cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/confirm", nil, daemon.AdminRequest{Node: victim.Name}, nil)
	if err == nil || !strings.Contains(err.Error(), "alive") {
		t.Fatalf("confirm of a live node: %v", err)
	}
	var rec fencing.Record
	if err := cl.Do(ctxT(t, 30*time.Second), "POST", "/v1/fence", nil, daemon.AdminRequest{Node: victim.Name, Action: "reboot"}, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != fencing.OutcomeSuccess || rec.Action != "reboot" {
		t.Fatalf("reboot: %+v", rec)
	}
	if !victim.Wait(0) && c.BMCs[victim.Index].PoweredOn() {
		// Reboot = off (confirmed) then on: the process was replaced.
		t.Logf("%s rebooted", victim.Name)
	}
	if q, _, err := c.Primary(ctxT(t, 10*time.Second)); err != nil || q != p {
		t.Fatalf("primary changed after fencing a secondary: %v %v", q, err)
	}
}

// TestTakeoverThroughPDULevel (issue 6, acceptance 5): the old primary's
// level 1 is its IPMI BMC, which is dead; level 2 is two PDU outlets
// (dual PSU, two snmpsim PDUs). The takeover completes through level 2,
// with both outlets read back off, and the storage moves.
func TestTakeoverThroughPDULevel(t *testing.T) {
	pduA := pdutest.Start(t, pdutest.Options{DataDir: "../agents/pdu/testdata/apc"})
	pduB := pdutest.Start(t, pdutest.Options{DataDir: "../agents/pdu/testdata/apc"})
	c := newStorageCluster(t, func(cfg *config.Config) {
		for name, d := range cfg.Devices {
			d.Params["power_timeout"] = "1"
			d.Timeout = config.Duration(1500 * time.Millisecond)
			cfg.Devices[name] = d
		}
		for i, pdu := range []*pdutest.Sim{pduA, pduB} {
			cfg.Devices[fmt.Sprintf("pdu-%c", 'a'+i)] = config.Device{Agent: "pdu", Params: map[string]string{
				"ip": pdu.Host, "ipport": strconv.Itoa(pdu.Port), "snmp_version": "2c", "community": "private", "power_timeout": "5"}}
		}
		for i := range cfg.Nodes {
			plug := strconv.Itoa(i + 1)
			cfg.Nodes[i].Fence = append(cfg.Nodes[i].Fence, config.Level{Devices: []config.DeviceRef{
				{Device: "pdu-a", Plug: plug}, {Device: "pdu-b", Plug: plug}}})
		}
	})
	p, e1, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.BMCs[p.Index].SetSilent(true)
	p.Kill() // the node loses power together with its BMC
	q, e2, err := c.Primary(ctxT(t, 30*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	waitWrites(t, c, q.Name, e2, 10*time.Second)
	if e2 <= e1 {
		t.Fatalf("epoch %d not above %d", e2, e1)
	}
	var rec *fencing.Record
	for _, r := range history(t, q, p.Name) {
		if r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomeSuccess {
			rec = &r
		}
	}
	if rec == nil {
		t.Fatal("no successful fence recorded")
	}
	level2 := map[string]string{}
	for _, a := range rec.Attempts {
		if a.Level == 1 && a.Result == fencing.ResultSuccess {
			t.Errorf("dead BMC reported success: %+v", a)
		}
		if a.Level == 2 && a.Result == fencing.ResultSuccess {
			level2[a.Device] = a.ReadBack
		}
	}
	if level2["pdu-a"] != "off" || level2["pdu-b"] != "off" {
		t.Fatalf("level 2 did not confirm both outlets off: %v (attempts %+v)", level2, rec.Attempts)
	}
}
