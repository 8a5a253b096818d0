package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// maxBody bounds what we read from a BMC: a ComputerSystem is a few KB.
const maxBody = 4 << 20

// httpError is a non-success HTTP answer, summarised from its Redfish error
// body (the BMC's words, never ours: it cannot contain our password).
type httpError struct {
	Status int
	Msg    string
}

func (e *httpError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Msg)
}

// fromGofish turns gofish's error (which carries the raw body) into an
// httpError with a one-line summary.
func fromGofish(err error) error {
	var re *schemas.Error
	if !errors.As(err, &re) || re.HTTPReturnedStatusCode == 0 {
		return err
	}
	return &httpError{Status: re.HTTPReturnedStatusCode, Msg: summarizeError(re)}
}

// summarizeError picks the most specific message of a Redfish error.
func summarizeError(re *schemas.Error) string {
	var parts []string
	for _, m := range re.ExtendedInfos {
		if m.Message != "" {
			parts = append(parts, strings.TrimSpace(m.MessageID+": "+m.Message))
		} else if m.MessageID != "" {
			parts = append(parts, m.MessageID)
		}
	}
	if len(parts) == 0 {
		switch {
		case re.Code != "" && re.Message != "":
			parts = append(parts, re.Code+": "+re.Message)
		case re.Message != "":
			parts = append(parts, re.Message)
		}
	}
	s := strings.Join(parts, "; ")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

func isAuth(err error) bool {
	s := statusOf(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}

// transient reports errors worth retrying: the BMC was busy or the
// connection broke. A done context is not transient.
func transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
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
// the BMC (so a reset may be under way): any failure without an HTTP answer.
func maybeDelivered(err error) bool { return statusOf(err) == 0 }

// session is one logged-in conversation with the BMC, used by one
// operation and always logged out at its end.
type session struct {
	a        *Agent
	c        *gofish.APIClient
	password string
	relogged bool
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
	cfg := s.a.cfg
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 && !sleep(ctx, time.Duration(attempt)*100*time.Millisecond) {
			break
		}
		lctx, cancel := context.WithTimeout(ctx, cfg.loginTimeout)
		var c *gofish.APIClient
		c, err = gofish.ConnectContext(lctx, gofish.ClientConfig{
			Endpoint:          cfg.endpoint,
			Username:          cfg.username,
			Password:          s.password,
			BasicAuth:         cfg.basicAuth,
			HTTPClient:        s.a.http,
			NoModifyTransport: true,
			ReuseConnections:  true,
		})
		cancel()
		err = fromGofish(err)
		if err == nil {
			if !cfg.basicAuth {
				if sess, serr := c.GetSession(); serr != nil || sess.Token == "" {
					return errors.New("login: the BMC created no session token (X-Auth-Token missing)")
				}
			}
			s.c = c
			return nil
		}
		if !transient(ctx, err) {
			break
		}
		s.a.log.Warn("login failed, retrying", "attempt", attempt+1, "err", err)
	}
	return fmt.Errorf("login: %w", err)
}

// close logs out; a fencing operation never leaves a session behind on the
// BMC (they are few, and a full table locks everyone out).
func (s *session) close() {
	if s.c == nil || s.a.cfg.basicAuth {
		return
	}
	sess, err := s.c.GetSession()
	if err != nil || sess.ID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), logoutTimeout)
	defer cancel()
	if err := fromGofish(s.c.WithContext(ctx).Service.DeleteSession(sess.ID)); err != nil {
		s.a.log.Warn("logout failed; the BMC will expire the session", "err", err)
	}
	s.c = nil
}

// relogin replaces an expired session once per operation.
func (s *session) relogin(ctx context.Context, cause error) bool {
	if s.relogged || s.a.cfg.basicAuth || statusOf(cause) != http.StatusUnauthorized {
		return false
	}
	s.relogged = true
	s.a.log.Info("session rejected by the BMC (expired?), logging in again")
	s.c = nil
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
	rctx, cancel := context.WithTimeout(ctx, s.a.cfg.requestTimeout)
	defer cancel()
	resp, err := s.c.WithContext(rctx).Get(uri)
	if err != nil {
		schemas.DeferredCleanupHTTPResponse(resp)
		return nil, nil, fromGofish(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, nil, err
	}
	return body, resp.Header, nil
}

// getJSON fetches uri into v.
func (s *session) getJSON(ctx context.Context, uri string, v any) error {
	body, _, err := s.get(ctx, uri)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: decoding JSON: %w", uri, err)
	}
	return nil
}

// post sends one POST with headers; a 401 re-logs in once and resends (the
// BMC refused it, so nothing happened). Other failures are returned as they
// are: whether to resend a reset is the caller's decision.
func (s *session) post(ctx context.Context, uri string, payload any, headers map[string]string) (int, http.Header, []byte, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, s.a.cfg.requestTimeout)
		resp, err := s.c.WithContext(rctx).PostWithHeaders(uri, payload, headers)
		if err != nil {
			cancel()
			schemas.DeferredCleanupHTTPResponse(resp)
			err = fromGofish(err)
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

// localPath turns a Location or link that may be an absolute URL into the
// path gofish expects.
func localPath(loc string) string {
	if u, err := url.Parse(loc); err == nil && u.IsAbs() {
		p := u.EscapedPath()
		if u.RawQuery != "" {
			p += "?" + u.RawQuery
		}
		return p
	}
	return loc
}
