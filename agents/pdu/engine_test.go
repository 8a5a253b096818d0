package pdu_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/pdu"
	"github.com/fenced/fenced/agents/pdu/pdutest"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// A dual-PSU node fenced by the engine through one pdu device per PDU in
// the same level: both must go off; with one PDU down the fence fails and
// the history says which device and outlet.
func TestEngineDualPDULevel(t *testing.T) {
	a := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	b := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	reg := agents.NewRegistry()
	reg.Register(pdu.Kind())
	eng := stonith.NewEngine(reg, nil)
	eng.RetryDelay = 10 * time.Millisecond
	dev := func(name string, s *pdutest.Sim) stonith.Target {
		return stonith.Target{Device: name, Agent: "pdu", Plug: "3", Timeout: 5 * time.Second,
			Params: agents.Params{"ip": s.Host, "ipport": strconv.Itoa(s.Port), "snmp_version": "2c", "community": "private", "shell_timeout": "0.3"}}
	}
	topo := stonith.Topology{{Devices: []stonith.Target{dev("pdu-a", a), dev("pdu-b", b)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rec := eng.Fence(ctx, stonith.Request{Target: "node1", Topology: topo, Action: fencing.ActionOff, ID: 1, Epoch: 1})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("fence with both PDUs up: %s: %s", rec.Outcome, rec.Error)
	}
	for _, at := range rec.Attempts {
		if at.Result != "success" || at.ReadBack != "off" {
			t.Fatalf("attempt %+v", at)
		}
	}
	rec = eng.Fence(ctx, stonith.Request{Target: "node1", Topology: topo, Action: fencing.ActionOn, ID: 2, Epoch: 1})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("unfence: %s: %s", rec.Outcome, rec.Error)
	}

	b.Stop()
	rec = eng.Fence(ctx, stonith.Request{Target: "node1", Topology: topo, Action: fencing.ActionOff, ID: 3, Epoch: 1})
	if rec.Outcome == fencing.OutcomeSuccess {
		t.Fatal("fence succeeded with one PDU of the level down")
	}
	var failedB bool
	for _, at := range rec.Attempts {
		if at.Device == "pdu-b" && at.Result != "success" && strings.Contains(at.Error, "pdu "+b.Addr+" outlets 3") {
			failedB = true
		}
	}
	if !failedB {
		t.Fatalf("no failed attempt of pdu-b naming %s outlet 3: %+v", b.Addr, rec.Attempts)
	}
	t.Logf("record: %s: %s", rec.Outcome, rec.Error)
}
