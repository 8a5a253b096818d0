package ipmi

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/app"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/keep"
)

func init() {
	agents.Register(Kind())
}

// Kind is the "ipmi" agent kind; the init function registers it with
// agents.Default, tests may register it in their own registry.
func Kind() agents.Kind {
	return agents.Kind{
		Name:        "ipmi",
		Description: "Fence agent for IPMI (chassis power control over RMCP+/lanplus or v1.5 LAN)",
		Params:      params,
		New: func(p agents.Params, log *slog.Logger) (agents.Agent, error) {
			return New(p, log)
		},
	}
}

// Agent fences one node through its BMC. It is safe for concurrent use.
//
// The agent holds at most one authenticated session, opened by the first
// operation that needs one and reused by the next, until Close (a fence is
// then a command and its read-back, not a login each time). Operations on
// the held session take turns; a keep-alive yields to an operation (both
// through agents/keep, as redfish's). When
// the held session does not answer (the BMC restarted, or expired it), the
// operation drops it and runs again on a new one: a held session is never
// trusted for a result. Kept long (the health monitor's agent, see
// agents.Keeper), Check logs in anew on every check and keeps that session
// in place of the old one, so a changed password shows at the next check.
type Agent struct {
	cfg  *config
	log  *slog.Logger
	est  *estimator
	held keep.Slot[*session]

	ledger    atomic.Pointer[agents.SessionLedger] // sessions.go
	slotsFull atomic.Bool                          // the last check found no free slot
}

var (
	_ agents.Agent          = (*Agent)(nil)
	_ agents.Monitor        = (*Agent)(nil)
	_ agents.Closer         = (*Agent)(nil)
	_ agents.Commander      = (*Agent)(nil)
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
		return nil, fmt.Errorf("ipmi: %w", err)
	}
	return &Agent{cfg: cfg, log: log.With("addr", cfg.addr()), est: newEstimator(cfg.commandTimeout), held: keep.NewSlot[*session]()}, nil
}

// Status reads the chassis power state.
func (a *Agent) Status(ctx context.Context) (agents.State, error) {
	var st agents.State
	err := a.withSession(ctx, func(s *session) error {
		var err error
		st, err = s.power(ctx)
		return err
	})
	return st, err
}

// Off powers the chassis down and returns nil only once it reads back off.
func (a *Agent) Off(ctx context.Context) error {
	return a.withSession(ctx, func(s *session) error { return s.setPower(ctx, agents.StateOff) })
}

// On powers the chassis up and returns nil once it reads back on.
func (a *Agent) On(ctx context.Context) error {
	return a.withSession(ctx, func(s *session) error { return s.setPower(ctx, agents.StateOn) })
}

// Command sends power down (or up) without reading the state before or
// after: the stonith engine reads it back. Sending power down to a chassis
// that is already off is harmless (and what a BMC that refuses it means is
// settled by the read-back).
func (a *Agent) Command(ctx context.Context, want agents.State) (time.Duration, error) {
	control, what := chassis.ChassisControlPowerDown, "chassis power off"
	if want == agents.StateOn {
		control, what = chassis.ChassisControlPowerUp, "chassis power on"
	}
	err := a.withSession(ctx, func(s *session) error {
		_, err := s.c.ChassisControl(ctx, control)
		s.answered(ctx, err)
		if err != nil {
			return s.classify(ctx, what, err, true)
		}
		s.a.log.Info("ipmi "+what+" sent", "session_age", time.Since(s.opened).Round(time.Millisecond))
		return nil
	})
	return a.cfg.powerTimeout, err
}

// Reboot is off, confirmed off, then on, in one session. If the node went
// off but did not come back on, the error says so: the node is fenced but
// not restarted.
func (a *Agent) Reboot(ctx context.Context) error {
	return a.withSession(ctx, func(s *session) error {
		if err := s.setPower(ctx, agents.StateOff); err != nil {
			return err
		}
		if err := s.setPower(ctx, agents.StateOn); err != nil {
			return fmt.Errorf("powered off (confirmed), then: %w", err)
		}
		return nil
	})
}

// Monitor checks the BMC answers, accepts our credentials and reads the
// chassis power state (see session.alive), without touching the chassis.
func (a *Agent) Monitor(ctx context.Context) error {
	return a.withSession(ctx, func(s *session) error { return s.alive(ctx) })
}

// Check logs in anew and reads the chassis power state; with keep, the new
// session is held from then on and the previous one logged out (so for the
// time of one login two sessions are open).
func (a *Agent) Check(ctx context.Context, keep bool) error {
	s, err := a.open(ctx)
	if err != nil && sessionsFull(err) && keep && a.Holds() {
		// No slot for a second session: check on the held one rather
		// than give it up (another login may take the freed slot, and
		// the next fence would find none). A changed password shows at
		// the first check that finds a slot free.
		a.log.Info("ipmi BMC has no free session slot for a check on a new session; checking on the held one")
		a.slotsFull.Store(true)
		return a.withSession(ctx, func(s *session) error { return s.alive(ctx) })
	}
	a.slotsFull.Store(false)
	if err != nil && sessionsFull(err) && a.Holds() {
		// Not to keep: the held session is not wanted any more; its slot
		// serves the check.
		a.drop()
		s, err = a.open(ctx)
	}
	if err == nil {
		err = s.alive(ctx)
	}
	if err != nil {
		if s != nil {
			s.closeAfter(ctx, err)
		}
		if !keep {
			a.drop()
		}
		return err
	}
	if !keep {
		s.close(ctx, true)
		a.drop()
		return nil
	}
	s.TryTake()
	a.swapIn(ctx, s, nil)
	s.release()
	return nil
}

// swapIn holds s, which the caller has taken, in place of the held session
// and closes that one through s once nobody uses it: Close Session by its
// ID is answered even when the old session is no longer valid on the BMC,
// and frees its slot at once. owned is the session the caller has taken
// and found dead; if another has been swapped in meanwhile, s is not held
// (release closes it) and only owned is closed.
func (a *Agent) swapIn(ctx context.Context, s, owned *session) {
	old := owned
	if owned == nil {
		var held bool
		old, held = a.held.Swap(s)
		s.private = !held
	} else {
		s.private = !a.held.CompareAndSwap(owned, s)
	}
	if old == nil || old == s {
		return
	}
	closeOld := func() {
		var id uint32
		if old.conn != nil {
			id = old.conn.sessionID()
		}
		old.close(ctx, false)
		if id == 0 {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*a.est.rto())
		defer cancel()
		if _, err := s.c.CloseSession(cctx, &app.CloseSessionRequest{SessionID: id}); err != nil {
			a.log.Debug("ipmi close the replaced session", "session_id", id, "err", err)
		}
	}
	if old != owned {
		// An operation may be using it: let it finish.
		old.Retire(ctx, closeOld)
		return
	}
	closeOld()
}

// KeepAlive reads the chassis power state on the held session (any request
// restarts the BMC's inactivity timer); an operation that needs the session
// cancels it. A held session that does not answer is kept: the check that
// follows replaces it if a new session can be opened (see withSession).
func (a *Agent) KeepAlive(ctx context.Context) error {
	_, err := a.held.KeepAlive(ctx, func(kctx context.Context, s *session) error { return s.alive(kctx) })
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// KeepAliveInterval: below the inactivity timeout after which IPMI v2.0
// BMCs end a session (60 s by default, per the specification).
func (a *Agent) KeepAliveInterval() time.Duration { return 20 * time.Second }

// Holds reports whether the agent holds a session.
func (a *Agent) Holds() bool { return a.held.Holds() }

// Drop logs out the held session, if any.
func (a *Agent) Drop() { a.drop() }

// RoundTrip is the BMC's measured round-trip time and request timeout.
func (a *Agent) RoundTrip() (time.Duration, time.Duration, bool) { return a.est.roundTrip() }

// ReportsAnswers: every reply of the BMC is reported to agents.NoteAnswer.
func (a *Agent) ReportsAnswers() bool { return true }

// Close logs out the held session; the agent opens no other.
func (a *Agent) Close() error {
	if s := a.held.Close(); s != nil {
		s.retire(context.Background())
	}
	return nil
}

// session is one authenticated BMC session. Its Lease lets one operation
// or keep-alive use it at a time; it ends when the session is closed.
type session struct {
	keep.Lease
	a      *Agent
	c      *client.Client
	conn   *timedConn
	opened time.Time
	rec    *agents.SessionRecord // as the ledger knows it (sessions.go)

	private bool // not held: closed when given back
	once    sync.Once
}

func (a *Agent) op(what string) string { return "ipmi " + a.cfg.addr() + ": " + what }

// withSession runs fn on the held session, or on a new one (then held),
// and runs it once more on a new session if the held one did not answer.
func (a *Agent) withSession(ctx context.Context, fn func(*session) error) error {
	s, fresh, err := a.take(ctx)
	if err != nil {
		return err
	}
	err = fn(s)
	s.settle(ctx)
	if err == nil || fresh || ctx.Err() != nil || !(agents.IsUnknown(err) || errors.Is(err, agents.ErrAuth)) {
		s.release()
		return err
	}
	// No answer (or a refusal of the session itself) on a session opened
	// earlier: the BMC may have restarted or dropped it, or it may not
	// answer at all. The operation runs once more on a new session
	// (sending off a second time is harmless, and only the read-back
	// decides), which then replaces the held one. If no new session can be
	// opened either, the held one is kept: the BMC may still know it when
	// it answers again, and a session given up is a slot of the BMC's few
	// taken until it expires.
	a.log.Info("ipmi held session failed; retrying on a new one", "session_age", time.Since(s.opened).Round(time.Millisecond), "err", err)
	agents.NoteStep(ctx, agents.StepSession)
	s2, err2 := a.open(ctx)
	agents.NoteStep(ctx, agents.StepCommand)
	if err2 != nil {
		s.release()
		return fmt.Errorf("%w (after the held session failed: %v)", err2, err)
	}
	s2.TryTake()
	a.swapIn(ctx, s2, s)
	s.release()
	defer s2.release()
	defer s2.settle(ctx)
	return fn(s2)
}

// settle ends an operation on s: if its caller gave up (ctx ended), the
// request it left outstanding is abandoned, never resent (a power command
// must not act after its fence was recorded as not done).
func (s *session) settle(ctx context.Context) {
	if ctx.Err() != nil && s.conn != nil {
		s.conn.abandon()
	}
}

// take returns the held session, taken for one operation (a keep-alive on
// it is cancelled, another operation waited for), or a new session, held
// from then on unless the agent holds another by then. fresh reports a
// new session; private one that is not held (release closes it).
func (a *Agent) take(ctx context.Context) (s *session, fresh bool, err error) {
	s, ok, err := a.held.Take(ctx)
	if err != nil {
		return nil, false, agents.Failed(a.op("session"), fmt.Errorf("waiting for the session: %w", err))
	}
	if ok {
		return s, false, nil
	}
	agents.NoteStep(ctx, agents.StepSession)
	s, err = a.open(ctx)
	if err != nil {
		return nil, false, err
	}
	agents.NoteStep(ctx, agents.StepCommand)
	s.TryTake() // new: nobody else has it
	s.private = !a.held.CompareAndSwap(nil, s)
	return s, true, nil
}

// drop forgets the held session and logs it out once no operation uses it.
func (a *Agent) drop() {
	if s := a.held.Drop(); s != nil {
		s.retire(context.Background())
	}
}

// open logs in. The login may take longer than login_timeout when the
// BMC's measured latency needs it (six round trips at the request
// timeout), and its budget follows what the login itself measures: a cold
// contact with a BMC slower than command_timeout learns it from the first
// answer and keeps going, rather than running out of time and starting
// over (at 900 ms each way that cost 3 s of a takeover, at 2.5 s 6 s).
// When the first try failed otherwise and taught the agent that the BMC
// is slower than it knew, it tries once more.
func (a *Agent) open(ctx context.Context) (*session, error) {
	for attempt := 0; ; attempt++ {
		before := a.est.rto()
		s, err := a.login(ctx, a.loginBudget)
		if err == nil {
			return s, nil
		}
		if attempt == 0 && ctx.Err() == nil && !errors.Is(err, agents.ErrAuth) && a.est.rto() > before*3/2 {
			a.log.Info("ipmi BMC slower than known; logging in again with a longer budget", "timeout", a.est.rto())
			continue
		}
		return nil, err
	}
}

// maxLogin bounds a login however slow the BMC is.
const maxLogin = time.Minute

// loginBudget is how long a login may take with what the agent knows of
// the BMC now.
func (a *Agent) loginBudget() time.Duration {
	return min(max(a.cfg.loginTimeout, 6*a.est.rto()), maxLogin)
}

func (a *Agent) login(ctx context.Context, budget func() time.Duration) (*session, error) {
	cfg := a.cfg
	password, err := cfg.secrets.Secret(ctx, "password")
	if err != nil {
		return nil, agents.Failed(a.op("password"), err)
	}
	if len(password) > 20 {
		return nil, agents.Failed(a.op("password"), errors.New("longer than 20 bytes, the IPMI maximum"))
	}
	c, err := client.NewClient(cfg.host, cfg.port, cfg.username, password)
	if err != nil {
		return nil, agents.Failed(a.op("client"), errors.New("invalid user name"))
	}
	s := &session{a: a, c: c}
	s.Wake = s.wake
	// go-ipmi neither resends nor times out on its own: the session's
	// connection does, at the BMC's pace (transport.go), and it refuses
	// every reply that does not prove it comes from the BMC (integrity.go).
	addr := net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port))
	g := newGuard15(a.log, addr, password)
	if cfg.lanplus {
		g = newGuard(a.log, addr, cfg.username, password, cfg.kg)
	}
	c.WithTimeout(noDeadline).WithRetry(0).WithMaxPrivilegeLevel(cfg.privilege).
		WithUDPProxy(dialer{est: a.est, retries: cfg.retries, guard: g, made: func(tc *timedConn) { s.conn = tc }})
	if cfg.lanplus {
		c.WithInterface(client.InterfaceLanplus).WithCipherSuiteID(cfg.cipher)
		if len(cfg.kg) > 0 {
			if err := setKG(c, cfg.kg); err != nil {
				return nil, agents.Failed(a.op("kg"), err)
			}
		}
	} else {
		c.WithInterface(client.InterfaceLan)
	}

	start := time.Now()
	loginCtx, cancel, spent := withBudget(ctx, start, budget)
	err = c.Connect(loginCtx)
	timedOut, allowed := spent()
	cancel()
	if err != nil && g != nil && g.refusal() != nil {
		// The BMC answered with weaker algorithms than asked for, or
		// without proving it knows the password: refused, whatever go-ipmi
		// made of it (it flattens its login errors into text).
		agents.NoteAnswer(ctx)
		s.close(ctx, false) // no command goes out under what was refused
		a.log.Warn("ipmi login refused", "addr", cfg.host, "cipher", int(cfg.cipher), "err", g.refusal())
		return nil, agents.Failed(a.op("connect"), g.refusal())
	}
	if err != nil && g != nil {
		switch st := g.openRefused(); st {
		case types.RmcpStatusCodeInvalidAuthAlg, types.RmcpStatusCodeInvalidIntegrityAlg, types.RmcpStatusCodeNoMatchingAuthPayload,
			types.RmcpStatusCodeNoMatchingIntegrityPayload, types.RmcpStatusCodeInvalidConfidentAlg, types.RmcpStatusCodeNoCipherSuiteMatch:
			// A configuration problem, not an unreachable BMC: it answered.
			agents.NoteAnswer(ctx)
			s.close(ctx, false)
			return nil, agents.Failed(a.op("connect"), fmt.Errorf("the BMC does not offer cipher suite %d (it answered %q): set cipher to a suite it offers (17 or 3)", int(cfg.cipher), st.String()))
		}
	}
	if err != nil {
		if isAuthError(err, err.Error()) {
			agents.NoteAnswer(ctx)
		}
		// A half-open session is closed too, so the BMC's slot is freed
		// (if the BMC answers at all).
		s.close(ctx, isAuthError(err, err.Error()))
		if timedOut && ctx.Err() == nil {
			err = fmt.Errorf("login not done within %v: %w", allowed.Round(time.Millisecond), err)
		}
		return nil, s.classify(ctx, "connect", err, false)
	}
	agents.NoteAnswer(ctx)
	s.opened = time.Now()
	s.recordOpened()
	a.log.Debug("ipmi session open", "lanplus", cfg.lanplus, "cipher", int(cfg.cipher), "took", time.Since(start))
	return s, nil
}

// wake ends a wait left on the socket by an exchange nobody waits for any
// more (go-ipmi's own keep-alive, or one given up), so that the taker's
// requests go out at once. It is the session's Lease.Wake.
func (s *session) wake() {
	if s.conn != nil {
		s.conn.interrupt()
	}
}

// release gives s back after use; a private session is closed.
func (s *session) release() {
	if s.private {
		s.close(context.Background(), true)
	}
	s.Give()
}

// retire waits (within ctx) until no operation uses s, then logs it out.
func (s *session) retire(ctx context.Context) {
	s.Retire(ctx, func() { s.close(ctx, true) })
}

// close ends the session, once. graceful sends Close Session (bounded by a
// few request timeouts); otherwise the socket is closed at once and the
// BMC expires the session (it did not answer anyway).
func (s *session) close(ctx context.Context, graceful bool) {
	s.End()
	s.once.Do(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.a.cfg.commandTimeout, s.a.est.rto()*3))
		defer cancel()
		if !graceful {
			if s.conn != nil {
				s.conn.UDPConn.Close()
			}
			cancel()
		} else {
			s.wake()
		}
		if err := s.c.Close(cctx); err != nil {
			s.a.log.Debug("ipmi close session", "err", err)
		}
		s.recordClosed()
	})
}

// closeAfter closes s after err: gracefully if the BMC answers.
func (s *session) closeAfter(ctx context.Context, err error) {
	s.close(ctx, err == nil || !agents.IsUnknown(err))
}

// answered reports a reply of the BMC (err nil or an IPMI refusal).
func (s *session) answered(ctx context.Context, err error) {
	var rerr *types.ResponseError
	if err == nil || errors.As(err, &rerr) {
		agents.NoteAnswer(ctx)
	}
}

// alive is the request of a monitor, a device check and a keep-alive: Get
// Chassis Status, the read every fence's read-back depends on, so a check
// that passes shows a fence could be confirmed (fence_ipmilan's monitor is
// the same read). Not Get Device ID: a fence does not need it, and BMCs
// get it wrong (pyghmi, under OpenStack VirtualBMC, answers 14 bytes where
// go-ipmi wants 11 or 15), which made every check of such a BMC fail.
func (s *session) alive(ctx context.Context) error {
	_, err := s.power(ctx)
	return err
}

// power reads the chassis power state.
func (s *session) power(ctx context.Context) (agents.State, error) {
	res, err := s.c.GetChassisStatus(ctx)
	s.answered(ctx, err)
	if err != nil {
		return agents.StateUnknown, s.classify(ctx, "get chassis status", err, false)
	}
	if res.PowerIsOn {
		return agents.StateOn, nil
	}
	return agents.StateOff, nil
}

// setPower drives the chassis to want and polls until it reads back so.
func (s *session) setPower(ctx context.Context, want agents.State) error {
	cur, err := s.power(ctx)
	if err != nil {
		return err
	}
	if cur == want {
		s.a.log.Info("ipmi power already "+want.String(), "state", want.String())
		return nil
	}
	control := chassis.ChassisControlPowerDown
	if want == agents.StateOn {
		control = chassis.ChassisControlPowerUp
	}
	what := "chassis power " + want.String()
	start := time.Now()
	_, err = s.c.ChassisControl(ctx, control)
	s.answered(ctx, err)
	if err != nil {
		// No answer to the command itself: it may have been carried out.
		return s.classify(ctx, what, err, true)
	}
	// The command was accepted; success needs the state read back, because
	// BMCs acknowledge before the power actually changes (ipmi_sim reads on
	// for up to a second after power-off).
	deadline := time.Now().Add(s.a.cfg.powerTimeout)
	for {
		cur, err = s.power(ctx)
		if err == nil && cur == want {
			s.a.log.Info("ipmi power "+want.String()+" confirmed", "took", time.Since(start))
			return nil
		}
		if err != nil && (!agents.IsUnknown(err) || ctx.Err() != nil) {
			// Command sent: whatever stopped us, the outcome is unknown.
			return agents.Unknown(s.a.op(what), fmt.Errorf("sent, then reading back: %w", err))
		}
		if time.Now().After(deadline) {
			if err != nil {
				return agents.Unknown(s.a.op(what), fmt.Errorf("sent, no read-back within power_timeout %v: %w", s.a.cfg.powerTimeout, err))
			}
			return agents.Failed(s.a.op(what), fmt.Errorf("accepted, but still reads %s after power_timeout %v", cur, s.a.cfg.powerTimeout))
		}
		select {
		case <-ctx.Done():
			return agents.Unknown(s.a.op(what), fmt.Errorf("sent, read-back interrupted: %w", ctx.Err()))
		case <-time.After(s.a.cfg.pollInterval):
		}
	}
}

// classify turns a go-ipmi error into a failed, auth-failed or
// outcome-unknown agent error. sent says whether a state-changing command
// may have reached the BMC.
func (s *session) classify(ctx context.Context, what string, err error, sent bool) error {
	op := s.a.op(what)
	msg := sanitize(err.Error(), s)
	clean := errors.New(msg)
	var rerr *types.ResponseError
	var serr *types.RmcpStatusError
	switch {
	case isAuthError(err, msg):
		// The BMC's own reason when it gave one (an RMCP+ status: an
		// unknown user, a role refused); a code that does not verify is a
		// wrong password, said by the hint alone.
		return agents.AuthRefused("ipmi "+what, s.a.cfg.addr(), s.a.cfg.username, s.a.cfg.secrets, bmcReason(err, msg))
	case !sent && strings.Contains(msg, "ActivateSession failed") && (strings.Contains(msg, "deadline") || strings.Contains(msg, "timeout") || strings.Contains(msg, errNoReply.Error())):
		// IPMI v1.5 BMCs silently drop an Activate Session whose auth code
		// (the password) is wrong, after answering the challenge: the BMC
		// is there, our credentials are not accepted, no command was sent.
		return agents.AuthFailed(op, fmt.Errorf("no reply to Activate Session after a challenge (IPMI v1.5 BMCs drop requests with a wrong password): %w", clean))
	case sessionsFull(err) && !sent:
		return agents.Failed(op, fmt.Errorf("the BMC has no free session slot (every one is in use): %w", clean))
	case errors.As(err, &rerr) && !sent:
		// The BMC answered with a completion code: it refused.
		return agents.Failed(op, clean)
	case errors.As(err, &rerr):
		return agents.Failed(op, fmt.Errorf("refused: %w", clean))
	case errors.As(err, &serr):
		return agents.Failed(op, clean)
	case ctx.Err() != nil:
		return agents.Unknown(op, fmt.Errorf("%w (%v)", ctx.Err(), clean))
	}
	// No answer (timeout, refused port, dropped reply): we cannot tell
	// what the BMC did, nor what state the node is in.
	return agents.Unknown(op, clean)
}

// sessionsFull recognises a BMC refusing a new session because its
// session table is full (RMCP+ status 1; go-ipmi flattens it into text).
func sessionsFull(err error) bool {
	var serr *types.RmcpStatusError
	if errors.As(err, &serr) && serr.StatusCode() == types.RmcpStatusCodeNoResToCreateSess {
		return true
	}
	return strings.Contains(err.Error(), "Insufficient resources to create a session")
}

// isAuthError recognises authentication failures. go-ipmi flattens its
// connect errors into text (errors.Join under %v), so the typed check is
// backed by the messages its RAKP and v1.5 paths produce.
// bmcReason is the BMC's own reason for refusing a session, quoted, when
// it gave one: an RMCP+ status (from go-ipmi's error, or named in its
// text); "" for a code that does not verify (a wrong password).
func bmcReason(err error, msg string) string {
	var serr *types.RmcpStatusError
	if errors.As(err, &serr) {
		return fmt.Sprintf("%q", serr.StatusCode().String())
	}
	m := strings.ToLower(msg)
	for _, c := range []types.RmcpStatusCode{types.RmcpStatusCodeUnauthorizedName, types.RmcpStatusCodeInvalidRole,
		types.RmcpStatusCodeUnauthorizedRoleOfPriLevel, types.RmcpStatusCodeInvalidIntegrityCheckValue} {
		if strings.Contains(m, strings.ToLower(c.String())) {
			return fmt.Sprintf("%q", c.String())
		}
	}
	return ""
}

func isAuthError(err error, msg string) bool {
	if errors.Is(err, client.ErrRAKPAuthentication) {
		return true
	}
	var serr *types.RmcpStatusError
	if errors.As(err, &serr) {
		switch serr.StatusCode() {
		case types.RmcpStatusCodeUnauthorizedName, types.RmcpStatusCodeInvalidIntegrityCheckValue,
			types.RmcpStatusCodeUnauthorizedRoleOfPriLevel, types.RmcpStatusCodeInvalidRole:
			return true
		}
	}
	m := strings.ToLower(msg)
	for _, s := range []string{
		"rakp authentication failed", "authentication code mismatch",
		"unauthorized name", "invalid integrity check value", "unauthorized role",
		"invalid user name", "null user name", "invalid session id in request",
		"authcode", "auth code",
	} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// sanitize keeps secrets out of error text: go-ipmi's messages do not
// contain the password today, but an error must never leak it tomorrow.
func sanitize(msg string, s *session) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if p := s.c.Password; len(p) >= 3 {
		msg = strings.ReplaceAll(msg, p, "***")
	}
	if kg := s.a.cfg.kg; len(kg) > 0 {
		msg = strings.ReplaceAll(msg, hex.EncodeToString(kg), "***")
	}
	return msg
}

// setKG installs the BMC key for two-key logins. go-ipmi v0.9.1 implements
// Kg in its key derivation but has no setter, so the unexported field is
// written directly; TestKG against the reference BMC (which has WithKG)
// catches a change of layout when go-ipmi is upgraded.
func setKG(c *client.Client, kg []byte) error {
	v := reflect.ValueOf(c).Elem().FieldByName("session")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return errors.New("this go-ipmi version has no session to hold a Kg key")
	}
	f := v.Elem().FieldByName("v20")
	if f.IsValid() {
		f = f.FieldByName("bmcKey")
	}
	if !f.IsValid() || f.Type() != reflect.TypeOf([]byte(nil)) {
		return errors.New("this go-ipmi version has no Kg key field")
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().SetBytes(append([]byte(nil), kg...))
	return nil
}
