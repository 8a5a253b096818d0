package redfish

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
)

// A kept agent holds the session its check opened: operations use it (no
// login of their own, none left behind), the next check replaces it, an
// expired one is replaced by a login, and Close logs it out.
func TestHeldSession(t *testing.T) {
	srv := startSim(t, true, redfishsim.Options{SessionTimeout: 20 * time.Second})
	a := newAgent(t, simParams(t, srv, nil))
	ctx := ctxT(t)
	if err := a.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !a.Holds() || srv.OpenSessions() != 1 {
		t.Fatalf("held %v, %d sessions", a.Holds(), srv.OpenSessions())
	}
	if got := a.KeepAliveInterval(); got != 10*time.Second {
		t.Fatalf("keep-alive every %v with a 20s SessionTimeout", got)
	}
	created := srv.SessionsCreated()
	wantStatus(t, a, agents.StateOn)
	if err := a.Off(ctx); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, a, agents.StateOff)
	if err := a.KeepAlive(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.SessionsCreated() != created || srv.OpenSessions() != 1 {
		t.Fatalf("operations on the held session logged in %d times, %d sessions open", srv.SessionsCreated()-created, srv.OpenSessions())
	}
	if err := a.Check(ctx, true); err != nil || srv.SessionsCreated() != created+1 || srv.OpenSessions() != 1 {
		t.Fatalf("check: %v; %d logins, %d open; want one more login and the old session logged out", err, srv.SessionsCreated()-created, srv.OpenSessions())
	}
	// The BMC forgets the session: the keep-alive says so, and drops it.
	srv.SetFaults(redfishsim.Faults{ExpireSessionAfter: 1})
	if err := a.KeepAlive(ctx); !errors.Is(err, agents.ErrAuth) || a.Holds() {
		t.Fatalf("keep-alive on an expired session: %v, held %v", err, a.Holds())
	}
	if err := a.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	// Expired under an operation: it logs in again and holds that one.
	srv.SetFaults(redfishsim.Faults{ExpireSessionAfter: 1})
	if err := a.On(ctx); err != nil || !a.Holds() || srv.OpenSessions() != 1 {
		t.Fatalf("on across expiry: %v, held %v, %d open", err, a.Holds(), srv.OpenSessions())
	}
	if err := a.Check(ctx, false); err != nil || a.Holds() || srv.OpenSessions() != 0 {
		t.Fatalf("check without keep: %v, held %v, %d open", err, a.Holds(), srv.OpenSessions())
	}
	if err := a.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	a.Close()
	wantNoSessions(t, srv)
}

// Request timeouts grow with the BMC's latency: with request_timeout and
// login_timeout of 0.3s, a BMC answering each request in 0.6s is still used.
func TestTimeoutsGrowWithLatency(t *testing.T) {
	srv := startSim(t, false, redfishsim.Options{})
	srv.SetFaults(redfishsim.Faults{Latency: 600 * time.Millisecond})
	a := newAgent(t, simParams(t, srv, agents.Params{"request_timeout": "0.3", "login_timeout": "0.3"}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.Check(ctx, true); err != nil {
		t.Fatalf("check of a BMC answering in 0.6s: %v", err)
	}
	srtt, timeout, ok := a.RoundTrip()
	if !ok || srtt < 550*time.Millisecond || timeout < 4*srtt-time.Millisecond {
		t.Fatalf("latency %v, request timeout %v (%v)", srtt, timeout, ok)
	}
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off: %v", err)
	}
}
