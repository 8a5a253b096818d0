// Package san is the fabric-zoning fence agent: it fences a node by cutting
// its HBA ports (WWPNs) out of the Fibre Channel fabric's zones, so it can no
// longer reach the shared storage even while it still runs.
//
// It drives Brocade Fabric OS switches through the FOS REST API (RESTCONF,
// brocade-zone module). Off removes the target's members from every zone of
// the defined configuration, records them in record zones on the switch
// (see plan.go), enables the configuration with the checksum read before
// the change, and succeeds only when the effective configuration read back
// no longer contains any of the target's WWPNs. On restores exactly the
// recorded members and confirms they are effective again. A checksum
// mismatch (another administrator committed in between) is retried from a
// fresh read a bounded number of times, then reported; it is never lost.
//
// Cisco MDS (NX-API) is not implemented: fabric=cisco is refused.
package san

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/agents"
)

func init() { agents.Register(Kind) }

// Defaults.
const (
	DefaultZoningTimeout   = 30 * time.Second
	DefaultConflictRetries = 3
	pollInterval           = 100 * time.Millisecond
)

// Kind is the san agent's registration.
var Kind = agents.Kind{
	Name:        "san",
	Description: "Fence by Fibre Channel zoning: cut the node's WWPNs out of the fabric's zones (Brocade FOS REST)",
	VendorURL:   "https://www.broadcom.com",
	Params:      params,
	New:         newAgent,
}

var params = []agents.Param{
	// ip, username and fabric take the first of their names given a
	// value: an empty ip leaves ipaddr to count (as it always has here).
	{Name: "ip", Description: "Switch address (IP or host name)", Type: "string", Required: true, Aliases: []string{"ipaddr"}, Precedence: agents.FirstNonEmpty},
	{Name: "ipport", Description: "Switch REST port (default 443 with ssl, 80 without)", Type: "integer"},
	{Name: "ssl", Description: "Use HTTPS", Type: "boolean", Default: "1"},
	{Name: "ssl_insecure", Description: "Do not verify the switch's TLS certificate", Type: "boolean", Default: "0"},
	{Name: "ca_file", Description: "PEM file of CA certificates to verify the switch with", Type: "string"},
	{Name: "username", Description: "Switch user (needs zoning admin rights)", Type: "string", Required: true, Aliases: []string{"login"}, Precedence: agents.FirstNonEmpty},
	{Name: "password", Description: "Switch password (or password_file, password_script)", Type: "string", Required: true, Secret: true, Aliases: []string{"passwd"}},
	{Name: "fabric", Description: "Switch family: brocade", Type: "string", Default: "brocade", Aliases: []string{"vendor"}, Precedence: agents.FirstNonEmpty},
	{Name: "vfid", Description: "Virtual fabric ID (FOS vf-id) on a VF-enabled switch", Type: "integer"},
	{Name: "zoning_timeout", Description: "Seconds to wait for the effective configuration to show the change", Type: "second", Default: "30"},
	{Name: "conflict_retries", Description: "How often to retry after a checksum mismatch (another admin changed the zoning)", Type: "integer", Default: "3"},
}

type config struct {
	host      string
	base      string // scheme://host:port
	user      string
	vfid      int
	target    *target
	timeout   time.Duration
	retries   int
	tlsConfig *tls.Config
}

// Agent fences one target through one switch. Safe for concurrent use: each
// operation uses its own REST session.
type Agent struct {
	cfg    config
	params agents.Params // for the password, resolved per operation
	hc     *http.Client
	log    *slog.Logger
}

func newAgent(p agents.Params, log *slog.Logger) (agents.Agent, error) {
	return New(p, log)
}

// New validates p (every problem at once) and builds the agent without
// touching the network.
func New(p agents.Params, log *slog.Logger) (*Agent, error) {
	p, errs := agents.Resolve(p, params)
	var c config
	c.host = strings.TrimSpace(p["ip"])
	if _, given := p["ip"]; given && c.host == "" {
		errs = append(errs, fmt.Errorf("parameter ip: empty"))
	}
	useTLS, err := p.Bool("ssl", true)
	errs = appendErr(errs, err)
	insecure, err := p.Bool("ssl_insecure", false)
	errs = appendErr(errs, err)
	port, err := p.Int("ipport", 0)
	errs = appendErr(errs, err)
	if port == 0 {
		port = 80
		if useTLS {
			port = 443
		}
	}
	if port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("parameter ipport: %d is not a TCP port", port))
	}
	c.user = p["username"]
	switch f := strings.ToLower(p.String("fabric", "brocade")); f {
	case "brocade":
	case "cisco":
		errs = append(errs, fmt.Errorf("parameter fabric: cisco (MDS NX-API) is not implemented yet; only brocade"))
	default:
		errs = append(errs, fmt.Errorf("parameter fabric: %q is not brocade", f))
	}
	c.vfid, err = p.Int("vfid", -1)
	errs = appendErr(errs, err)
	if c.vfid != -1 && (c.vfid < 1 || c.vfid > 128) {
		errs = append(errs, fmt.Errorf("parameter vfid: %d is not a virtual fabric ID (1-128)", c.vfid))
	}
	c.timeout, err = p.Seconds("zoning_timeout", DefaultZoningTimeout)
	errs = appendErr(errs, err)
	if err == nil && c.timeout <= 0 {
		errs = append(errs, fmt.Errorf("parameter zoning_timeout: must be > 0"))
	}
	c.retries, err = p.Int("conflict_retries", DefaultConflictRetries)
	errs = appendErr(errs, err)
	if c.retries < 0 || c.retries > 100 {
		errs = append(errs, fmt.Errorf("parameter conflict_retries: %d is not in 0-100", c.retries))
	}
	if plug, ok := p["plug"]; !ok || strings.TrimSpace(plug) == "" {
		errs = append(errs, fmt.Errorf("parameter plug: required (the node's WWPNs, comma-separated, or an alias name)"))
	} else if c.target, err = parsePlug(plug); err != nil {
		errs = append(errs, err)
	}
	if useTLS {
		c.tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // only when the admin asks for ssl_insecure
		if f := p.String("ca_file", ""); f != "" {
			pem, err := os.ReadFile(f)
			pool := x509.NewCertPool()
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("parameter ca_file: %w", err))
			case !pool.AppendCertsFromPEM(pem):
				errs = append(errs, fmt.Errorf("parameter ca_file: %s holds no PEM certificate", f))
			default:
				c.tlsConfig.RootCAs = pool
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("san: %w", errors.Join(errs...))
	}
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	c.base = scheme + "://" + net.JoinHostPort(c.host, strconv.Itoa(port))
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		TLSClientConfig:     c.tlsConfig,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Agent{
		cfg:    c,
		params: p,
		hc:     &http.Client{Transport: tr, Timeout: 60 * time.Second},
		log:    log.With("addr", net.JoinHostPort(c.host, strconv.Itoa(port)), "plug", c.target.plug),
	}, nil
}

func appendErr(errs []error, err error) []error {
	if err != nil {
		return append(errs, err)
	}
	return errs
}

// Close releases idle connections.
func (a *Agent) Close() error {
	a.hc.CloseIdleConnections()
	return nil
}

func (a *Agent) op(what string) string {
	return "san " + strings.TrimPrefix(strings.TrimPrefix(a.cfg.base, "https://"), "http://") + ": " + what
}

// session logs in; errors are classified: a refused login is an
// authentication failure, anything else a failure (nothing was changed).
func (a *Agent) session(ctx context.Context, what string) (*fosSession, func(), error) {
	pass, err := a.params.Secret(ctx, "password")
	if err != nil {
		return nil, nil, agents.Failed(a.op(what), err)
	}
	s, err := login(ctx, a.hc, a.cfg.base, a.cfg.vfid, a.cfg.user, pass)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) && (he.status == http.StatusUnauthorized || he.status == http.StatusForbidden) {
			return nil, nil, agents.AuthFailed(a.op(what), fmt.Errorf("login as %s: credentials rejected: %w", a.cfg.user, err))
		}
		return nil, nil, agents.Failed(a.op(what), fmt.Errorf("login: %w", err))
	}
	closeFn := func() {
		// Logging out also aborts a transaction a failed step left open.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.logout(ctx); err != nil {
			a.log.Warn("logout failed", "err", err)
		}
	}
	return s, closeFn, nil
}

// Off cuts the target out of the fabric and confirms it by reading the
// effective configuration back.
func (a *Agent) Off(ctx context.Context) error {
	const what = "off"
	s, done, err := a.session(ctx, what)
	if err != nil {
		return err
	}
	defer done()
	var wwns map[string]bool
	for attempt := 0; ; attempt++ {
		eff, err := s.effective(ctx)
		if err != nil {
			return agents.Failed(a.op(what), err)
		}
		if eff.cfgName == "" {
			return agents.Failed(a.op(what), fmt.Errorf("no zone configuration is enabled on the fabric, so zoning cannot cut the target off"))
		}
		db, err := s.defined(ctx)
		if err != nil {
			return agents.Failed(a.op(what), err)
		}
		if wwns, err = a.cfg.target.resolve(db); err != nil {
			return agents.Failed(a.op(what), err)
		}
		removals, records, err := planOff(db, a.cfg.target, wwns)
		if err != nil {
			return agents.Failed(a.op(what), err)
		}
		if len(removals) == 0 && len(present(eff, wwns)) == 0 {
			a.log.Info("already cut out of the fabric", "cfg", eff.cfgName)
			return nil
		}
		// Record first, then remove: both are in our transaction and commit
		// together, so a removal is never committed without its record.
		if err := s.addMembers(ctx, records); err != nil {
			return a.abortFailed(ctx, s, what, fmt.Errorf("record removed members: %w", err))
		}
		if err := s.removeMembers(ctx, removals); err != nil {
			return a.abortFailed(ctx, s, what, fmt.Errorf("remove members: %w", err))
		}
		done, err := a.enable(ctx, s, what, eff, attempt)
		if err != nil {
			return err
		}
		if done {
			a.log.Info("zoning change enabled", "cfg", eff.cfgName, "zones", len(removals), "attempt", attempt+1)
			break
		}
	}
	return a.waitEffective(ctx, s, what, func(e *effective) (bool, string) {
		if openAccess(e) {
			return false, "no cfg is enabled and default zoning gives all access"
		}
		if p := present(e, wwns); len(p) > 0 {
			return false, fmt.Sprintf("effective configuration %s still contains %s", e.cfgName, strings.Join(p, ","))
		}
		return true, ""
	})
}

// enable commits our transaction and enables eff's cfg. done is true once
// the switch accepted it; an error is final (outcome unknown if the enable
// may have been applied); neither means a checksum conflict was waited out
// and the caller retries from a fresh read.
func (a *Agent) enable(ctx context.Context, s *fosSession, what string, eff *effective, attempt int) (done bool, err error) {
	err = s.enable(ctx, eff.cfgName, eff.checksum)
	switch {
	case err == nil:
		return true, nil
	case !conflict(err) && sent(err):
		return false, agents.Unknown(a.op(what), fmt.Errorf("enable %s: %w", eff.cfgName, err))
	case !conflict(err):
		return false, a.abortFailed(ctx, s, what, fmt.Errorf("enable %s: %w", eff.cfgName, err))
	}
	return false, a.conflictWait(ctx, s, what, attempt, err)
}

// abortFailed aborts the open transaction (best effort; logout would too)
// and returns err as a failure: nothing was committed.
func (a *Agent) abortFailed(ctx context.Context, s *fosSession, what string, err error) error {
	if aerr := s.abort(ctx); aerr != nil {
		a.log.Debug("abort transaction", "err", aerr)
	}
	return agents.Failed(a.op(what), err)
}

// conflictWait handles a checksum mismatch: the switch refused our commit
// because someone else committed first. Retry from a fresh read a bounded
// number of times; then report it, never drop it.
func (a *Agent) conflictWait(ctx context.Context, s *fosSession, what string, attempt int, err error) error {
	if aerr := s.abort(ctx); aerr != nil {
		a.log.Debug("abort transaction after conflict", "err", aerr)
	}
	if attempt >= a.cfg.retries {
		return agents.Failed(a.op(what), fmt.Errorf("zoning changed concurrently on every one of %d attempts (checksum mismatch); nothing of ours was committed: %w", attempt+1, err))
	}
	a.log.Warn("zoning changed concurrently; retrying from a fresh read", "attempt", attempt+1, "err", err)
	t := time.NewTimer(time.Duration(attempt+1) * 50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return agents.Failed(a.op(what), fmt.Errorf("after a checksum mismatch: %w", ctx.Err()))
	case <-t.C:
		return nil
	}
}

// waitEffective polls the effective configuration until ok, for at most
// zoning_timeout. Only the read-back counts: an enable the switch accepted
// but did not apply is a failure.
func (a *Agent) waitEffective(ctx context.Context, s *fosSession, what string, ok func(*effective) (bool, string)) error {
	deadline := time.Now().Add(a.cfg.timeout)
	var last string
	for {
		e, err := s.effective(ctx)
		if err != nil {
			last = "read effective configuration: " + err.Error()
		} else if good, why := ok(e); good {
			return nil
		} else {
			last = why
		}
		if !time.Now().Before(deadline) {
			return agents.Failed(a.op(what), fmt.Errorf("enable accepted, but after %s: %s", a.cfg.timeout, last))
		}
		t := time.NewTimer(min(pollInterval, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			// The enable was accepted; whether it took effect is unknown.
			return agents.Unknown(a.op(what), fmt.Errorf("waiting for the effective configuration: %w (last: %s)", ctx.Err(), last))
		case <-t.C:
		}
	}
}

// On restores exactly the members Off recorded and confirms they are
// effective again.
func (a *Agent) On(ctx context.Context) error {
	const what = "on"
	s, done, err := a.session(ctx, what)
	if err != nil {
		return err
	}
	defer done()
	var expect map[string]bool
	var orphans []string
	for attempt := 0; ; attempt++ {
		eff, err := s.effective(ctx)
		if err != nil {
			return agents.Failed(a.op(what), err)
		}
		db, err := s.defined(ctx)
		if err != nil {
			return agents.Failed(a.op(what), err)
		}
		wwns, err := a.cfg.target.resolve(db)
		if err != nil {
			return agents.Failed(a.op(what), err)
		}
		var restores []change
		var deletes []string
		restores, deletes, orphans = planOn(db, a.cfg.target)
		if len(restores) == 0 && len(deletes) == 0 {
			if len(orphans) > 0 {
				return agents.Failed(a.op(what), fmt.Errorf("record zones %s name zones that no longer exist; restore their members by hand", strings.Join(orphans, ",")))
			}
			if p := present(eff, wwns); len(p) == len(wwns) || openAccess(eff) {
				a.log.Info("already zoned in")
				return nil
			}
			return agents.Failed(a.op(what), fmt.Errorf("no record zone %s* holds members to restore, and the effective configuration lacks some of the target's WWPNs", a.cfg.target.prefix))
		}
		if eff.cfgName == "" {
			return agents.Failed(a.op(what), fmt.Errorf("no zone configuration is enabled on the fabric; enable one before unfencing"))
		}
		expect = expectedBack(db, a.cfg.target, wwns, eff.cfgName, restores)
		if err := s.addMembers(ctx, restores); err != nil {
			return a.abortFailed(ctx, s, what, fmt.Errorf("restore members: %w", err))
		}
		del := make([]change, 0, len(deletes))
		for _, d := range deletes {
			del = append(del, change{zone: d})
		}
		if err := s.removeMembers(ctx, del); err != nil {
			return a.abortFailed(ctx, s, what, fmt.Errorf("delete record zones: %w", err))
		}
		done, err := a.enable(ctx, s, what, eff, attempt)
		if err != nil {
			return err
		}
		if done {
			a.log.Info("zoning restored and enabled", "cfg", eff.cfgName, "zones", len(restores), "attempt", attempt+1)
			break
		}
	}
	err = a.waitEffective(ctx, s, what, func(e *effective) (bool, string) {
		p := present(e, expect)
		if len(p) == len(expect) {
			return true, ""
		}
		return false, fmt.Sprintf("effective configuration %s has %d of the %d restored WWPNs", e.cfgName, len(p), len(expect))
	})
	if err == nil && len(orphans) > 0 {
		return agents.Failed(a.op(what), fmt.Errorf("restored what could be, but record zones %s name zones that no longer exist", strings.Join(orphans, ",")))
	}
	return err
}

// expectedBack is the set of the target's WWPNs that restoring gives back
// access through zones of the enabled cfg.
func expectedBack(db *zoneDB, t *target, wwns map[string]bool, cfg string, restores []change) map[string]bool {
	inCfg := map[string]bool{}
	for _, z := range db.cfgs[cfg] {
		inCfg[z] = true
	}
	out := map[string]bool{}
	for _, r := range restores {
		if !inCfg[r.zone] {
			continue
		}
		for _, m := range r.members {
			if isWWN(m) {
				out[strings.ToLower(m)] = true
				continue
			}
			for _, x := range db.aliases[m] {
				if wwns[strings.ToLower(x)] {
					out[strings.ToLower(x)] = true
				}
			}
		}
	}
	return out
}

// Reboot is off, confirmed, then on, confirmed.
func (a *Agent) Reboot(ctx context.Context) error {
	if err := a.Off(ctx); err != nil {
		return err
	}
	return a.On(ctx)
}

// Status reads the effective configuration: off when none of the target's
// WWPNs is in an enabled zone, on otherwise (a target with some ports still
// zoned in can still reach storage, so it is not fenced). With no cfg
// enabled, the default zone decides: all access is on, no access off.
func (a *Agent) Status(ctx context.Context) (agents.State, error) {
	const what = "status"
	s, done, err := a.session(ctx, what)
	if err != nil {
		return agents.StateUnknown, err
	}
	defer done()
	eff, err := s.effective(ctx)
	if err != nil {
		return agents.StateUnknown, agents.Failed(a.op(what), err)
	}
	wwns := a.cfg.target.wwns
	if len(a.cfg.target.aliases) > 0 {
		db, err := s.defined(ctx)
		if err != nil {
			return agents.StateUnknown, agents.Failed(a.op(what), err)
		}
		if wwns, err = a.cfg.target.resolve(db); err != nil {
			return agents.StateUnknown, agents.Failed(a.op(what), err)
		}
	}
	if eff.cfgName == "" {
		if eff.defaultAccess == 1 {
			return agents.StateOn, nil
		}
		return agents.StateOff, nil
	}
	if p := present(eff, wwns); len(p) > 0 {
		if len(p) < len(wwns) {
			a.log.Info("partly zoned in", "present", strings.Join(p, ","))
		}
		return agents.StateOn, nil
	}
	return agents.StateOff, nil
}

// Monitor logs in and reads the switch and its zoning state.
func (a *Agent) Monitor(ctx context.Context) error {
	const what = "monitor"
	s, done, err := a.session(ctx, what)
	if err != nil {
		return err
	}
	defer done()
	name, enabled, err := s.switchState(ctx)
	if err != nil {
		return agents.Failed(a.op(what), err)
	}
	if !enabled {
		return agents.Failed(a.op(what), fmt.Errorf("switch %s is disabled", name))
	}
	if _, err := s.effective(ctx); err != nil {
		return agents.Failed(a.op(what), err)
	}
	return nil
}

var (
	_ agents.Agent   = (*Agent)(nil)
	_ agents.Monitor = (*Agent)(nil)
	_ agents.Closer  = (*Agent)(nil)
)
