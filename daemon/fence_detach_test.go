package daemon_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// An admin's Ctrl-C on `fencectl fence` (issue 24 §1) detaches from the
// fence instead of cancelling it: the request's connection closes half-way
// through a fence of a slow BMC (300 ms each way), and the fence still runs
// to its read-back and is recorded as confirmed.
func TestFenceOutlivesItsRequest(t *testing.T) {
	var relays []*ipmisim.Relay
	t.Cleanup(func() {
		for _, r := range relays {
			r.Close()
		}
	})
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true, Configure: func(cfg *config.Config) {
		for name, d := range cfg.Devices {
			port, _ := strconv.Atoi(d.Params["ipport"])
			r, err := ipmisim.StartRelay(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			relays = append(relays, r)
			p := map[string]string{}
			for k, v := range d.Params {
				p[k] = v
			}
			p["ipport"] = strconv.Itoa(r.Port())
			d.Params, d.Timeout = p, config.Duration(20*time.Second)
			cfg.Devices[name] = d
		}
	}})
	p, _, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Asked on the leader itself, where the request's own context runs
	// the fence (one forwarded from another node runs under the leader's).
	victim := c.Other(p)
	cl := p.Client()
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	err = cl.Do(ctx, "POST", "/v1/fence", nil, daemon.AdminRequest{Node: victim.Name, Reason: "detach test"}, nil)
	cancel()
	if err == nil {
		t.Fatal("the fence of a BMC 300 ms away answered within 400 ms")
	}
	var rec *fencing.Record
	waitUntil(t, "the fence recorded as done", 30*time.Second, func() bool {
		var h daemon.History
		if cl.Do(ctxT(t, 5*time.Second), "GET", "/v1/history", nil, nil, &h) != nil {
			return false
		}
		for i := range h.Records {
			if r := h.Records[i]; r.Kind == fencing.KindFence && r.Target == victim.Name && r.Reason == "detach test" && r.Outcome != fencing.OutcomePending {
				rec = &r
				return true
			}
		}
		return false
	})
	if rec.Outcome != fencing.OutcomeSuccess || c.BMCs[victim.Index].PoweredOn() {
		t.Fatalf("after the request was given up the fence ended %s (%s); BMC on: %v", rec.Outcome, rec.Error, c.BMCs[victim.Index].PoweredOn())
	}
	t.Logf("fence confirmed %v after it was asked for, its request given up at 400 ms", rec.Finished.Sub(rec.Started).Round(time.Millisecond))
}
