package san

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

const (
	mediaJSON   = "application/yang-data+json"
	zonePath    = "/rest/running/brocade-zone/"
	switchPath  = "/rest/running/brocade-fibrechannel-switch/fibrechannel-switch"
	maxBody     = 8 << 20
	cfgActAbort = 4
)

// httpError is a non-2xx answer from the switch.
type httpError struct {
	method, path string
	status       int
	msg          string // FOS error-message(s), or the start of the body
}

func (e *httpError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.method, e.path, e.status, e.msg)
}

// conflict reports whether err is FOS refusing a save or enable because the
// zoning database changed under us (stale checksum, or our transaction
// aborted by another commit). Such a refusal is retried from a fresh read.
func conflict(err error) bool {
	var he *httpError
	if !errors.As(err, &he) || he.status < 400 || he.status >= 500 {
		return false
	}
	m := strings.ToLower(he.msg)
	return strings.Contains(m, "checksum") || strings.Contains(m, "transaction") && strings.Contains(m, "abort")
}

// sent reports whether a request that failed with err may have been acted
// on by the switch: a transport failure or a 5xx after sending.
func sent(err error) bool {
	var he *httpError
	if errors.As(err, &he) {
		return he.status >= 500
	}
	return err != nil
}

// fosSession is one logged-in REST session. Not safe for concurrent use.
type fosSession struct {
	hc    *http.Client
	base  string // scheme://host:port
	vfid  int    // -1: not a virtual fabric switch
	token string
}

// login opens a session: POST /rest/login with Basic credentials; the
// session token comes back in the Authorization header.
func login(ctx context.Context, hc *http.Client, base string, vfid int, user, pass string) (*fosSession, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/rest/login", nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Accept", mediaJSON)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /rest/login: %w", stripURL(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if resp.StatusCode/100 != 2 {
		return nil, newHTTPError(http.MethodPost, "/rest/login", resp.StatusCode, body)
	}
	tok := resp.Header.Get("Authorization")
	if tok == "" {
		return nil, fmt.Errorf("POST /rest/login: HTTP %d without an Authorization session token", resp.StatusCode)
	}
	return &fosSession{hc: hc, base: base, vfid: vfid, token: tok}, nil
}

// stripURL drops the URL from a transport error: it repeats the host the
// caller already names and keeps messages short.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

func newHTTPError(method, path string, status int, body []byte) *httpError {
	msg := parseFOSError(body)
	if msg == "" {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
	}
	return &httpError{method: method, path: path, status: status, msg: msg}
}

// logout ends the session; the switch aborts any open zoning transaction.
func (s *fosSession) logout(ctx context.Context) error {
	_, err := s.do(ctx, http.MethodPost, "/rest/logout", nil)
	return err
}

func (s *fosSession) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	u := s.base + path
	if s.vfid >= 0 && strings.HasPrefix(path, "/rest/running/") {
		u += "?vf-id=" + strconv.Itoa(s.vfid)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", s.token)
	req.Header.Set("Accept", mediaJSON)
	if body != nil {
		req.Header.Set("Content-Type", mediaJSON)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, stripURL(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, newHTTPError(method, path, resp.StatusCode, b)
	}
	return b, nil
}

func (s *fosSession) effective(ctx context.Context) (*effective, error) {
	b, err := s.do(ctx, http.MethodGet, zonePath+"effective-configuration", nil)
	if err != nil {
		return nil, err
	}
	return parseEffective(b)
}

func (s *fosSession) defined(ctx context.Context) (*zoneDB, error) {
	b, err := s.do(ctx, http.MethodGet, zonePath+"defined-configuration", nil)
	if err != nil {
		return nil, err
	}
	return parseDefined(b)
}

// zoneBody is the request body that names members of zones.
func zoneBody(cs []change) map[string]any {
	zones := make([]map[string]any, 0, len(cs))
	for _, c := range cs {
		z := map[string]any{"zone-name": c.zone}
		if len(c.members) > 0 {
			key := "entry-name"
			if c.principal {
				key = "principal-entry-name"
			}
			z["member-entry"] = map[string]any{key: c.members}
		}
		zones = append(zones, z)
	}
	return map[string]any{"defined-configuration": map[string]any{"zone": zones}}
}

// addMembers POSTs members into zones (creating zones that do not exist).
func (s *fosSession) addMembers(ctx context.Context, cs []change) error {
	if len(cs) == 0 {
		return nil
	}
	_, err := s.do(ctx, http.MethodPost, zonePath+"defined-configuration", zoneBody(cs))
	return err
}

// removeMembers DELETEs members from zones; a change with no members
// deletes the zone.
func (s *fosSession) removeMembers(ctx context.Context, cs []change) error {
	if len(cs) == 0 {
		return nil
	}
	_, err := s.do(ctx, http.MethodDelete, zonePath+"defined-configuration", zoneBody(cs))
	return err
}

// enable commits the transaction and makes cfg effective; checksum is the
// one read before the transaction was opened.
func (s *fosSession) enable(ctx context.Context, cfg, checksum string) error {
	_, err := s.do(ctx, http.MethodPatch, zonePath+"effective-configuration",
		map[string]any{"effective-configuration": map[string]any{"cfg-name": cfg, "checksum": checksum}})
	return err
}

// abort drops this session's open transaction, if any.
func (s *fosSession) abort(ctx context.Context) error {
	_, err := s.do(ctx, http.MethodPatch, zonePath+"effective-configuration",
		map[string]any{"effective-configuration": map[string]any{"cfg-action": cfgActAbort}})
	return err
}

// switchState reads the switch's identity and state for Monitor.
func (s *fosSession) switchState(ctx context.Context) (name string, enabled bool, err error) {
	b, err := s.do(ctx, http.MethodGet, switchPath, nil)
	if err != nil {
		return "", false, err
	}
	var r struct {
		Response struct {
			Switch list[struct {
				Name    string `json:"user-friendly-name"`
				Enabled *bool  `json:"is-enabled-state"`
			}] `json:"fibrechannel-switch"`
		} `json:"Response"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", false, fmt.Errorf("fibrechannel-switch: %w", err)
	}
	if len(r.Response.Switch) == 0 {
		return "", false, fmt.Errorf("fibrechannel-switch: empty answer")
	}
	sw := r.Response.Switch[0]
	return sw.Name, sw.Enabled == nil || *sw.Enabled, nil
}
