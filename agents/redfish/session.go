package redfish

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/fenced/fenced/agents/keep"
)

// maxBody bounds what we read from a BMC: a ComputerSystem is a few KB.
const maxBody = 4 << 20

func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

// isAuth reports a refused password or privilege (401, 403), but not a
// login refused for want of a session slot, whatever its status.
func isAuth(err error) bool {
	s := statusOf(err)
	return (s == http.StatusUnauthorized || s == http.StatusForbidden) && !isNoSlot(err)
}

// transient reports errors worth retrying: the BMC was busy or the
// connection broke. A done context is not transient, nor a link or request
// the agent refused to follow.
func transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || refused(err) || isNoSlot(err) {
		return false
	}
	switch statusOf(err) {
	case 0:
		var ue *url.Error
		return errors.As(err, &ue) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// maybeDelivered reports whether a failed request may still have reached
// the BMC (so a reset may be under way): any failure without an HTTP answer,
// except a request the agent refused to send.
func maybeDelivered(err error) bool { return statusOf(err) == 0 && !refused(err) }

// session is one logged-in conversation with the BMC, used by one
// operation and always logged out at its end. gofish carries the requests;
// the session itself (login, token, logout) is ours, so that every link it
// involves — the service root's Links.Sessions, the session's Location —
// is resolved and checked like any other (see origin).
//
// On a BMC without a session service (sushy-tools, some embedded BMCs) a
// session is only its Basic credentials, sent with every request (see
// fallBack); basic_auth asks for that from the start.
type session struct {
	a        *Agent
	c        *gofish.APIClient
	password string
	relogged bool
	// basic: every request carries Basic credentials; no token.
	basic bool

	// A held session (warm.go) is used by one operation or keep-alive at
	// a time, and ends when it is retired.
	keep.Lease

	// From the service root, resolved on the BMC: the Systems and
	// Sessions collections.
	systems, sessions string
	// token and location are our session's X-Auth-Token and its path on
	// the BMC ("" with Basic auth).
	token, location string
}

// open connects and logs in, retrying transient failures a few times.
func (a *Agent) open(ctx context.Context) (*session, error) {
	pw, err := a.cfg.password(ctx)
	if err != nil {
		return nil, err
	}
	s := &session{a: a, password: pw}
	if err := s.login(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *session) login(ctx context.Context) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 && !sleep(ctx, time.Duration(attempt)*100*time.Millisecond) {
			break
		}
		lctx, cancel := context.WithTimeout(ctx, s.a.loginTimeout())
		err = s.connect(lctx)
		if err == nil && !s.basic {
			err = s.createSession(lctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if !transient(ctx, err) {
			break
		}
		s.a.log.Warn("login failed, retrying", "attempt", attempt+1, "err", err)
	}
	return fmt.Errorf("login: %w", err)
}

// connect makes the gofish client (which reads the service root) and
// learns the service root's links, once per agent: they are resolved on
// the BMC before anything is sent to them.
func (s *session) connect(ctx context.Context) error {
	if s.c != nil {
		return nil
	}
	cfg := s.a.cfg
	cc := gofish.ClientConfig{
		Endpoint:          cfg.endpoint,
		HTTPClient:        s.a.http,
		NoModifyTransport: true,
		ReuseConnections:  true,
	}
	if cfg.basicAuth {
		// gofish sends these as an Authorization header on every request.
		cc.Username, cc.Password, cc.BasicAuth = cfg.username, s.password, true
	}
	s.a.mu.Lock()
	root, basic := s.a.root, s.a.basicWhy != ""
	s.a.mu.Unlock()
	s.basic = cfg.basicAuth || basic
	c, err := gofish.ConnectContext(ctx, cc)
	if err != nil {
		return fromGofish(err, s.secrets()...)
	}
	s.c = c
	if root == nil {
		if root, err = s.rootLinks(ctx); err != nil {
			s.c = nil
			return err
		}
		s.a.mu.Lock()
		s.a.root = root
		s.a.mu.Unlock()
	}
	s.systems, s.sessions = root.systems, root.sessions
	if !s.basic && root.noSessionService {
		s.fallBack("the service root names no SessionService and no Links.Sessions")
	}
	return nil
}

// rootLinks are the service root's links we follow, resolved on the BMC.
type rootLinks struct {
	systems  string // "" if the BMC has none
	sessions string
	// noSessionService: the root names neither Links.Sessions nor a
	// SessionService (sushy-tools): there is nothing to log in to.
	noSessionService bool
}

// rootLinks reads the service root (gofish keeps its links private).
func (s *session) rootLinks(ctx context.Context) (*rootLinks, error) {
	o := s.a.cfg.origin
	root := defaultRedfishURI + "/"
	body, _, err := s.getOnce(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", root, err)
	}
	doc, err := parseServiceRoot(body)
	systems, sessions := doc.systems, doc.sessions
	if err == nil && systems != "" {
		systems, err = o.resolve(linkSystems, systems, root)
	}
	if err == nil && sessions != "" {
		sessions, err = o.resolve(linkSessions, sessions, root)
	}
	if err != nil {
		return nil, err
	}
	none := sessions == "" && doc.sessionService == ""
	if sessions == "" {
		// DSP0266 fixes the Sessions collection's URI.
		sessions = defaultRedfishURI + "/SessionService/Sessions"
	}
	return &rootLinks{systems: strings.TrimSuffix(systems, "/"), sessions: sessions, noSessionService: none}, nil
}

// fallBack makes s, and every later session of the agent, send Basic
// credentials with each request instead of logging in: the BMC has no
// session service (why says how we know). It is logged once per agent.
//
// Only the absence of a session service leads here (a root that names
// none, or a login answered 404, 405 or 501), never a refused password: a
// 401 to a login is a wrong password, reported as such. The credentials go
// only where a session login would have sent the password: to the BMC's
// configured scheme, host and port (the transport's guard refuses any
// other, and redirects are not followed), so a BMC cannot turn this into
// Basic auth over plain HTTP unless plain_http was configured.
func (s *session) fallBack(why string) {
	a := s.a
	s.basic = true
	a.mu.Lock()
	first := a.basicWhy == ""
	if first {
		a.basicWhy = why
	}
	a.mu.Unlock()
	if !first {
		return
	}
	if a.cfg.origin.base.Scheme == "https" {
		a.log.Info("the BMC has no Redfish session service; using HTTP Basic authentication over TLS on every request", "why", why)
	} else {
		a.log.Warn("the BMC has no Redfish session service; using HTTP Basic authentication on every request, over plain HTTP (plain_http): the password crosses the network in clear each time", "why", why)
	}
}

// secrets are the strings no error of s may show, should the BMC echo
// one: the password, the session token, the Basic credentials as sent.
func (s *session) secrets() []string {
	out := []string{s.password, s.token}
	if s.basic {
		out = append(out, basicCredentials(s.a.cfg.username, s.password))
	}
	return out
}

func basicCredentials(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// createSession logs in: POST to the Sessions collection, then the token
// and the session's Location, which must name the BMC (our logout sends
// the token there).
func (s *session) createSession(ctx context.Context) error {
	resp, err := s.c.WithContext(ctx).Post(s.sessions, map[string]string{
		"UserName": s.a.cfg.username,
		"Password": s.password,
	})
	if err != nil {
		schemas.DeferredCleanupHTTPResponse(resp)
		err = fromGofish(err, s.secrets()...)
		switch statusOf(err) {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			// No session service where DSP0266 puts it: Basic auth,
			// which every Redfish service must accept, instead.
			s.fallBack(fmt.Sprintf("the login POST %s answered %v", s.sessions, err))
			return nil
		}
		return fmt.Errorf("POST %s: %w", s.sessions, asNoSlot(err))
	}
	schemas.DeferredCleanupHTTPResponse(resp)
	token, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	switch {
	case token == "":
		return errors.New("the BMC created no session token (X-Auth-Token missing)")
	case loc == "":
		return errors.New("the BMC's new session has no Location (it could not be logged out)")
	}
	path, err := s.a.cfg.origin.resolve(linkSession, loc, s.sessions)
	if err != nil {
		// The token stays unused: the BMC expires the session.
		s.a.log.Warn("session Location refused; the session is left for the BMC to expire", "err", err)
		return err
	}
	s.token, s.location = token, path
	s.a.recordOpened(path)
	return nil
}

// headers adds our session token, or the Basic credentials, to a
// request's headers.
func (s *session) headers(extra map[string]string) map[string]string {
	if s.token == "" && !s.basic {
		return extra
	}
	h := make(map[string]string, len(extra)+1)
	for k, v := range extra {
		h[k] = v
	}
	switch {
	case s.token != "":
		h["X-Auth-Token"] = s.token
	case s.basic:
		h["Authorization"] = "Basic " + basicCredentials(s.a.cfg.username, s.password)
	}
	return h
}

// close logs out; a fencing operation never leaves a session behind on the
// BMC (they are few, and a full table locks everyone out).
func (s *session) close() {
	if s.c == nil || s.location == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), logoutTimeout)
	defer cancel()
	resp, err := s.c.WithContext(ctx).DeleteWithHeaders(s.location, s.headers(nil))
	schemas.DeferredCleanupHTTPResponse(resp)
	if err := fromGofish(err, s.secrets()...); err != nil {
		s.a.log.Warn("logout failed; the BMC will expire the session", "err", err)
	}
	s.a.recordClosed(s.location)
	s.c, s.token, s.location = nil, "", ""
}

// relogin replaces an expired session once per operation.
func (s *session) relogin(ctx context.Context, cause error) bool {
	if s.relogged || s.basic || statusOf(cause) != http.StatusUnauthorized {
		return false
	}
	s.relogged = true
	s.a.log.Info("session rejected by the BMC (expired?), logging in again")
	s.a.recordClosed(s.location)
	s.token, s.location = "", ""
	if err := s.login(ctx); err != nil {
		s.a.log.Warn("re-login failed", "err", err)
		return false
	}
	return true
}

// get fetches uri and returns its body, retrying transient failures and
// re-logging in once on 401.
func (s *session) get(ctx context.Context, uri string) ([]byte, http.Header, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 && !sleep(ctx, time.Duration(attempt)*100*time.Millisecond) {
			break
		}
		var body []byte
		var hdr http.Header
		body, hdr, err = s.getOnce(ctx, uri)
		if err == nil {
			return body, hdr, nil
		}
		if s.relogin(ctx, err) {
			attempt--
			continue
		}
		if !transient(ctx, err) {
			break
		}
	}
	return nil, nil, fmt.Errorf("GET %s: %w", uri, err)
}

func (s *session) getOnce(ctx context.Context, uri string) ([]byte, http.Header, error) {
	rctx, cancel := context.WithTimeout(ctx, s.a.requestTimeout())
	defer cancel()
	resp, err := s.c.WithContext(rctx).GetWithHeaders(uri, s.headers(nil))
	if err != nil {
		schemas.DeferredCleanupHTTPResponse(resp)
		return nil, nil, fromGofish(err, s.secrets()...)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, nil, err
	}
	return body, resp.Header, nil
}

// post sends one POST with headers; a 401 re-logs in once and resends (the
// BMC refused it, so nothing happened). Other failures are returned as they
// are: whether to resend a reset is the caller's decision.
func (s *session) post(ctx context.Context, uri string, payload any, headers map[string]string) (int, http.Header, []byte, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, s.a.requestTimeout())
		resp, err := s.c.WithContext(rctx).PostWithHeaders(uri, payload, s.headers(headers))
		if err != nil {
			cancel()
			schemas.DeferredCleanupHTTPResponse(resp)
			err = fromGofish(err, s.secrets()...)
			if s.relogin(ctx, err) {
				continue
			}
			return 0, nil, nil, fmt.Errorf("POST %s: %w", uri, err)
		}
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		resp.Body.Close()
		cancel()
		if rerr != nil {
			// The BMC answered with a success status; a truncated body does
			// not undo that.
			body = nil
		}
		return resp.StatusCode, resp.Header, bytes.TrimSpace(body), nil
	}
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
