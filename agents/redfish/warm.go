package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/fenced/fenced/agents"
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
// SessionService.
//
// Request timeouts only grow with the BMC's measured latency (each request
// until its answer's headers): request_timeout, or four times the smoothed
// latency when that is longer (twice the time of a request cut short, when
// none was answered yet), up to maxRequestTimeout; the login's budget
// likewise. They never shrink below what is configured: a reset POST may
// take many times a GET, and one cut short leaves the outcome unknown. A
// dead BMC is given up by the engine's levels and the health checks instead.
const (
	maxRequestTimeout = 2 * time.Minute
	// keepAliveDefault when the BMC does not say its SessionTimeout.
	keepAliveDefault = time.Minute
)

// latency is the smoothed time the BMC takes to answer a request; grow is
// twice the time of a request cut short by its timeout before any answer
// was measured (the BMC is slower than that), so a BMC slower than the
// configured timeouts is learnt too.
type latency struct {
	mu      sync.Mutex
	srtt    time.Duration
	samples int
	grow    time.Duration
}

func (l *latency) sample(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.samples == 0 {
		l.srtt = d
	} else {
		l.srtt = (7*l.srtt + d) / 8
	}
	l.samples++
	l.grow = 0
}

// cut records a request that ran into its timeout after d.
func (l *latency) cut(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grow = max(l.grow, 2*d)
}

func (l *latency) get() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.srtt, l.samples > 0
}

// least is the shortest timeout worth trying for a step of n/4 requests
// (4 for one request, 12 for a login): n·srtt, or n/4 requests of grow
// each.
func (l *latency) least(n time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.grow * n / 4
	if l.samples > 0 {
		d = max(d, time.Duration(n)*l.srtt)
	}
	return d
}

// timing measures every answer of the BMC and reports it to the
// operation's agents.NoteAnswer hook.
type timing struct {
	next http.RoundTripper
	lat  *latency
}

func (t *timing) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	switch {
	case err == nil:
		t.lat.sample(time.Since(start))
		agents.NoteAnswer(req.Context())
	case errors.Is(req.Context().Err(), context.DeadlineExceeded):
		t.lat.cut(time.Since(start))
	}
	return resp, err
}

func (t *timing) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// requestTimeout bounds one request other than the login's.
func (a *Agent) requestTimeout() time.Duration {
	d := max(a.cfg.requestTimeout, a.lat.least(4))
	return min(d, max(maxRequestTimeout, a.cfg.requestTimeout))
}

// loginTimeout bounds one login attempt (the service root twice and a
// POST).
func (a *Agent) loginTimeout() time.Duration {
	d := max(a.cfg.loginTimeout, a.lat.least(12))
	return min(d, max(maxRequestTimeout, a.cfg.loginTimeout))
}

// RoundTrip is the BMC's measured answer time and the request timeout.
func (a *Agent) RoundTrip() (time.Duration, time.Duration, bool) {
	srtt, ok := a.lat.get()
	return srtt, a.requestTimeout(), ok
}

// ReportsAnswers: every HTTP answer of the BMC is reported.
func (a *Agent) ReportsAnswers() bool { return true }

// Check logs in anew and reads the system; with keep, the new session is
// held from then on in place of the previous one, which is logged out once
// no operation uses it.
func (a *Agent) Check(ctx context.Context, keep bool) error {
	if a.cfg.basicAuth {
		// No session to hold: Basic auth sends the credentials each time.
		return a.Monitor(ctx)
	}
	s, err := a.open(ctx)
	if err != nil {
		if !keep {
			a.Drop()
		}
		if isAuth(err) {
			return agents.AuthFailed(a.op("monitor"), err)
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
	if !keep {
		s.close()
		a.Drop()
		return nil
	}
	a.learnSessionTimeout(ctx, s)
	s.busy = make(chan struct{}, 1)
	a.mu.Lock()
	old, closed := a.held, a.closed
	if !closed {
		a.held = s
	}
	a.mu.Unlock()
	if closed {
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
	a.mu.Lock()
	s := a.held
	a.mu.Unlock()
	if s == nil || !s.tryTake() {
		return nil
	}
	kctx, cancel := context.WithCancel(ctx)
	s.setYield(cancel)
	s.relogged = true // a keep-alive never logs in: a 401 ends the session
	_, err := s.system(kctx)
	s.setYield(nil)
	yielded := kctx.Err() != nil && ctx.Err() == nil
	cancel()
	s.give()
	switch {
	case err == nil, yielded:
		return nil
	case isAuth(err):
		a.mu.Lock()
		if a.held == s {
			a.held = nil
		}
		a.mu.Unlock()
	}
	return a.classify("keep-alive", err, false)
}

// KeepAliveInterval is half the BMC's SessionTimeout, between 10s and 5
// minutes; a minute when the BMC did not say.
func (a *Agent) KeepAliveInterval() time.Duration {
	a.mu.Lock()
	t := a.sessionTimeout
	a.mu.Unlock()
	if t <= 0 {
		return keepAliveDefault
	}
	return min(max(t/2, 10*time.Second), 5*time.Minute)
}

// Holds reports whether the agent holds a session.
func (a *Agent) Holds() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held != nil
}

// Drop logs out the held session, if any.
func (a *Agent) Drop() {
	a.mu.Lock()
	s := a.held
	a.held = nil
	a.mu.Unlock()
	if s != nil {
		s.retire(context.Background())
	}
}

// takeHeld returns the held session, taken for one operation (a keep-alive
// on it is cancelled, another operation waited for), or nil.
func (a *Agent) takeHeld(ctx context.Context) (*session, error) {
	for {
		a.mu.Lock()
		s := a.held
		a.mu.Unlock()
		if s == nil {
			return nil, nil
		}
		if s.tryTake() {
			s.relogged = false
			return s, nil
		}
		s.mu.Lock()
		y := s.yield
		s.mu.Unlock()
		if y != nil {
			y()
		}
		select {
		case s.busy <- struct{}{}:
			if s.isDead() {
				<-s.busy
				continue
			}
			s.relogged = false
			return s, nil
		case <-s.dead:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *session) tryTake() bool {
	select {
	case s.busy <- struct{}{}:
	default:
		return false
	}
	if s.isDead() {
		<-s.busy
		return false
	}
	return true
}

func (s *session) give() { <-s.busy }

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

func (s *session) setYield(fn func()) {
	s.mu.Lock()
	s.yield = fn
	s.mu.Unlock()
}

// retire waits (within ctx) until no operation uses the held session s,
// then logs it out.
func (s *session) retire(ctx context.Context) {
	select {
	case s.busy <- struct{}{}:
		defer func() { <-s.busy }()
	case <-ctx.Done():
	}
	s.deadOnce.Do(func() { close(s.dead) })
	s.close()
}
