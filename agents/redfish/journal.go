package redfish

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fenced/fenced/agents"
)

// Sessions left open by a process that ended without logging them out
// (agents.SessionRecorder, agents.SessionCloser). Every session the agent
// logs in is recorded by its URI on the BMC (its Location), never by its
// X-Auth-Token. A successor deletes each URI with the agent's credentials:
// first with Basic auth, which needs no session slot (the BMC's table may
// be full of exactly these sessions), then, if the BMC refuses Basic auth,
// on a session of its own.

var (
	_ agents.SessionRecorder = (*Agent)(nil)
	_ agents.SessionCloser   = (*Agent)(nil)
)

// RecordSessions has every session the agent logs in from now on reported
// to l.
func (a *Agent) RecordSessions(l agents.SessionLedger) { a.ledger.Store(&l) }

func (a *Agent) sessionRecord(location string) agents.SessionRecord {
	return agents.SessionRecord{Agent: "redfish", Address: a.cfg.endpoint, ID: location}
}

// recordOpened reports a session logged in at location.
func (a *Agent) recordOpened(location string) {
	if l := a.ledger.Load(); l != nil && location != "" {
		r := a.sessionRecord(location)
		r.Opened = time.Now().UTC()
		(*l).Opened(r)
	}
}

// recordClosed reports the session at location logged out, or expired.
func (a *Agent) recordClosed(location string) {
	if l := a.ledger.Load(); l != nil && location != "" {
		(*l).Closed(a.sessionRecord(location))
	}
}

// CloseSessions deletes each recorded session of this BMC. A session the
// BMC answers 404 for is gone already (expired).
func (a *Agent) CloseSessions(ctx context.Context, recs []agents.SessionRecord) (map[agents.SessionRecord]error, error) {
	failed := map[agents.SessionRecord]error{}
	var s *session // a session of our own, once Basic auth is refused
	defer func() {
		if s != nil {
			s.close()
		}
	}()
	for _, r := range recs {
		if r.Agent != "redfish" || r.Address != a.cfg.endpoint {
			failed[r] = fmt.Errorf("recorded for %s at %s, not this device (redfish at %s)", r.Agent, r.Address, a.cfg.endpoint)
			continue
		}
		path, err := a.cfg.origin.resolve(linkSession, r.ID, defaultRedfishURI+"/SessionService/Sessions")
		if err != nil {
			failed[r] = err
			continue
		}
		status, err := a.deleteSession(ctx, path, nil)
		if err == nil && (status == http.StatusUnauthorized || status == http.StatusForbidden) {
			// Basic auth refused: on a session of our own.
			if s == nil {
				if s, err = a.open(ctx); err != nil {
					s = nil
					return failed, fmt.Errorf("the BMC refused Basic auth, and logging in to delete the sessions failed: %w", err)
				}
			}
			status, err = a.deleteSession(ctx, path, s)
		}
		switch {
		case err != nil:
			failed[r] = err
		case status == http.StatusNotFound:
			a.log.Debug("redfish session a previous run left open is gone already", "session", path)
		case status >= 200 && status < 300:
			a.log.Info("redfish deleted a session a previous run left open", "session", path, "opened", r.Opened.Format(time.RFC3339))
		default:
			failed[r] = fmt.Errorf("DELETE %s: HTTP %d", path, status)
		}
	}
	return failed, nil
}

// deleteSession sends DELETE path with Basic auth, or with s's token.
func (a *Agent) deleteSession(ctx context.Context, path string, s *session) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodDelete, a.cfg.endpoint+path, nil)
	if err != nil {
		return 0, err
	}
	if s != nil {
		req.Header.Set("X-Auth-Token", s.token)
	} else {
		pw, err := a.cfg.password(ctx)
		if err != nil {
			return 0, err
		}
		req.SetBasicAuth(a.cfg.username, pw)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("DELETE %s: %w", path, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	return resp.StatusCode, nil
}
