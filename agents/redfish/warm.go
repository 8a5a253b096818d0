package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/rtt"
)

// Warm sessions (agents.Keeper) and request timeouts that follow the BMC.
//
// An agent kept by the device's health monitor holds the Redfish session
// its last check opened (Check with keep): operations then use it, and the
// idle connection to the BMC, instead of a TLS handshake, the service root,
// a login and the system's discovery, and do not log it out. Operations of
// an agent that holds no session log in and out as before. A held session
// the BMC expired answers 401: the operation logs in once more (relogin)
// and that session is held from then on. A keep-alive (a GET of the system)
// keeps the session younger than the BMC's SessionTimeout, read from its
// SessionService. The session is held in a keep.Slot, as ipmi's: one
// operation at a time uses it, a keep-alive yields to an operation, and a
// session replaced or dropped is logged out once nobody uses it.
//
// Request timeouts only grow with the BMC's measured latency (each request
// until its answer's headers, timed into the agent's rtt.Estimator):
// request_timeout, or four times the smoothed latency when that is longer
// (twice the time of a request cut short, when none was answered since),
// up to maxRequestTimeout; the login's budget likewise, for its three
// requests (rtt.Estimate.Deadline). They never shrink below what is
// configured: a reset POST may take many times a GET, and one cut short
// leaves the outcome unknown (which is why they are not the retransmission
// timeouts of ipmi, whose requests are sent again when late). A dead BMC
// is given up by the engine's levels and the health checks instead.
const (
	maxRequestTimeout = 2 * time.Minute
	// keepAliveDefault when the BMC does not say its SessionTimeout.
	keepAliveDefault = time.Minute
)

// timing measures every answer of the BMC and reports it to the
// operation's agents.NoteAnswer hook.
type timing struct {
	next http.RoundTripper
	lat  *rtt.Estimator
}

func (t *timing) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	switch {
	case err == nil:
		t.lat.Sample(time.Since(start))
		agents.NoteAnswer(req.Context())
	case errors.Is(req.Context().Err(), context.DeadlineExceeded):
		t.lat.Expired(time.Since(start))
	}
	return resp, err
}

func (t *timing) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// requestTimeout bounds one request other than the login's.
func (a *Agent) requestTimeout() time.Duration { return a.requestDeadline(a.lat.Estimate()) }

func (a *Agent) requestDeadline(e rtt.Estimate) time.Duration {
	return e.Deadline(1, a.cfg.requestTimeout, max(maxRequestTimeout, a.cfg.requestTimeout))
}

// loginTimeout bounds one login attempt (the service root twice and a
// POST: three requests).
func (a *Agent) loginTimeout() time.Duration {
	return a.lat.Estimate().Deadline(3, a.cfg.loginTimeout, max(maxRequestTimeout, a.cfg.loginTimeout))
}

// RoundTrip is the BMC's measured answer time and the request timeout.
func (a *Agent) RoundTrip() (time.Duration, time.Duration, bool) {
	e := a.lat.Estimate()
	return e.SRTT, a.requestDeadline(e), e.Answered()
}

// ReportsAnswers: every HTTP answer of the BMC is reported.
func (a *Agent) ReportsAnswers() bool { return true }

// Check logs in anew and reads the system; with keep, the new session is
// held from then on in place of the previous one, which is logged out once
// no operation uses it.
//
// On a BMC with few session slots, the held session is one of them: when
// the new login finds none free, the held session is logged out and the
// login tried once more, so that a check never needs two slots.
func (a *Agent) Check(ctx context.Context, keep bool) error {
	if a.usesBasic() {
		// No session to hold: Basic auth sends the credentials each time.
		return a.Monitor(ctx)
	}
	s, err := a.open(ctx)
	if err != nil && isNoSlot(err) && a.held.Holds() {
		a.log.Info("the BMC has no free session slot; logging out the held session to check with a new one")
		if old := a.held.Drop(); old != nil {
			old.retire(ctx)
		}
		s, err = a.open(ctx)
	}
	if err != nil {
		if !keep {
			a.Drop()
		}
		if isAuth(err) {
			return a.authRefused("monitor", err)
		}
		return agents.Failed(a.op("monitor"), err)
	}
	if _, err := s.system(ctx); err != nil {
		s.close()
		if !keep {
			a.Drop()
		}
		return a.classify("monitor", err, false)
	}
	if !keep || s.basic {
		// s.basic: the login found no session service; nothing to hold.
		s.close()
		a.Drop()
		return nil
	}
	a.learnSessionTimeout(ctx, s)
	old, held := a.held.Swap(s)
	if !held {
		s.close()
	}
	if old != nil {
		old.retire(ctx)
	}
	return nil
}

// learnSessionTimeout reads SessionService.SessionTimeout once, for the
// keep-alive interval.
func (a *Agent) learnSessionTimeout(ctx context.Context, s *session) {
	a.mu.Lock()
	known := a.sessionTimeout != 0
	a.mu.Unlock()
	if known {
		return
	}
	timeout := time.Duration(-1) // asked; not said
	if body, _, err := s.get(ctx, defaultRedfishURI+"/SessionService"); err == nil {
		var svc struct {
			SessionTimeout float64 `json:"SessionTimeout"`
		}
		if json.Unmarshal(body, &svc) == nil && svc.SessionTimeout > 0 {
			timeout = time.Duration(svc.SessionTimeout * float64(time.Second))
		}
	}
	a.mu.Lock()
	a.sessionTimeout = timeout
	a.mu.Unlock()
}

// KeepAlive reads the system on the held session; an operation that needs
// the session cancels it. A session the BMC no longer knows is forgotten.
func (a *Agent) KeepAlive(ctx context.Context) error {
	s, err := a.held.KeepAlive(ctx, func(kctx context.Context, s *session) error {
		s.relogged = true // a keep-alive never logs in: a 401 ends the session
		_, err := s.system(kctx)
		return err
	})
	if err == nil {
		return nil
	}
	if isAuth(err) {
		// The BMC expired it: nothing to log out.
		if a.held.CompareAndSwap(s, nil) {
			a.recordClosed(s.location)
		}
	}
	return a.classify("keep-alive", err, false)
}

// KeepAliveInterval is half the BMC's SessionTimeout, between 10s and 5
// minutes; a minute when the BMC did not say; 0 with Basic auth, which
// holds no session (so the device's monitor does not take the session it
// never gets for one lost, and check again at once).
func (a *Agent) KeepAliveInterval() time.Duration {
	if a.usesBasic() {
		return 0
	}
	a.mu.Lock()
	t := a.sessionTimeout
	a.mu.Unlock()
	if t <= 0 {
		return keepAliveDefault
	}
	return min(max(t/2, 10*time.Second), 5*time.Minute)
}

// usesBasic reports whether the agent sends Basic credentials instead of
// logging in: basic_auth, or a BMC found to have no session service.
func (a *Agent) usesBasic() bool {
	if a.cfg.basicAuth {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.basicWhy != ""
}

// Holds reports whether the agent holds a session.
func (a *Agent) Holds() bool { return a.held.Holds() }

// Drop logs out the held session, if any.
func (a *Agent) Drop() {
	if s := a.held.Drop(); s != nil {
		s.retire(context.Background())
	}
}

// retire waits (within ctx) until no operation uses the held session s,
// then logs it out.
func (s *session) retire(ctx context.Context) { s.Retire(ctx, s.close) }
