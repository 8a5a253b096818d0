package stonith

import (
	"context"
	"testing"
	"time"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/stonith/fencing"
)

// A fence that must log in first (no session kept) over a path of 2.5 s
// each way succeeds in one attempt within a fence_timeout that fits its
// round trips: the login's five (25 s; a login given up for its first
// budget and made again cost 6 s more), the power-off and the read-back
// (5 s each). 40 s is what the README asks of such a path.
func TestColdFenceOverSlowPath(t *testing.T) {
	if testing.Short() {
		t.Skip("a 35s fence")
	}
	bm := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	r, err := ipmisim.StartRelay(bm.Addr(), 2500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	e := ipmiEngine()
	const fenceTimeout = 40 * time.Second
	tg := Target{Device: "bmc", Agent: "ipmi", Params: benchParams(r.Host(), r.Port(), "17"), Timeout: fenceTimeout, Retries: 2}
	rec := e.Fence(context.Background(), Request{Target: "node", Action: fencing.ActionOff, Topology: Topology{{Devices: []Target{tg}}}})
	if rec.Outcome != fencing.OutcomeSuccess || len(rec.Attempts) != 1 || bm.PoweredOn() {
		t.Fatalf("cold fence at 2.5s each way: %s %s, %d attempts %+v (powered on: %v)", rec.Outcome, rec.Error, len(rec.Attempts), rec.Attempts, bm.PoweredOn())
	}
	at := rec.Attempts[0]
	t.Logf("cold fence at 2.5s each way: one attempt of %v (read-back %v) within fence_timeout %v", at.Duration.Round(time.Millisecond), at.ReadBackDuration.Round(time.Millisecond), fenceTimeout)
}
