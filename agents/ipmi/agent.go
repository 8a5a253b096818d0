package ipmi

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/fenced/fenced/agents"
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

// Agent fences one node through its BMC. It is safe for concurrent use:
// each operation opens its own session.
type Agent struct {
	cfg *config
	log *slog.Logger
}

var (
	_ agents.Agent   = (*Agent)(nil)
	_ agents.Monitor = (*Agent)(nil)
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
	return &Agent{cfg: cfg, log: log.With("addr", cfg.addr())}, nil
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

// Monitor checks the BMC answers and accepts our credentials (Get Device ID)
// without touching the chassis.
func (a *Agent) Monitor(ctx context.Context) error {
	return a.withSession(ctx, func(s *session) error {
		if _, err := s.c.GetDeviceID(ctx); err != nil {
			return s.classify(ctx, "get device id", err, false)
		}
		return nil
	})
}

// session is one authenticated BMC session.
type session struct {
	a *Agent
	c *client.Client
}

func (a *Agent) op(what string) string { return "ipmi " + a.cfg.addr() + ": " + what }

// withSession opens a session, runs fn, and always closes the session.
func (a *Agent) withSession(ctx context.Context, fn func(*session) error) error {
	cfg := a.cfg
	password, err := cfg.secrets.Secret(ctx, "password")
	if err != nil {
		return agents.Failed(a.op("password"), err)
	}
	if len(password) > 20 {
		return agents.Failed(a.op("password"), errors.New("longer than 20 bytes, the IPMI maximum"))
	}
	c, err := client.NewClient(cfg.host, cfg.port, cfg.username, password)
	if err != nil {
		return agents.Failed(a.op("client"), errors.New("invalid user name"))
	}
	c.WithTimeout(cfg.commandTimeout).WithRetry(cfg.retries).WithMaxPrivilegeLevel(cfg.privilege)
	if cfg.lanplus {
		c.WithInterface(client.InterfaceLanplus).WithCipherSuiteID(cfg.cipher)
		if len(cfg.kg) > 0 {
			if err := setKG(c, cfg.kg); err != nil {
				return agents.Failed(a.op("kg"), err)
			}
		}
	} else {
		c.WithInterface(client.InterfaceLan)
	}
	s := &session{a: a, c: c}

	start := time.Now()
	loginCtx, cancel := context.WithTimeout(ctx, cfg.loginTimeout)
	err = c.Connect(loginCtx)
	cancel()
	if err != nil {
		// A half-open session is closed too, so the BMC's slot is freed.
		s.close(ctx)
		return s.classify(ctx, "connect", err, false)
	}
	a.log.Debug("ipmi session open", "lanplus", cfg.lanplus, "cipher", int(cfg.cipher), "took", time.Since(start))
	defer s.close(ctx)
	return fn(s)
}

func (s *session) close(ctx context.Context) {
	// The session must end even when ctx is already done.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.a.cfg.commandTimeout)
	defer cancel()
	if err := s.c.Close(ctx); err != nil {
		s.a.log.Debug("ipmi close session", "err", err)
	}
}

// power reads the chassis power state.
func (s *session) power(ctx context.Context) (agents.State, error) {
	res, err := s.c.GetChassisStatus(ctx)
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
	if _, err := s.c.ChassisControl(ctx, control); err != nil {
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
		return agents.AuthFailed(op, clean)
	case !sent && strings.Contains(msg, "ActivateSession failed") && (strings.Contains(msg, "deadline") || strings.Contains(msg, "timeout")):
		// IPMI v1.5 BMCs silently drop an Activate Session whose auth code
		// (the password) is wrong, after answering the challenge: the BMC
		// is there, our credentials are not accepted, no command was sent.
		return agents.AuthFailed(op, fmt.Errorf("no reply to Activate Session after a challenge (IPMI v1.5 BMCs drop requests with a wrong password): %w", clean))
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

// isAuthError recognises authentication failures. go-ipmi flattens its
// connect errors into text (errors.Join under %v), so the typed check is
// backed by the messages its RAKP and v1.5 paths produce.
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
