package redfish

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/keep"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
)

// A session its process left open (killed before it logged out) is in the
// journal by its URI, never its token; the next process deletes it with
// Basic auth, taking no session slot of its own. A session the BMC no
// longer has counts as deleted; a record of another BMC is refused.
func TestLeftOpenSessionsAreDeleted(t *testing.T) {
	srv := startSim(t, true, redfishsim.Options{})
	params := simParams(t, srv, nil)
	path := filepath.Join(t.TempDir(), "sessions.json")
	ctx := ctxT(t)

	j, _ := keep.OpenJournal(path, nil)
	a := newAgent(t, params)
	a.RecordSessions(j)
	if err := a.Check(ctx, true); err != nil || !a.Holds() {
		t.Fatalf("check: %v, holds %v", err, a.Holds())
	}
	s, _, _ := a.held.Take(ctx)
	token := s.token
	s.Give()
	recs := j.Open()
	if len(recs) != 1 || recs[0].Agent != "redfish" || recs[0].Address != srv.URL || !strings.HasPrefix(recs[0].ID, "/redfish/v1/SessionService/Sessions/") {
		t.Fatalf("journal: %+v (BMC %s)", recs, srv.URL)
	}
	if b, _ := os.ReadFile(path); token == "" || strings.Contains(string(b), token) || strings.Contains(string(b), secret) {
		t.Fatalf("the journal holds the session's token or the password:\n%s", b)
	}

	// a's process dies here.
	_, left := keep.OpenJournal(path, nil)
	created := srv.SessionsCreated()
	b := newAgent(t, params)
	foreign := agents.SessionRecord{Agent: "redfish", Address: "https://192.0.2.1:443", ID: recs[0].ID}
	failed, err := b.CloseSessions(ctx, append(left, foreign))
	if err != nil || len(failed) != 1 || failed[foreign] == nil {
		t.Fatalf("delete: %v, failed %v", err, failed)
	}
	wantNoSessions(t, srv)
	if n := srv.SessionsCreated() - created; n != 0 {
		t.Fatalf("%d logins to delete a session with Basic auth", n)
	}
	if failed, err := b.CloseSessions(ctx, left); err != nil || len(failed) != 0 {
		t.Fatalf("deleting it again: %v, %v", err, failed)
	}
}

// A BMC that refuses Basic auth: the sessions are deleted on a session of
// the closer's own, logged out after.
func TestLeftOpenSessionsDeletedWithoutBasicAuth(t *testing.T) {
	sim, err := redfishsim.New(redfishsim.Options{Users: []redfishsim.User{{Name: "root", Password: secret}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, basic := r.BasicAuth(); basic {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	host, port, _ := strings.Cut(strings.TrimPrefix(hs.URL, "http://"), ":")
	params := agents.Params{"ip": host, "ipport": port, "username": "root", "password": secret, "plain_http": "1"}
	ctx := ctxT(t)

	j, _ := keep.OpenJournal(filepath.Join(t.TempDir(), "sessions.json"), nil)
	a := newAgent(t, params)
	a.RecordSessions(j)
	if err := a.Check(ctx, true); err != nil {
		t.Fatal(err)
	}
	b := newAgent(t, params)
	if failed, err := b.CloseSessions(ctx, j.Open()); err != nil || len(failed) != 0 {
		t.Fatalf("delete: %v, failed %v", err, failed)
	}
	if n := sim.OpenSessions(); n != 0 {
		t.Fatalf("%d sessions open after deleting the one left open", n)
	}
}
