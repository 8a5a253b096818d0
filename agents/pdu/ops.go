package pdu

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gosnmp/gosnmp"

	"github.com/fenced/fenced/agents"
)

const sysObjectIDOID = "1.3.6.1.2.1.1.2.0"

// session is one operation's SNMP conversation with one PDU.
type session struct {
	pdu  *pduAddr
	g    *gosnmp.GoSNMP
	v    *vendor
	nums []int // outlet numbers, parallel to pdu.outlets
}

func (s *session) close() {
	if s.g != nil && s.g.Conn != nil {
		_ = s.g.Conn.Close()
	}
}

func (s *session) outletOp(i int) string {
	return fmt.Sprintf("pdu %s outlet %s", s.pdu, s.pdu.outlets[i])
}

// outletState is one outlet as read back.
type outletState struct {
	op  string // "pdu HOST:PORT outlet N"
	raw int
	on  bool
	off bool
}

// dial opens a session without sending anything.
func (a *Agent) dial(ctx context.Context, p *pduAddr) (*session, error) {
	op := p.op()
	g := &gosnmp.GoSNMP{
		Target:  p.host,
		Port:    p.port,
		Version: a.cfg.version,
		Timeout: a.cfg.timeout,
		Retries: 1,
		Context: ctx,
		MaxOids: gosnmp.MaxOids,
	}
	if a.cfg.version == gosnmp.Version3 {
		auth, err := a.cfg.secretSources.Secret(ctx, "password")
		if err != nil {
			return nil, agents.Failed(op, err)
		}
		priv, err := a.cfg.secretSources.Secret(ctx, "snmp_priv_passwd")
		if err != nil {
			return nil, agents.Failed(op, err)
		}
		usm := &gosnmp.UsmSecurityParameters{UserName: a.cfg.username}
		if a.cfg.secLevel&gosnmp.AuthNoPriv != 0 {
			usm.AuthenticationProtocol, usm.AuthenticationPassphrase = a.cfg.authProt, auth
		}
		if a.cfg.secLevel == gosnmp.AuthPriv {
			usm.PrivacyProtocol, usm.PrivacyPassphrase = a.cfg.privProt, priv
		}
		g.SecurityModel = gosnmp.UserSecurityModel
		g.MsgFlags = a.cfg.secLevel
		g.SecurityParameters = usm
		g.ContextName = a.cfg.contextName
	} else {
		comm, err := a.cfg.secretSources.Secret(ctx, "community")
		if err != nil {
			return nil, agents.Failed(op, err)
		}
		if _, set := a.cfg.secretSources["community"]; !set && comm == "" {
			comm = "private" // fence_apc_snmp's default
		}
		g.Community = comm
	}
	if err := g.Connect(); err != nil {
		return nil, agents.Failed(op, fmt.Errorf("connect: %w", err))
	}
	return &session{pdu: p, g: g}, nil
}

// requestError classifies an SNMP transport error. sent says whether the
// request could have changed the outlet (a SET), which turns a missing
// answer into an unknown outcome.
func requestError(ctx context.Context, op string, sent bool, err error) error {
	if errors.Is(err, gosnmp.ErrUnknownUsername) || errors.Is(err, gosnmp.ErrWrongDigest) ||
		errors.Is(err, gosnmp.ErrDecryption) || errors.Is(err, gosnmp.ErrUnknownSecurityLevel) ||
		strings.Contains(err.Error(), "not authentic") {
		return agents.AuthFailed(op, err)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	} else if strings.Contains(err.Error(), "timeout") {
		// A v1/v2c agent drops requests with a wrong community silently.
		err = fmt.Errorf("no answer: PDU down, unreachable, or credentials refused: %w", err)
	}
	if sent {
		return agents.Unknown(op, err)
	}
	return agents.Failed(op, err)
}

// prepare identifies the PDU family and resolves outlet names.
func (a *Agent) prepare(ctx context.Context, s *session) error {
	op := s.pdu.op()
	s.v = a.cfg.fixed
	key := s.pdu.String()
	if s.v == nil {
		a.mu.Lock()
		s.v = a.detected[key]
		a.mu.Unlock()
	}
	if s.v == nil {
		res, err := s.g.Get([]string{sysObjectIDOID})
		if err != nil {
			return requestError(ctx, op+": get sysObjectID", false, err)
		}
		if err := packetError(res); err != nil {
			return agents.Failed(op+": get sysObjectID", err)
		}
		id, ok := res.Variables[0].Value.(string)
		if !ok || res.Variables[0].Type != gosnmp.ObjectIdentifier {
			return agents.Failed(op+": get sysObjectID", fmt.Errorf("answer is %v, not an OID: set pdu_type", res.Variables[0].Type))
		}
		if s.v = vendorBySysObjectID(id); s.v == nil {
			return agents.Failed(op, fmt.Errorf("sysObjectID %s is not a known PDU family: set pdu_type (one of %s)", id, strings.Join(vendorNames()[1:], ", ")))
		}
		a.mu.Lock()
		a.detected[key] = s.v
		a.mu.Unlock()
		a.log.Debug("pdu family detected", "addr", key, "sysObjectID", id, "pdu_type", s.v.Name)
	}
	s.nums = make([]int, len(s.pdu.outlets))
	var names []string
	for i, o := range s.pdu.outlets {
		if n, err := strconv.Atoi(o); err == nil {
			s.nums[i] = n
			continue
		}
		if names == nil {
			var err error
			if names, err = a.outletNames(ctx, s); err != nil {
				return err
			}
		}
		for j, name := range names {
			if name == o {
				s.nums[i] = j + 1
			}
		}
		if s.nums[i] == 0 {
			return agents.Failed(s.outletOp(i), fmt.Errorf("no outlet is named %q (%d outlets listed)", o, len(names)))
		}
	}
	return nil
}

// outletNames walks the family's outlet name table; index i holds outlet i+1.
func (a *Agent) outletNames(ctx context.Context, s *session) ([]string, error) {
	key := s.pdu.String()
	a.mu.Lock()
	names, ok := a.names[key]
	a.mu.Unlock()
	if ok {
		return names, nil
	}
	op := s.pdu.op() + ": list outlets"
	walk := s.g.BulkWalkAll
	if s.g.Version == gosnmp.Version1 {
		walk = s.g.WalkAll
	}
	pdus, err := walk(s.v.Names)
	if err != nil {
		return nil, requestError(ctx, op, false, err)
	}
	for _, p := range pdus {
		idx := strings.LastIndexByte(p.Name, '.')
		n, err := strconv.Atoi(p.Name[idx+1:])
		if err != nil || n < 1 || n > 4096 {
			return nil, agents.Failed(op, fmt.Errorf("outlet index in %s is not a number from 1 to 4096", p.Name))
		}
		for len(names) < n {
			names = append(names, "")
		}
		if b, ok := p.Value.([]byte); ok {
			names[n-1] = strings.Trim(string(b), "\" ")
		}
	}
	a.mu.Lock()
	a.names[key] = names
	a.mu.Unlock()
	return names, nil
}

func packetError(res *gosnmp.SnmpPacket) error {
	if res.Error != gosnmp.NoError {
		return fmt.Errorf("PDU answered %v (varbind %d)", res.Error, res.ErrorIndex)
	}
	return nil
}

// read gets the state of every outlet of s.
func (s *session) read(ctx context.Context) ([]outletState, error) {
	oids := make([]string, len(s.nums))
	for i, n := range s.nums {
		oids[i] = oid(s.v.Status, n)
	}
	res, err := s.g.Get(oids)
	if err != nil {
		return nil, requestError(ctx, s.pdu.op()+": read", false, err)
	}
	if res.Error != gosnmp.NoError {
		return nil, agents.Failed(s.varbindOp(int(res.ErrorIndex))+": read", fmt.Errorf("PDU answered %v", res.Error))
	}
	if len(res.Variables) != len(oids) {
		return nil, agents.Failed(s.pdu.op()+": read", fmt.Errorf("asked %d variables, got %d", len(oids), len(res.Variables)))
	}
	states := make([]outletState, len(oids))
	for i, v := range res.Variables {
		op := s.outletOp(i)
		switch v.Type {
		case gosnmp.Integer:
		case gosnmp.NoSuchObject, gosnmp.NoSuchInstance, gosnmp.EndOfMibView:
			return nil, agents.Failed(op+": read", fmt.Errorf("no such outlet (%s: %v; is pdu_type %s right?)", oids[i], v.Type, s.v.Name))
		default:
			return nil, agents.Failed(op+": read", fmt.Errorf("%s is %v, not an INTEGER", oids[i], v.Type))
		}
		raw := int(gosnmp.ToBigInt(v.Value).Int64())
		on, off := s.v.state(raw)
		states[i] = outletState{op: op, raw: raw, on: on, off: off}
	}
	return states, nil
}

// varbindOp names the outlet of a 1-based error index, or the PDU.
func (s *session) varbindOp(i int) string {
	if i >= 1 && i <= len(s.pdu.outlets) {
		return s.outletOp(i - 1)
	}
	return s.pdu.op()
}

// set sends cmd to every outlet of s in one request.
func (s *session) set(ctx context.Context, cmd command, what string) error {
	pdus := make([]gosnmp.SnmpPDU, len(s.nums))
	for i, n := range s.nums {
		pdus[i] = gosnmp.SnmpPDU{Name: oid(cmd.OID, n), Type: gosnmp.Integer, Value: cmd.Value}
	}
	res, err := s.g.Set(pdus)
	if err != nil {
		return requestError(ctx, s.pdu.op()+": "+what, true, err)
	}
	if res.Error != gosnmp.NoError {
		// An SNMP SET is applied all or nothing: an error status means
		// no outlet of this request was switched.
		return agents.Failed(s.varbindOp(int(res.ErrorIndex))+": "+what, fmt.Errorf("PDU refused: %v", res.Error))
	}
	return nil
}

// openAll dials every PDU, identifies it and reads its outlets, in
// parallel. Nothing is switched, so every error is a failure.
func (a *Agent) openAll(ctx context.Context) ([]*session, [][]outletState, error) {
	n := len(a.cfg.pdus)
	sessions := make([]*session, n)
	states := make([][]outletState, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range a.cfg.pdus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := a.dial(ctx, p)
			if err == nil {
				if err = a.prepare(ctx, s); err == nil {
					states[i], err = s.read(ctx)
				}
				if err != nil {
					s.close()
				} else {
					sessions[i] = s
				}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := combine("read", errs); err != nil {
		closeAll(sessions)
		return nil, nil, err
	}
	return sessions, states, nil
}

func closeAll(ss []*session) {
	for _, s := range ss {
		if s != nil {
			s.close()
		}
	}
}

// combine merges per-PDU errors into one: outcome unknown if any is.
func combine(op string, errs []error) error {
	var list []error
	for _, e := range errs {
		if e != nil {
			list = append(list, e)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	unknown := false
	for _, e := range list {
		if agents.IsUnknown(e) {
			unknown = true
		}
	}
	return &agents.Error{Op: "pdu " + op, Unknown: unknown, Err: errorList(list)}
}

type errorList []error

func (l errorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (l errorList) Unwrap() []error { return l }

// Status reads every outlet: on if any outlet feeds the target, off only if
// all read off.
func (a *Agent) Status(ctx context.Context) (agents.State, error) {
	sessions, states, err := a.openAll(ctx)
	if err != nil {
		return agents.StateUnknown, err
	}
	closeAll(sessions)
	return summarize(states)
}

func summarize(states [][]outletState) (agents.State, error) {
	var odd []error
	anyOn := false
	for _, ps := range states {
		for _, st := range ps {
			switch {
			case st.on:
				anyOn = true
			case !st.off:
				odd = append(odd, agents.Unknown(st.op, fmt.Errorf("state %d is neither on nor off", st.raw)))
			}
		}
	}
	if anyOn {
		return agents.StateOn, nil
	}
	if len(odd) > 0 {
		return agents.StateUnknown, combine("status", odd)
	}
	return agents.StateOff, nil
}

// Off switches every outlet off and returns nil only when all read back off.
func (a *Agent) Off(ctx context.Context) error { return a.switchAll(ctx, false) }

// On switches every outlet on and confirms by read-back.
func (a *Agent) On(ctx context.Context) error { return a.switchAll(ctx, true) }

// Reboot is off on every outlet, confirmed, then on: the vendors' own
// reboot commands are not used because they cannot be confirmed.
func (a *Agent) Reboot(ctx context.Context) error {
	if err := a.switchAll(ctx, false); err != nil {
		return err
	}
	if err := sleep(ctx, a.cfg.powerWait); err != nil {
		return agents.Failed("pdu reboot: wait before on", err)
	}
	return a.switchAll(ctx, true)
}

func (a *Agent) switchAll(ctx context.Context, on bool) error {
	what := "off"
	if on {
		what = "on"
	}
	start := time.Now()
	// Every PDU must answer before any outlet is switched: half a fence
	// (one feed of a dual-PSU node) leaves the node running.
	sessions, _, err := a.openAll(ctx)
	if err != nil {
		return err
	}
	defer closeAll(sessions)

	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := s.v.Off
			if on {
				cmd = s.v.On
			}
			a.log.Debug("pdu set", "addr", s.pdu.String(), "outlets", strings.Join(s.pdu.outlets, ","), "action", what)
			if errs[i] = s.set(ctx, cmd, what); errs[i] != nil {
				return
			}
			errs[i] = a.await(ctx, s, on, what)
		}()
	}
	wg.Wait()
	if err := combine(what, errs); err != nil {
		return err
	}
	a.log.Info("pdu outlets confirmed", "action", what, "outlets", a.describe(), "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

func (a *Agent) describe() string {
	var parts []string
	for _, p := range a.cfg.pdus {
		for _, o := range p.outlets {
			parts = append(parts, p.String()+"/"+o)
		}
	}
	return strings.Join(parts, ",")
}

// await reads s back until every outlet is in the wanted state, within
// power_timeout. A wrong state at the end is a failure: the PDU accepted the
// command and did not act on it.
func (a *Agent) await(ctx context.Context, s *session, on bool, what string) error {
	if err := sleep(ctx, a.cfg.powerWait); err != nil {
		return agents.Unknown(s.pdu.op()+": "+what+": wait", err)
	}
	deadline := time.Now().Add(a.cfg.powerTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	s.g.Context = ctx
	interval := 50 * time.Millisecond
	for {
		states, err := s.read(ctx)
		if err != nil {
			// The command was accepted: not reading it back leaves the
			// outcome unknown.
			var ae *agents.Error
			if errors.As(err, &ae) {
				ae.Unknown = true
			}
			return err
		}
		var wrong []error
		for _, st := range states {
			if (on && !st.on) || (!on && !st.off) {
				wrong = append(wrong, fmt.Errorf("%s: reads %d, not %s", st.op, st.raw, what))
			}
		}
		if len(wrong) == 0 {
			return nil
		}
		if time.Now().Add(interval).After(deadline) {
			return agents.Failed(s.pdu.op()+": "+what+": read-back", fmt.Errorf("after %s: %w", a.cfg.powerTimeout, errorList(wrong)))
		}
		if err := sleep(ctx, interval); err != nil {
			return agents.Unknown(s.pdu.op()+": "+what+": read-back", err)
		}
		if interval < time.Second {
			interval *= 2
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// List enumerates the outlets of each PDU with their names.
func (a *Agent) List(ctx context.Context) ([]agents.Port, error) {
	var ports []agents.Port
	for _, p := range a.cfg.pdus {
		s, err := a.dial(ctx, p)
		if err != nil {
			return nil, err
		}
		err = a.prepare(ctx, s)
		var names []string
		if err == nil {
			names, err = a.outletNames(ctx, s)
		}
		s.close()
		if err != nil {
			return nil, err
		}
		for i, n := range names {
			id := strconv.Itoa(i + 1)
			if len(a.cfg.pdus) > 1 {
				id = p.String() + "/" + id
			}
			ports = append(ports, agents.Port{ID: id, Alias: n})
		}
	}
	return ports, nil
}

// Monitor checks that every PDU answers with the configured credentials.
func (a *Agent) Monitor(ctx context.Context) error {
	sessions, _, err := a.openAll(ctx)
	closeAll(sessions)
	return err
}
