package daemon_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// Right after a kill (issue 24 §2), status must not look like a split
// brain: on every poll at most one node is shown as primary without being
// marked stale, and once the dead primary is fenced it is shown as off,
// fenced by whom, not as a node of epoch 0.
func TestStatusAfterKillIsTrue(t *testing.T) {
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true, Configure: func(cfg *config.Config) {
		// Checks only at start: a device's health after that comes from
		// the actions run on it (see below).
		for name, d := range cfg.Devices {
			d.MonitorInterval = config.Duration(time.Hour)
			cfg.Devices[name] = d
		}
	}})
	p, _, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Let the primary's gossip (role primary) reach everyone.
	time.Sleep(2 * time.Second)
	p.Kill()
	var next string
	fencedShown := false
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, n := range c.Nodes {
			if n == p {
				continue
			}
			st, err := n.Status(ctxT(t, 5*time.Second))
			if err != nil {
				continue
			}
			var primaries []string
			for _, ns := range st.Nodes {
				if (ns.Role == "primary" || ns.Role == "primary-elect") && !ns.Stale {
					primaries = append(primaries, ns.Name)
				}
				if ns.Name == p.Name && ns.Down == "fenced" && ns.FencedBy != "" && ns.FencedAt != nil {
					fencedShown, next = true, ns.FencedBy
				}
			}
			if len(primaries) > 1 {
				t.Fatalf("%s's status shows %v as primary at once", n.Name, primaries)
			}
		}
	}
	if !fencedShown {
		t.Fatalf("the dead primary %s was never shown as fenced", p.Name)
	}
	t.Logf("%s shown off, fenced by %s", p.Name, next)

	// Like crm_mon (issue 24): the third node shows where the group runs
	// (the new primary's gossip), the last change of primacy, and the
	// standby of each node.
	var q, third *devcluster.Node
	for _, n := range c.Nodes {
		switch {
		case n.Name == next:
			q = n
		case n != p:
			third = n
		}
	}
	var st api.Status
	waitUntil(t, third.Name+" to show the group running on "+q.Name, 10*time.Second, func() bool {
		var err error
		st, err = third.Status(ctxT(t, 5*time.Second))
		if err != nil || len(st.Resources) == 0 {
			return false
		}
		for _, r := range st.Resources {
			if len(r.On) != 1 || r.On[0].Node != q.Name || r.On[0].State != "running" {
				return false
			}
		}
		return true
	})
	// (The survivor that won the election may have handed primacy on to
	// the other before the fence: then the change is that handover.)
	want := "took over from " + p.Name + ", fenced by " + q.Name + " (off, read back)"
	if st.Primary.Previous != p.Name {
		want = "took over from " + st.Primary.Previous + ", which released the group"
	}
	if st.Primary.Node != q.Name || st.Primary.Change != want || st.Primary.Since == nil || st.Primary.LastKnown {
		var h api.History
		hc := third.Client()
		_ = hc.Do(ctxT(t, 5*time.Second), "GET", "/v1/history", nil, nil, &h)
		hc.Close()
		for _, r := range h.Records {
			t.Logf("history: %d %s %s %s by %s epoch %d %s", r.ID, r.Kind, r.Target, r.Action, r.Executor, r.Epoch, r.Outcome)
		}
		t.Errorf("%s's primary: %+v; want %s, changed: %q", third.Name, st.Primary, q.Name, want)
	}
	cl := q.Client()
	defer cl.Close()
	if err := cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/standby", nil, api.AdminRequest{Node: third.Name, Flag: true}, &api.StandbyReply{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, q.Name+" to show "+third.Name+" in standby", 5*time.Second, func() bool {
		st, err := q.Status(ctxT(t, 5*time.Second))
		return err == nil && slices.ContainsFunc(st.Nodes, func(n api.NodeStatus) bool { return n.Name == third.Name && n.Standby })
	})

	// A successful action is a check of its device: the dead node's BMC
	// refused a check (a password changed, and changed back), then its
	// unfence works: status says so at once, not "auth failed" until the
	// next check an hour later.
	dev := p.Name + "-bmc"
	if err := c.BMCs[p.Index].SetPassword("changed-by-policy"); err != nil {
		t.Fatal(err)
	}
	var ds api.DeviceStatus
	if err := cl.Do(ctxT(t, 20*time.Second), "GET", "/v1/devices/"+dev+"/status", nil, nil, &ds); err != nil {
		t.Fatal(err)
	}
	if fp := fencePathOf(t, q, p.Name); fp.State != api.PathFailing {
		t.Fatalf("after a refused check, %s's path to %s: %+v", q.Name, p.Name, fp)
	}
	if err := c.BMCs[p.Index].SetPassword(devcluster.BMCPassword); err != nil {
		t.Fatal(err)
	}
	var rec fencing.Record
	if err := cl.Do(ctxT(t, 30*time.Second), "POST", "/v1/unfence", nil, api.AdminRequest{Node: p.Name, Reason: "test"}, &rec); err != nil || rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("unfence %s: %+v, %v", p.Name, rec, err)
	}
	if fp := fencePathOf(t, q, p.Name); fp.State != api.PathWorking || len(fp.Devices) != 1 || fp.Devices[0].State != api.HealthOK {
		t.Fatalf("right after the unfence through %s, %s's path to %s: %+v; want working", dev, q.Name, p.Name, fp)
	}
}

// fencePathOf is node's fence path to target, as n's status says it.
func fencePathOf(t *testing.T, n *devcluster.Node, target string) api.FencePath {
	t.Helper()
	st, err := n.Status(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, fp := range st.FencePaths {
		if fp.Node == target {
			return fp
		}
	}
	t.Fatalf("%s's status has no fence path to %s", n.Name, target)
	return api.FencePath{}
}
