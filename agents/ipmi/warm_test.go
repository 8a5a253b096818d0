package ipmi

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

func startBMC(t *testing.T, cfg ipmisim.BMCConfig) *ipmisim.BMC {
	t.Helper()
	b, err := ipmisim.StartBMC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func startRelay(t *testing.T, to *net.UDPAddr, delay time.Duration) *ipmisim.Relay {
	t.Helper()
	r, err := ipmisim.StartRelay(to, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// An agent opens one session and keeps using it until Close; Check logs in
// anew and holds the new session in place of the old, which it logs out,
// so the BMC never sees more than the held session (two during a check).
func TestHeldSession(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	a := newAgent(t, simParams(bmc.Host(), bmc.Port(), "17"), nil)
	ctx := ctxFor(t, 30*time.Second)
	for i := 0; i < 3; i++ {
		wantStatus(t, a, agents.StateOn)
	}
	if _, err := a.Command(ctx, agents.StateOff); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, a, agents.StateOff)
	if n := bmc.Sessions(); n != 1 || !a.Holds() {
		t.Fatalf("%d sessions on the BMC after five operations (held %v), want the one held", n, a.Holds())
	}
	for i := 0; i < 3; i++ {
		if err := a.Check(ctx, true); err != nil {
			t.Fatal(err)
		}
		if n := bmc.Sessions(); n != 1 {
			t.Fatalf("check %d: %d sessions on the BMC, want 1", i, n)
		}
	}
	a.Close()
	if n := bmc.Sessions(); n != 0 {
		t.Fatalf("%d sessions left after Close", n)
	}

	a = newAgent(t, simParams(bmc.Host(), bmc.Port(), "17"), nil)
	if err := a.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	// A changed password fails the check (a new login is refused) while
	// the held session still works for a fence.
	if err := bmc.SetPassword("rotated"); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(ctx, true); !errors.Is(err, agents.ErrAuth) {
		t.Fatalf("check after a password change = %v, want an authentication failure", err)
	}
	bmc.SetPower(true)
	if _, err := a.Command(ctx, agents.StateOff); err != nil || bmc.PoweredOn() {
		t.Fatalf("command on the held session after the password change: %v (on %v)", err, bmc.PoweredOn())
	}
	if err := a.Check(ctx, false); err == nil || a.Holds() {
		t.Fatalf("check without keep: %v, holds %v; want the failure and no session held", err, a.Holds())
	}
	bmc.SetPassword("password")
	if err := a.Check(ctx, true); err != nil || !a.Holds() {
		t.Fatalf("check: %v, holds %v", err, a.Holds())
	}
}

// A check that finds every slot of the BMC taken checks on the held
// session and keeps it (logging it out to log in anew could lose the slot
// to another client, and the next fence would find none); a fence still
// runs on it.
func TestCheckOnAFullBMCKeepsTheSession(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	ctx := ctxFor(t, 30*time.Second)
	a := newAgent(t, simParams(bmc.Host(), bmc.Port(), "17"), nil)
	if err := a.Check(ctx, true); err != nil || !a.Holds() {
		t.Fatalf("check: %v, holds %v", err, a.Holds())
	}
	// Other clients take every other slot.
	for bmc.Sessions() < 4 {
		o := newAgent(t, simParams(bmc.Host(), bmc.Port(), "17"), nil)
		if err := o.Check(ctx, true); err != nil {
			t.Fatalf("other client's session %d: %v", bmc.Sessions()+1, err)
		}
	}
	o := newAgent(t, simParams(bmc.Host(), bmc.Port(), "17"), nil)
	if err := o.Check(ctx, true); err == nil || !sessionsFull(err) {
		t.Fatalf("a fifth session = %v, want the BMC's refusal for lack of slots", err)
	}
	held := a.held
	for i := 0; i < 3; i++ {
		if err := a.Check(ctx, true); err != nil || a.held != held {
			t.Fatalf("check %d on a full BMC: %v, holds %v (the same session: %v); want it checked on the held session", i, err, a.Holds(), a.held == held)
		}
	}
	if n := bmc.Sessions(); n != 4 {
		t.Fatalf("%d sessions after the checks, want the 4 held", n)
	}
	if _, err := a.Command(ctx, agents.StateOff); err != nil || bmc.PoweredOn() {
		t.Fatalf("fence on the held session of a full BMC: %v (on %v)", err, bmc.PoweredOn())
	}
}

// A held session the BMC no longer knows (it restarted) is not trusted:
// the operation runs again on a new session, which is held from then on.
func TestHeldSessionLostIsReplaced(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	addr := bmc.Addr().String()
	a := newAgent(t, simParams(bmc.Host(), bmc.Port(), "17"), nil)
	wantStatus(t, a, agents.StateOn)
	bmc.Close()
	bmc = startBMC(t, ipmisim.BMCConfig{Addr: addr, PoweredOn: true})
	start := time.Now()
	if _, err := a.Command(ctxFor(t, 20*time.Second), agents.StateOff); err != nil {
		t.Fatalf("command after the BMC restarted: %v", err)
	}
	took := time.Since(start)
	if bmc.PoweredOn() || bmc.Sessions() != 1 {
		t.Fatalf("on %v, %d sessions", bmc.PoweredOn(), bmc.Sessions())
	}
	// The BMC answered in a millisecond: the dead session is given up
	// after 0.2 + 0.4 + 0.8 s (command_retries 2), not 3 × 1s.
	if took > 2500*time.Millisecond {
		t.Fatalf("took %v to replace the lost session", took)
	}
	wantStatus(t, a, agents.StateOff)
	t.Logf("lost session replaced in %v", took)
}

// A keep-alive yields to an operation: the operation does not wait for the
// keep-alive's round trip.
func TestKeepAliveYields(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	r := startRelay(t, bmc.Addr(), 400*time.Millisecond)
	a := newAgent(t, simParams(r.Host(), r.Port(), "17"), nil)
	ctx := ctxFor(t, 60*time.Second)
	if err := a.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.KeepAlive(ctx) }()
	time.Sleep(100 * time.Millisecond) // the keep-alive is on the wire
	start := time.Now()
	wantStatus(t, a, agents.StateOn)
	took := time.Since(start)
	if err := <-done; err != nil {
		t.Fatalf("keep-alive: %v", err)
	}
	// One round trip is 800ms; behind the keep-alive it would be 1.5s.
	if took > 1300*time.Millisecond {
		t.Fatalf("status took %v: it waited for the keep-alive", took)
	}
}

// Request timeouts follow the BMC: with command_timeout 0.2s and a BMC
// answering in a second, go-ipmi's fixed timeouts never get an answer;
// the agent learns the latency from the first answer (a resent request,
// answered during its third wait) and works at the BMC's pace. Once
// measured fast, a BMC that stops answering is given up within
// 0.2 + 0.4 + 0.8 s per request.
func TestTimeoutsFollowTheBMC(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	r := startRelay(t, bmc.Addr(), 500*time.Millisecond)
	p := simParams(r.Host(), r.Port(), "17")
	p["command_timeout"], p["login_timeout"] = "0.2", "1"
	a := newAgent(t, p, nil)
	ctx := ctxFor(t, 60*time.Second)
	if err := a.Check(ctx, true); err != nil {
		t.Fatalf("check through a 1s round trip: %v", err)
	}
	rtt, rto, ok := a.RoundTrip()
	if !ok || rtt < 900*time.Millisecond || rtt > 2*time.Second || rto < rtt {
		t.Fatalf("measured rtt %v, timeout %v (%v)", rtt, rto, ok)
	}
	start := time.Now()
	wantStatus(t, a, agents.StateOn)
	if took := time.Since(start); took > 1800*time.Millisecond {
		t.Fatalf("status took %v through a 1s round trip", took)
	}

	r.SetDelay(0)
	for i := 0; i < 60; i++ {
		wantStatus(t, a, agents.StateOn)
	}
	if _, rto, _ := a.RoundTrip(); rto != 200*time.Millisecond {
		t.Fatalf("timeout %v after fast answers, want the floor (command_timeout 0.2s)", rto)
	}
	r.SetDead(true)
	start = time.Now()
	_, err := a.Status(ctx)
	took := time.Since(start)
	if !errors.Is(err, agents.ErrOutcomeUnknown) {
		t.Fatalf("status of a dead BMC = %v", err)
	}
	// The held session's request (1.4s), then a login within
	// login_timeout (1s).
	if took > 3500*time.Millisecond {
		t.Fatalf("a dead BMC took %v to give up", took)
	}
}

func TestEstimator(t *testing.T) {
	e := newEstimator(time.Second)
	if e.rto() != time.Second {
		t.Fatalf("initial %v", e.rto())
	}
	e.sample(time.Millisecond)
	if e.rto() != rtoFloor {
		t.Fatalf("after 1ms: %v, want the floor", e.rto())
	}
	e = newEstimator(time.Second)
	e.sample(5 * time.Second)
	if e.rto() != rtoCeiling {
		t.Fatalf("after 5s: %v, want the ceiling", e.rto())
	}
	for i := 0; i < 50; i++ {
		e.sample(5 * time.Second)
	}
	if rto := e.rto(); rto < 6*time.Second || rto > 7*time.Second {
		t.Fatalf("steady 5s: %v, want srtt + srtt/4", rto)
	}
	if low := newEstimator(50 * time.Millisecond); low.floor != 50*time.Millisecond || low.initial != 50*time.Millisecond {
		t.Fatalf("a command_timeout under the floor lowers it: %+v", low)
	}
}

func TestReplyType(t *testing.T) {
	rmcpPlus := func(pt byte) []byte { return []byte{6, 0, 0xff, 7, 6, pt, 0, 0, 0, 0} }
	for _, tc := range []struct {
		b    []byte
		want int
	}{
		{rmcpPlus(0x10), 0x11}, {rmcpPlus(0x12), 0x13}, {rmcpPlus(0x14), 0x15},
		{rmcpPlus(0x11), 0x11}, {rmcpPlus(0x00), 0x00}, {rmcpPlus(0xc0), 0x00},
		{[]byte{6, 0, 0xff, 7, 0, 0, 0, 0, 0, 0}, -1}, // IPMI v1.5 framing
		{[]byte{6, 0, 0xff, 6, 0, 0}, -1},             // ASF
		{[]byte{6, 0}, -1},
	} {
		if got := replyType(tc.b); got != tc.want {
			t.Errorf("replyType(% x) = %#x, want %#x", tc.b, got, tc.want)
		}
	}
}
