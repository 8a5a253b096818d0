package ipmi

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/agents/keep"
)

// A session its process left open (killed before it logged out) is in the
// journal by the BMC's ID for it, with nothing secret; the next process
// logs in, sends Close Session for it and frees its slot. An ID the BMC no
// longer knows counts as closed; a record of another BMC, or that is no
// IPMI session ID, is refused; with every slot taken the closer cannot log
// in, and says so.
func TestLeftOpenSessionsAreClosed(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true, MaxSessions: 2})
	params := simParams(bmc.Host(), bmc.Port(), "17")
	path := filepath.Join(t.TempDir(), "sessions.json")
	ctx := ctxFor(t, time.Minute)

	j, _ := keep.OpenJournal(path, nil)
	a := newAgent(t, params, nil)
	a.RecordSessions(j)
	if err := a.Check(ctx, true); err != nil || !a.Holds() {
		t.Fatalf("check: %v, holds %v", err, a.Holds())
	}
	recs := j.Open()
	if len(recs) != 1 || recs[0].Agent != "ipmi" || recs[0].Address != bmc.Addr().String() || !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(recs[0].ID) {
		t.Fatalf("journal: %+v", recs)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), "password") {
		t.Fatalf("the journal holds the password:\n%s", b)
	}
	// The check's new session replaced the old in the journal too.
	if err := a.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	if now := j.Open(); len(now) != 1 || now[0].ID == recs[0].ID {
		t.Fatalf("after a second check: %+v (first %+v)", now, recs)
	}

	// a's process dies here: its session stays open on the BMC.
	_, left := keep.OpenJournal(path, nil)
	if len(left) != 1 || bmc.Sessions() != 1 {
		t.Fatalf("left open: %+v, %d sessions on the BMC", left, bmc.Sessions())
	}
	b := newAgent(t, params, nil)
	foreign := agents.SessionRecord{Agent: "ipmi", Address: "192.0.2.1:623", ID: "00000001"}
	bad := agents.SessionRecord{Agent: "ipmi", Address: bmc.Addr().String(), ID: "not-hex"}
	failed, err := b.CloseSessions(ctx, append(left, foreign, bad))
	if err != nil || len(failed) != 2 || failed[foreign] == nil || failed[bad] == nil {
		t.Fatalf("close: %v, failed %v", err, failed)
	}
	if n := bmc.Sessions(); n != 0 {
		t.Fatalf("%d sessions on the BMC after closing the one left open", n)
	}
	// Closed already: gone, not a failure.
	if failed, err := b.CloseSessions(ctx, left); err != nil || len(failed) != 0 {
		t.Fatalf("closing it again: %v, %v", err, failed)
	}
	// a, still running here, finds its session gone and opens another.
	wantStatus(t, a, agents.StateOn)

	// Both slots taken: no login to close anything with.
	o := newAgent(t, params, nil)
	if err := o.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	if bmc.Sessions() != 2 {
		t.Fatalf("%d sessions, want both slots taken", bmc.Sessions())
	}
	_, err = b.CloseSessions(ctx, j.Open())
	if err == nil || !strings.Contains(err.Error(), "no free session slot") {
		t.Fatalf("closing on a full BMC: %v, want it to say the BMC has no free session slot", err)
	}
}

// A check that finds no free slot passes on the held session and says so
// (NoFreeSlot); once a slot is free again, it does not.
func TestNoFreeSlotReported(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true, MaxSessions: 2})
	params := simParams(bmc.Host(), bmc.Port(), "17")
	ctx := ctxFor(t, 30*time.Second)
	a := newAgent(t, params, nil)
	if err := a.Check(ctx, true); err != nil || a.NoFreeSlot() {
		t.Fatalf("check: %v, no free slot %v", err, a.NoFreeSlot())
	}
	o := newAgent(t, params, nil)
	if err := o.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The BMC's table holds two: a third login is refused.
	x := newAgent(t, params, nil)
	if err := x.Check(ctx, false); err == nil || !sessionsFull(err) || !strings.Contains(err.Error(), "no free session slot") {
		t.Fatalf("a third session on a 2-slot BMC: %v", err)
	}
	if err := a.Check(ctx, true); err != nil || !a.NoFreeSlot() || !a.Holds() {
		t.Fatalf("check on a full BMC: %v, no free slot %v, holds %v", err, a.NoFreeSlot(), a.Holds())
	}
	o.Close()
	if err := a.Check(ctx, true); err != nil || a.NoFreeSlot() {
		t.Fatalf("check with a slot free: %v, no free slot %v", err, a.NoFreeSlot())
	}
}

// The login's budget follows what it measures: a cold contact over a path
// of 900 ms each way (a login is five round trips, 9 s, beyond the budget
// of six request timeouts the agent starts with) logs in once, and a late
// copy of the answer to its first request (resent after command_timeout)
// is not taken for the next answer.
func TestColdLoginOverASlowPath(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10s login")
	}
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	r := startRelay(t, bmc.Addr(), 900*time.Millisecond)
	a := newAgent(t, simParams(r.Host(), r.Port(), "17"), nil)
	ctx := ctxFor(t, time.Minute)
	start := time.Now()
	s, err := a.open(ctx)
	if err != nil {
		t.Fatalf("cold login at 900ms each way: %v", err)
	}
	took := time.Since(start)
	defer s.close(ctx, true)
	// Five requests, the first sent twice (its answer takes longer than
	// command_timeout): a login given up and made again sends more.
	if n := r.Forwarded(); n != 6 {
		t.Errorf("%d datagrams sent for the login, want 6 (5 requests, the first resent once): it logged in more than once", n)
	}
	t.Logf("cold login at 900ms each way took %v, %d datagrams", took.Round(time.Millisecond), r.Forwarded())
}
