package redfish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/keep"
	"github.com/fenced/fenced/agents/rtt"
)

func init() {
	agents.Register(Kind())
}

// Kind is the "redfish" agent kind; init registers it with agents.Default,
// tests may register it in their own registry.
func Kind() agents.Kind {
	return agents.Kind{
		Name:        "redfish",
		Description: "Fence agent for Redfish BMCs (iDRAC, iLO, XCC, OpenBMC): ComputerSystem.Reset with read-back",
		VendorURL:   "https://www.dmtf.org/standards/redfish",
		Params:      params,
		New: func(p agents.Params, log *slog.Logger) (agents.Agent, error) {
			return New(p, log)
		},
	}
}

// Agent fences one ComputerSystem through its BMC. It is safe for concurrent
// use: each operation logs in, works, and logs out on its own session,
// unless the agent holds a session (warm.go): operations then take turns on
// that one.
type Agent struct {
	cfg  *config
	log  *slog.Logger
	http *http.Client
	lat  *rtt.Estimator
	held keep.Slot[*session] // the session a check kept (warm.go)
	// ledger is told of every session logged in and out (journal.go).
	ledger atomic.Pointer[agents.SessionLedger]

	mu        sync.Mutex
	root      *rootLinks // read once, then reused
	systemURI string     // discovered once, then reused
	// sessionTimeout is the BMC's SessionService.SessionTimeout; 0 not
	// asked yet, negative not said.
	sessionTimeout time.Duration
}

var (
	_ agents.Agent          = (*Agent)(nil)
	_ agents.Monitor        = (*Agent)(nil)
	_ agents.Lister         = (*Agent)(nil)
	_ agents.Closer         = (*Agent)(nil)
	_ agents.Keeper         = (*Agent)(nil)
	_ agents.RoundTripper   = (*Agent)(nil)
	_ agents.AnswerReporter = (*Agent)(nil)
)

// New validates p and returns an agent; it does not touch the network.
func New(p agents.Params, log *slog.Logger) (*Agent, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := parseConfig(p, log)
	if err != nil {
		return nil, fmt.Errorf("redfish: %w", err)
	}
	a := &Agent{cfg: cfg, log: log.With("addr", cfg.addr), http: cfg.httpClient(), lat: &rtt.Estimator{}, held: keep.NewSlot[*session]()}
	a.http.Transport = &timing{next: a.http.Transport, lat: a.lat}
	return a, nil
}

// Close logs out the held session and drops idle connections to the BMC.
func (a *Agent) Close() error {
	if s := a.held.Close(); s != nil {
		s.retire(context.Background())
	}
	a.http.CloseIdleConnections()
	return nil
}

func (a *Agent) op(name string) string { return "redfish " + a.cfg.addr + ": " + name }

// withSession runs fn on the held session, or on a fresh session that it
// always logs out. A failure to log in is classified here: nothing was
// sent, so it is a failure.
func (a *Agent) withSession(ctx context.Context, name string, fn func(s *session) error) error {
	held, ok, err := a.held.Take(ctx)
	if err != nil {
		return agents.Failed(a.op(name), fmt.Errorf("waiting for the session: %w", err))
	}
	if ok {
		held.relogged = false
		defer held.Give()
		return fn(held)
	}
	s, err := a.open(ctx)
	if err != nil {
		if isAuth(err) {
			return agents.AuthFailed(a.op(name), err)
		}
		return agents.Failed(a.op(name), err)
	}
	defer s.close()
	return fn(s)
}

// Status reads PowerState. Anything but Off (On, PoweringOn, PoweringOff,
// Paused) is on: for fencing, a node is off only once power is gone.
func (a *Agent) Status(ctx context.Context) (agents.State, error) {
	st := agents.StateUnknown
	err := a.withSession(ctx, "status", func(s *session) error {
		si, err := s.system(ctx)
		if err != nil {
			return a.classify("status", err, false)
		}
		st, err = stateOf(si.power)
		if err != nil {
			return agents.Failed(a.op("status"), err)
		}
		return nil
	})
	return st, err
}

func stateOf(p schemas.PowerState) (agents.State, error) {
	switch p {
	case schemas.OffPowerState:
		return agents.StateOff, nil
	case schemas.OnPowerState, schemas.PoweringOnPowerState, schemas.PoweringOffPowerState, schemas.PausedPowerState:
		return agents.StateOn, nil
	}
	return agents.StateUnknown, fmt.Errorf("PowerState %q not understood", string(p))
}

// Monitor logs in and reads the system: the BMC answers, accepts our
// credentials and has the system we fence.
func (a *Agent) Monitor(ctx context.Context) error {
	return a.withSession(ctx, "monitor", func(s *session) error {
		if _, err := s.system(ctx); err != nil {
			return a.classify("monitor", err, false)
		}
		return nil
	})
}

// List returns the BMC's systems: Id as the port, Name as its alias.
func (a *Agent) List(ctx context.Context) ([]agents.Port, error) {
	var ports []agents.Port
	err := a.withSession(ctx, "list", func(s *session) error {
		uris, err := s.systemURIs(ctx)
		if err != nil {
			return a.classify("list", err, false)
		}
		for _, uri := range uris {
			body, hdr, err := s.get(ctx, uri)
			if err != nil {
				return a.classify("list", err, false)
			}
			si, err := parseSystem(body, hdr.Get("ETag"))
			if err != nil {
				return agents.Failed(a.op("list"), fmt.Errorf("%s: %w", uri, err))
			}
			id := si.id
			if id == "" {
				id = uri
			}
			ports = append(ports, agents.Port{ID: id, Alias: si.name})
		}
		return nil
	})
	return ports, err
}

// Off powers the system off with ForceOff and returns nil only once
// PowerState reads Off.
func (a *Agent) Off(ctx context.Context) error {
	return a.withSession(ctx, "off", func(s *session) error { return s.setPower(ctx, "off", schemas.OffPowerState) })
}

// On powers the system on and returns nil once PowerState reads On.
func (a *Agent) On(ctx context.Context) error {
	return a.withSession(ctx, "on", func(s *session) error { return s.setPower(ctx, "on", schemas.OnPowerState) })
}

// Reboot is off, confirmed Off, then on, confirmed On, on one session. A
// BMC's own restart is not used: its off cannot be observed, and fencing
// must see the off happen.
func (a *Agent) Reboot(ctx context.Context) error {
	return a.withSession(ctx, "reboot", func(s *session) error {
		if err := s.setPower(ctx, "reboot: off", schemas.OffPowerState); err != nil {
			return err
		}
		if a.cfg.powerWait > 0 && !sleep(ctx, a.cfg.powerWait) {
			return agents.Failed(a.op("reboot: on"), ctx.Err())
		}
		return s.setPower(ctx, "reboot: on", schemas.OnPowerState)
	})
}

// classify wraps err for op: authentication problems are auth failures;
// after a command may have gone out (sent), anything else is an unknown
// outcome; before, a failure.
func (a *Agent) classify(op string, err error, sent bool) error {
	switch {
	case isAuth(err):
		return agents.AuthFailed(a.op(op), err)
	case sent:
		return agents.Unknown(a.op(op), err)
	default:
		return agents.Failed(a.op(op), err)
	}
}

// ---- system discovery ----

// system resolves and reads the system we fence.
func (s *session) system(ctx context.Context) (*systemInfo, error) {
	uri, err := s.resolveSystem(ctx)
	if err != nil {
		return nil, err
	}
	return s.readSystem(ctx, uri)
}

func (s *session) readSystem(ctx context.Context, uri string) (*systemInfo, error) {
	body, hdr, err := s.get(ctx, uri)
	if err != nil {
		return nil, err
	}
	si, err := parseSystem(body, hdr.Get("ETag"))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", uri, err)
	}
	// The read-back goes where the system was read, not to its @odata.id:
	// that would be one more link to check, and nothing needs it.
	si.uri = uri
	return si, nil
}

// resolveSystem picks the system: systems_uri if given, else the plug (an
// Id or a URI), else the only system of the BMC.
func (s *session) resolveSystem(ctx context.Context) (string, error) {
	a := s.a
	if a.cfg.systemsURI != "" {
		return a.cfg.systemsURI, nil
	}
	a.mu.Lock()
	cached := a.systemURI
	a.mu.Unlock()
	if cached != "" {
		return cached, nil
	}
	uris, err := s.systemURIs(ctx)
	if err != nil {
		return "", err
	}
	var uri string
	switch plug := a.cfg.plug; {
	case plug != "":
		for _, u := range uris {
			if u == plug || u[strings.LastIndex(u, "/")+1:] == plug {
				uri = u
			}
		}
		// The FenceAgentAPI fills plug from nodename; a BMC with one
		// system has nothing to choose, so a plug naming no system is the
		// node's name, not a wrong choice.
		if uri == "" && len(uris) == 1 {
			a.log.Debug("plug names no system; using the BMC's only system", "plug", plug, "system", uris[0])
			uri = uris[0]
		}
		if uri == "" {
			return "", fmt.Errorf("system %q not found; the BMC has: %s", plug, listOrNone(uris))
		}
	case len(uris) == 1:
		uri = uris[0]
	case len(uris) == 0:
		return "", errors.New("the BMC lists no systems")
	default:
		return "", fmt.Errorf("the BMC has %d systems (%s): set systems_uri to the one to fence", len(uris), strings.Join(uris, ", "))
	}
	a.mu.Lock()
	a.systemURI = uri
	a.mu.Unlock()
	a.log.Debug("system discovered", "system", uri)
	return uri, nil
}

func listOrNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}

// systemURIs returns the paths of the BMC's systems: the members of the
// service root's Systems collection, each resolved on the BMC.
func (s *session) systemURIs(ctx context.Context) ([]string, error) {
	if s.systems == "" {
		return nil, errors.New("service root has no Systems link")
	}
	body, _, err := s.get(ctx, s.systems)
	if err != nil {
		return nil, err
	}
	links, err := parseMembers(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", s.systems, err)
	}
	uris := make([]string, 0, len(links))
	for _, l := range links {
		uri, err := s.a.cfg.origin.resolve(linkMember, l, s.systems)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", s.systems, err)
		}
		uris = append(uris, strings.TrimSuffix(uri, "/"))
	}
	return uris, nil
}

// ---- power ----

// resetCandidates lists, in order of preference, the ResetType values that
// bring a system to want. Only ForceOff cuts power for sure: GracefulShutdown
// waits on the OS, and PushPowerButton toggles (it would power on a system
// that went off meanwhile), so neither stands in for off.
func resetCandidates(want schemas.PowerState) []string {
	if want == schemas.OffPowerState {
		return []string{string(schemas.ForceOffResetType)}
	}
	return []string{string(schemas.OnResetType), string(schemas.ForceOnResetType)}
}

// chooseReset picks the reset type for want from what the BMC allows. An
// empty allowed list means the BMC did not say: we send our first choice
// and let it refuse.
func chooseReset(want schemas.PowerState, allowed []string) (string, error) {
	cands := resetCandidates(want)
	if allowed == nil {
		return cands[0], nil
	}
	for _, c := range cands {
		if slices.Contains(allowed, c) {
			return c, nil
		}
	}
	return "", fmt.Errorf("the BMC allows ResetType [%s]; powering %s needs %s",
		strings.Join(allowed, ", "), strings.ToLower(string(want)), strings.Join(cands, " or "))
}

// allowedResets returns the allowed ResetType values, from the action's
// annotation or its @Redfish.ActionInfo; nil when the BMC says neither.
func (s *session) allowedResets(ctx context.Context, si *systemInfo) ([]string, error) {
	if si.allowed != nil || si.actionInfo == "" {
		return si.allowed, nil
	}
	info, err := s.a.cfg.origin.resolve(linkActionInfo, si.actionInfo, si.uri)
	if err != nil {
		return nil, err
	}
	body, _, err := s.get(ctx, info)
	if err != nil {
		return nil, err
	}
	vals, err := parseActionInfo(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", info, err)
	}
	return vals, nil
}

// transitional reports a PowerState on its way to want.
func transitional(p, want schemas.PowerState) bool {
	return (want == schemas.OffPowerState && p == schemas.PoweringOffPowerState) ||
		(want == schemas.OnPowerState && p == schemas.PoweringOnPowerState)
}

// setPower brings the system to want and confirms it by read-back within
// power_timeout.
func (s *session) setPower(ctx context.Context, op string, want schemas.PowerState) error {
	a := s.a
	start := time.Now()
	si, err := s.system(ctx)
	if err != nil {
		return a.classify(op, err, false)
	}
	log := a.log.With("system", si.uri)
	if si.power == want {
		log.Info("already in the wanted state", "op", op, "power", string(si.power))
		return nil
	}
	deadline := time.Now().Add(a.cfg.powerTimeout)
	sent := false
	if !transitional(si.power, want) {
		allowed, err := s.allowedResets(ctx, si)
		if err != nil {
			return a.classify(op, err, false)
		}
		rt, err := chooseReset(want, allowed)
		if err != nil {
			return agents.Failed(a.op(op), err)
		}
		if si.resetTarget == "" {
			return agents.Failed(a.op(op), fmt.Errorf("system %s has no #ComputerSystem.Reset action", si.uri))
		}
		target, err := a.cfg.origin.resolve(linkReset, si.resetTarget, si.uri)
		if err != nil {
			return agents.Failed(a.op(op), err)
		}
		var done bool
		si, done, sent, err = s.reset(ctx, op, si, target, rt, want, deadline)
		if err != nil {
			return err
		}
		if done {
			log.Info("power confirmed", "op", op, "power", string(want), "elapsed", time.Since(start).Round(time.Millisecond))
			return nil
		}
	} else {
		log.Info("already on its way, waiting", "op", op, "power", string(si.power))
	}
	if err := s.waitPower(ctx, op, si.uri, want, deadline, sent); err != nil {
		return err
	}
	log.Info("power confirmed", "op", op, "power", string(want), "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// reset posts the ResetType, handling If-Match, 202 task monitors and
// transient failures. done reports that a re-read already shows want; sent
// that a reset may have reached the BMC. Its errors are classified.
func (s *session) reset(ctx context.Context, op string, si *systemInfo, target, rt string, want schemas.PowerState, deadline time.Time) (_ *systemInfo, done, sent bool, _ error) {
	a := s.a
	log := a.log.With("system", si.uri)
	useEtag := true
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		headers := map[string]string{}
		if useEtag && si.etag != "" {
			headers["If-Match"] = si.etag
		}
		log.Debug("reset", "op", op, "reset_type", rt, "attempt", attempt+1)
		status, hdr, body, err := s.post(ctx, target, map[string]string{"ResetType": rt}, headers)
		if err == nil {
			sent = true
			if status == http.StatusAccepted {
				if loc := hdr.Get("Location"); loc != "" {
					monitor, err := a.cfg.origin.resolve(linkTask, loc, target)
					if err != nil {
						// The BMC took the reset; we do not follow it to
						// another host for the outcome, and do not claim one.
						return si, false, true, agents.Failed(a.op(op), fmt.Errorf("reset accepted, not confirmed: %w", err))
					}
					if err := s.waitTask(ctx, op, monitor, deadline); err != nil {
						return si, false, true, err
					}
				}
			}
			_ = body // 200 bodies (iLO's Base.Success) carry nothing we need
			return si, false, true, nil
		}
		lastErr = err
		if maybeDelivered(err) {
			sent = true
		}
		code := statusOf(err)
		switch {
		case isAuth(err):
			return si, false, sent, agents.AuthFailed(a.op(op), err)
		case code == http.StatusPreconditionFailed:
			// Our view is stale: re-read (the state may already be what we
			// want) and retry with the fresh etag; if the BMC refuses the
			// fresh one too, it rejects If-Match on actions: go without.
			log.Info("etag mismatch, re-reading the system", "op", op)
			if attempt > 0 {
				useEtag = false
			}
		case code == http.StatusConflict:
			// iDRAC: "already off" / "already on"; the re-read tells.
		case transient(ctx, err):
			log.Warn("reset request failed, re-reading before retrying", "op", op, "err", err)
			sleep(ctx, 100*time.Millisecond)
		default:
			return si, false, sent, a.classify(op, err, false)
		}
		fresh, rerr := s.readSystem(ctx, si.uri)
		if rerr != nil {
			if isAuth(rerr) {
				return si, false, sent, agents.AuthFailed(a.op(op), rerr)
			}
			lastErr = rerr
			continue
		}
		if fresh.power == want {
			return fresh, true, sent, nil
		}
		if transitional(fresh.power, want) {
			return fresh, false, sent, nil
		}
		fresh.resetTarget, fresh.allowed, fresh.actionInfo = si.resetTarget, si.allowed, si.actionInfo
		si = fresh
		if code == http.StatusConflict {
			return si, false, sent, agents.Failed(a.op(op), fmt.Errorf("%w (PowerState reads %s)", lastErr, si.power))
		}
	}
	if lastErr == nil {
		lastErr = errors.New("power_timeout expired before the reset was accepted")
		if ctx.Err() != nil {
			lastErr = ctx.Err()
		}
	}
	return si, false, sent, a.classify(op, lastErr, sent)
}

// waitTask polls a task monitor until the task ends or deadline passes.
func (s *session) waitTask(ctx context.Context, op, monitor string, deadline time.Time) error {
	a := s.a
	wait := pollMin
	for {
		body, _, err := s.get(ctx, monitor)
		switch {
		case err == nil:
			// gofish returns 202 and 200 alike: the body says which.
			done, terr := taskOutcome(body)
			if terr != nil && done {
				return agents.Failed(a.op(op), fmt.Errorf("reset %w", terr))
			}
			if done {
				return nil
			}
		case statusOf(err) == http.StatusNotFound || statusOf(err) == http.StatusGone:
			// Some services drop the monitor once the task is over: the
			// read-back decides.
			return nil
		case isAuth(err):
			return agents.AuthFailed(a.op(op), err)
		default:
			a.log.Debug("task monitor poll failed", "monitor", monitor, "err", err)
		}
		if time.Until(deadline) <= 0 {
			return agents.Unknown(a.op(op), fmt.Errorf("reset task %s still running after power_timeout %s", monitor, a.cfg.powerTimeout))
		}
		if !sleep(ctx, min(wait, time.Until(deadline))) {
			return agents.Unknown(a.op(op), fmt.Errorf("waiting for reset task %s: %w", monitor, ctx.Err()))
		}
		wait = min(wait*2, pollMax)
	}
}

// waitPower polls PowerState until it reads want or deadline passes.
// Read-back is the only success: an accepted reset proves nothing.
func (s *session) waitPower(ctx context.Context, op, uri string, want schemas.PowerState, deadline time.Time, sent bool) error {
	a := s.a
	wait := pollMin
	var last schemas.PowerState
	var lastErr error
	for {
		si, err := s.readSystem(ctx, uri)
		if err == nil {
			last, lastErr = si.power, nil
			if si.power == want {
				return nil
			}
		} else {
			if isAuth(err) {
				return agents.AuthFailed(a.op(op), err)
			}
			lastErr = err
		}
		if time.Until(deadline) <= 0 || ctx.Err() != nil {
			break
		}
		sleep(ctx, min(wait, time.Until(deadline)))
		wait = min(wait*2, pollMax)
	}
	why := "power_timeout " + a.cfg.powerTimeout.String() + " expired"
	if ctx.Err() != nil {
		why = ctx.Err().Error()
	}
	switch {
	case lastErr != nil:
		return a.classify(op, fmt.Errorf("%s; last read failed: %w", why, lastErr), sent)
	case transitional(last, want) && sent:
		return agents.Unknown(a.op(op), fmt.Errorf("%s; PowerState still %s", why, last))
	default:
		// Read back in the wrong state: the reset did not take.
		return agents.Failed(a.op(op), fmt.Errorf("%s; PowerState still %s, want %s", why, last, want))
	}
}
