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
	// basicWhy says why the agent uses Basic auth on a BMC without a
	// session service ("" while it logs in: session.fallBack).
	basicWhy string
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

// authRefused is op's failure on a 401 or 403 (err): the BMC refused our
// credentials (see agents.AuthRefused), in its own words too (the status,
// the message's ID and text; fromGofish removed any secret from them).
func (a *Agent) authRefused(op string, err error) error {
	said := ""
	var he *httpError
	if errors.As(err, &he) {
		said = he.Error()
	}
	return agents.AuthRefused("redfish "+op, a.cfg.addr, a.cfg.username, a.cfg.secret, said)
}

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
			return a.authRefused(name, err)
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
		return a.authRefused(op, err)
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
// bring a system to want. ForceOff cuts power at once; On and ForceOn
// power on. PushPowerButton comes last, for BMCs that offer nothing else:
// it toggles, so it is pressed only from the opposite settled state, never
// sent twice, and believed only by read-back (see setPower).
// GracefulShutdown is never used: it asks the OS, which may be the very
// thing that hangs.
func resetCandidates(want schemas.PowerState) []string {
	if want == schemas.OffPowerState {
		return []string{string(schemas.ForceOffResetType), string(schemas.PushPowerButtonResetType)}
	}
	return []string{string(schemas.OnResetType), string(schemas.ForceOnResetType), string(schemas.PushPowerButtonResetType)}
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

// isToggle reports a ResetType whose effect depends on the state it meets.
func isToggle(rt string) bool { return rt == string(schemas.PushPowerButtonResetType) }

// opposite is the settled state a toggle must start from to reach want.
func opposite(want schemas.PowerState) schemas.PowerState {
	if want == schemas.OffPowerState {
		return schemas.OnPowerState
	}
	return schemas.OffPowerState
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

// cutShutdown says whether an off that finds the system PoweringOff sends
// ForceOff rather than wait. PoweringOff may be the operating system's own
// shutdown, which can hang for minutes or for ever (stuck unmounting the
// shared storage): a fence does not wait on it. Only ForceOff, never the
// power button (a press there would do who knows what); a BMC that
// refuses it during the transition leaves the wait (reset re-reads), and
// one whose PoweringOff was a hard off already just goes on.
func (s *session) cutShutdown(ctx context.Context, si *systemInfo, want schemas.PowerState) bool {
	if want != schemas.OffPowerState || si.power != schemas.PoweringOffPowerState {
		return false
	}
	allowed, err := s.allowedResets(ctx, si)
	if err != nil {
		return false
	}
	rt, err := chooseReset(want, allowed)
	if err != nil || isToggle(rt) {
		return false
	}
	s.a.log.Info("system reads PoweringOff, which may be a shutdown that hangs: forcing the power off", "system", si.uri)
	return true
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
	var w wait
	if !transitional(si.power, want) || s.cutShutdown(ctx, si, want) {
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
		if isToggle(rt) && si.power != opposite(want) {
			// A press from PoweringOn (or Paused) would do who knows
			// what: wait until the system settles.
			if si, err = s.settle(ctx, op, si, want, deadline); err != nil {
				return err
			}
			if si.power == want {
				log.Info("power confirmed", "op", op, "power", string(want), "elapsed", time.Since(start).Round(time.Millisecond))
				return nil
			}
		}
		if isToggle(rt) {
			log.Info("the BMC offers only PushPowerButton for this; pressing it once, the read-back decides", "op", op, "power", string(si.power))
		}
		var done bool
		si, w, done, err = s.reset(ctx, op, si, target, rt, want, deadline)
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
	if err := s.waitPower(ctx, op, si.uri, want, deadline, w); err != nil {
		return err
	}
	log.Info("power confirmed", "op", op, "power", string(want), "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// wait is what a reset leaves for the read-back to wait on.
type wait struct {
	sent    bool   // a reset may have reached the BMC
	pressed bool   // and it was a power button press
	monitor string // the reset's task monitor, "" if none
}

// settle polls PowerState until it reads On or Off (the states a power
// button press is defined from), within deadline; nothing is sent.
func (s *session) settle(ctx context.Context, op string, si *systemInfo, want schemas.PowerState, deadline time.Time) (*systemInfo, error) {
	a := s.a
	a.log.Info("waiting for the system to settle before pressing the power button", "op", op, "system", si.uri, "power", string(si.power))
	poll := pollMin
	for si.power != schemas.OnPowerState && si.power != schemas.OffPowerState {
		if time.Until(deadline) <= 0 || !sleep(ctx, min(poll, time.Until(deadline))) {
			return nil, agents.Failed(a.op(op), fmt.Errorf("PowerState still %s: the BMC offers only PushPowerButton, which is pressed only from %s, and nothing was sent", si.power, opposite(want)))
		}
		poll = min(poll*2, pollMax)
		fresh, err := s.readSystem(ctx, si.uri)
		if err != nil {
			return nil, a.classify(op, err, false)
		}
		fresh.resetTarget, fresh.allowed, fresh.actionInfo = si.resetTarget, si.allowed, si.actionInfo
		si = fresh
	}
	return si, nil
}

// reset posts the ResetType, handling If-Match and transient failures, and
// returns what the read-back waits on (a 202's task monitor). done
// reports that a re-read already shows want. Its errors are classified.
//
// A ForceOff or On may be sent again after a failure: it is idempotent. A
// power button press is sent again only after an answer that says it was
// not carried out (412, 503, 409); one that may have reached the BMC (no
// answer, or a 500) is never repeated, as a second press would undo it.
func (s *session) reset(ctx context.Context, op string, si *systemInfo, target, rt string, want schemas.PowerState, deadline time.Time) (_ *systemInfo, w wait, done bool, _ error) {
	a := s.a
	log := a.log.With("system", si.uri)
	toggle := isToggle(rt)
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
		status, hdr, _, err := s.post(ctx, target, map[string]string{"ResetType": rt}, headers)
		if err == nil {
			// 200 bodies (iLO's Base.Success) carry nothing we need.
			w = wait{sent: true, pressed: toggle}
			if status == http.StatusAccepted {
				if loc := hdr.Get("Location"); loc != "" {
					monitor, err := a.cfg.origin.resolve(linkTask, loc, target)
					if err != nil {
						// The BMC took the reset; we do not follow it to
						// another host for the outcome, and do not claim one.
						return si, w, false, agents.Failed(a.op(op), fmt.Errorf("reset accepted, not confirmed: %w", err))
					}
					w.monitor = monitor
				}
			}
			return si, w, false, nil
		}
		lastErr = err
		if maybeDelivered(err) {
			w.sent = true
		}
		code := statusOf(err)
		switch {
		case isAuth(err):
			return si, w, false, a.authRefused(op, err)
		case toggle && (w.sent || code == http.StatusInternalServerError || code == http.StatusBadGateway || code == http.StatusGatewayTimeout):
			log.Warn("the power button press may have reached the BMC; not pressing again, the read-back decides", "op", op, "err", err)
			return si, wait{sent: true, pressed: true}, false, nil
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
			return si, w, false, a.classify(op, err, false)
		}
		fresh, rerr := s.readSystem(ctx, si.uri)
		if rerr != nil {
			if isAuth(rerr) {
				return si, w, false, a.authRefused(op, rerr)
			}
			lastErr = rerr
			continue
		}
		if fresh.power == want {
			return fresh, w, true, nil
		}
		if transitional(fresh.power, want) {
			return fresh, w, false, nil
		}
		fresh.resetTarget, fresh.allowed, fresh.actionInfo = si.resetTarget, si.allowed, si.actionInfo
		si = fresh
		if code == http.StatusConflict {
			return si, w, false, agents.Failed(a.op(op), fmt.Errorf("%w (PowerState reads %s)", lastErr, si.power))
		}
		if toggle && si.power != opposite(want) {
			return si, w, false, agents.Failed(a.op(op), fmt.Errorf("%w; PowerState now reads %s, so the power button is not pressed", lastErr, si.power))
		}
	}
	if lastErr == nil {
		lastErr = errors.New("power_timeout expired before the reset was accepted")
		if ctx.Err() != nil {
			lastErr = ctx.Err()
		}
	}
	return si, w, false, a.classify(op, lastErr, w.sent)
}

// taskState polls a reset's task monitor once: done once the task is over
// or its monitor is gone; failure says how the task failed. Other poll
// errors are logged and leave the task running: the read-back decides.
func (s *session) taskState(ctx context.Context, monitor string) (done bool, failure, err error) {
	body, _, err := s.get(ctx, monitor)
	switch {
	case err == nil:
		// gofish returns 202 and 200 alike: the body says which.
		done, failure = taskOutcome(body, s.secrets())
		if failure != nil && !done {
			// A body that is not a Task: keep polling the power.
			s.a.log.Debug("task monitor answer not understood", "monitor", monitor, "err", failure)
			return false, nil, nil
		}
		return done, failure, nil
	case statusOf(err) == http.StatusNotFound || statusOf(err) == http.StatusGone:
		// Some services drop the monitor once the task is over.
		return true, nil, nil
	case isAuth(err):
		return false, nil, err
	}
	s.a.log.Debug("task monitor poll failed", "monitor", monitor, "err", err)
	return false, nil, nil
}

// waitPower polls PowerState until it reads want or deadline passes, and
// the reset's task monitor, if any, beside it. Read-back is the only
// success: an accepted reset or a completed task proves nothing, and a
// task still running does not hold up a PowerState that already reads
// want (a BMC's reset task may outlive the power change by far). A task
// that fails is a failure unless PowerState reads want anyway.
func (s *session) waitPower(ctx context.Context, op, uri string, want schemas.PowerState, deadline time.Time, w wait) error {
	a := s.a
	poll := pollMin
	var last schemas.PowerState
	var lastErr, taskErr error
	for {
		si, err := s.readSystem(ctx, uri)
		if err == nil {
			last, lastErr = si.power, nil
			if si.power == want {
				return nil
			}
		} else {
			if isAuth(err) {
				return a.authRefused(op, err)
			}
			lastErr = err
		}
		if taskErr != nil {
			// Read once more after the task failed: PowerState did not
			// come to want.
			return agents.Failed(a.op(op), fmt.Errorf("reset %w; PowerState reads %s", taskErr, readOr(last, lastErr)))
		}
		if w.monitor != "" {
			done, failure, err := s.taskState(ctx, w.monitor)
			if err != nil {
				return agents.AuthFailed(a.op(op), err)
			}
			if done {
				w.monitor, taskErr = "", failure
				if taskErr != nil {
					continue
				}
			}
		}
		if time.Until(deadline) <= 0 || ctx.Err() != nil {
			break
		}
		sleep(ctx, min(poll, time.Until(deadline)))
		poll = min(poll*2, pollMax)
	}
	why := "power_timeout " + a.cfg.powerTimeout.String() + " expired"
	if ctx.Err() != nil {
		why = ctx.Err().Error()
	}
	if w.monitor != "" {
		why += "; reset task " + w.monitor + " still running"
	}
	switch {
	case lastErr != nil:
		return a.classify(op, fmt.Errorf("%s; last read failed: %w", why, lastErr), w.sent)
	case w.monitor != "" && w.sent:
		return agents.Unknown(a.op(op), fmt.Errorf("%s; PowerState still %s", why, last))
	case transitional(last, want) && w.sent:
		return agents.Unknown(a.op(op), fmt.Errorf("%s; PowerState still %s", why, last))
	case w.pressed:
		// The press reached the BMC; an OS may still act on it (or
		// ignore it): nobody knows yet.
		return agents.Unknown(a.op(op), fmt.Errorf("%s; the power button was pressed and PowerState still reads %s, want %s (the OS may be ignoring the press, or still shutting down)", why, last, want))
	default:
		// Read back in the wrong state: the reset did not take.
		return agents.Failed(a.op(op), fmt.Errorf("%s; PowerState still %s, want %s", why, last, want))
	}
}

func readOr(p schemas.PowerState, err error) string {
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return string(p)
}
