package redfish

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
)

// secret is the BMC password in every test; no log line may contain it.
const secret = "Sup3r-s3cret-BMC-pw"

// logSink collects every log line of the package's tests, so one test can
// check that no secret leaked anywhere.
var logSink = struct {
	sync.Mutex
	bytes.Buffer
}{}

type lockedWriter struct{}

func (lockedWriter) Write(p []byte) (int, error) {
	logSink.Lock()
	defer logSink.Unlock()
	return logSink.Write(p)
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func startSim(t testing.TB, useTLS bool, opts redfishsim.Options) *redfishsim.Server {
	t.Helper()
	if opts.Users == nil {
		opts.Users = []redfishsim.User{{Name: "root", Password: secret}}
	}
	srv, err := redfishsim.Start("127.0.0.1:0", useTLS, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// params for an agent talking to srv; TLS servers get their CA file.
func simParams(t testing.TB, srv *redfishsim.Server, extra agents.Params) agents.Params {
	t.Helper()
	host, port, _ := strings.Cut(srv.Addr, ":")
	p := agents.Params{"ip": host, "ipport": port, "username": "root", "password": secret, "power_timeout": "5"}
	if srv.CACertPEM != nil {
		ca := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(ca, srv.CACertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		p["ca_file"] = ca
	} else {
		p["plain_http"] = "1"
	}
	for k, v := range extra {
		if v == "" {
			delete(p, k)
		} else {
			p[k] = v
		}
	}
	return p
}

func newAgent(t testing.TB, p agents.Params) *Agent {
	t.Helper()
	a, err := New(p, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantStatus(t *testing.T, a *Agent, want agents.State) {
	t.Helper()
	st, err := a.Status(ctxT(t))
	if err != nil || st != want {
		t.Fatalf("status = %v, %v; want %v", st, err, want)
	}
}

func wantNoSessions(t *testing.T, srv *redfishsim.Server) {
	t.Helper()
	if n := srv.OpenSessions(); n != 0 {
		t.Fatalf("%d sessions left open on the BMC", n)
	}
}

// Acceptance 1: every profile, status/off/on/reboot with read-back, over
// HTTPS with its CA, and no session left behind.
func TestProfiles(t *testing.T) {
	for _, prof := range []string{redfishsim.ProfileDMTF, redfishsim.ProfileIDRAC, redfishsim.ProfileILO, redfishsim.ProfileOpenBMC} {
		t.Run(prof, func(t *testing.T) {
			var mu sync.Mutex
			var events []string
			record := func(e string) func(string) {
				return func(string) { mu.Lock(); events = append(events, e); mu.Unlock() }
			}
			srv := startSim(t, true, redfishsim.Options{Profile: prof,
				PowerOffDelay: 30 * time.Millisecond, PowerOnDelay: 30 * time.Millisecond,
				OnPowerOff: record("off"), OnPowerOn: record("on")})
			a := newAgent(t, simParams(t, srv, nil))
			ctx := ctxT(t)

			wantStatus(t, a, agents.StateOn)
			if err := a.Off(ctx); err != nil {
				t.Fatalf("off: %v", err)
			}
			if p := srv.PowerState(""); p != "Off" {
				t.Fatalf("after off the BMC reads %s", p)
			}
			wantStatus(t, a, agents.StateOff)
			if err := a.Off(ctx); err != nil { // already off: success, nothing sent
				t.Fatalf("second off: %v", err)
			}
			if err := a.On(ctx); err != nil {
				t.Fatalf("on: %v", err)
			}
			wantStatus(t, a, agents.StateOn)
			if err := a.Reboot(ctx); err != nil {
				t.Fatalf("reboot: %v", err)
			}
			wantStatus(t, a, agents.StateOn)
			if err := a.Monitor(ctx); err != nil {
				t.Fatalf("monitor: %v", err)
			}

			var types []string
			for _, r := range srv.Resets() {
				types = append(types, r.ResetType)
			}
			if want := []string{"ForceOff", "On", "ForceOff", "On"}; !slices.Equal(types, want) {
				t.Fatalf("resets sent %v, want %v", types, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []string{"off", "on", "off", "on"}; !slices.Equal(events, want) {
				t.Fatalf("power events %v, want %v (reboot must be an observed off then on)", events, want)
			}
			wantNoSessions(t, srv)
			if srv.SessionsCreated() < 7 {
				t.Fatalf("only %d sessions created: operations did not log in", srv.SessionsCreated())
			}
		})
	}
}

// Acceptance 2: the 202 task monitor is followed and transitional states are
// waited through.
func TestAsyncResetAndTransitions(t *testing.T) {
	srv := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileOpenBMC,
		PowerOffDelay: 300 * time.Millisecond, PowerOnDelay: 300 * time.Millisecond})
	a := newAgent(t, simParams(t, srv, nil))
	start := time.Now()
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off: %v", err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("off returned after %v, before the transition could end", el)
	}
	if p := srv.PowerState(""); p != "Off" {
		t.Fatalf("off returned while the BMC reads %s", p)
	}
	// Started during PoweringOn: waits, sends nothing new.
	if err := srv.SetPowerState("", "PoweringOn"); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(200 * time.Millisecond); srv.SetPowerState("", "On") }()
	if err := a.On(ctxT(t)); err != nil {
		t.Fatalf("on during PoweringOn: %v", err)
	}
	if n := len(srv.Resets()); n != 1 {
		t.Fatalf("%d resets sent, want 1", n)
	}
	wantNoSessions(t, srv)
}

// Acceptance 3: accepted but never powered off → failure after power_timeout.
func TestResetAcceptedButPowerNeverChanges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		faults  redfishsim.Faults
		unknown bool
	}{
		{"ignored", redfishsim.ProfileDMTF, redfishsim.Faults{ResetIgnored: true}, false},
		{"ignored-async", redfishsim.ProfileOpenBMC, redfishsim.Faults{ResetIgnored: true}, false},
		{"stuck-powering-off", redfishsim.ProfileIDRAC, redfishsim.Faults{ResetNeverCompletes: true}, true},
		{"task-never-completes", redfishsim.ProfileOpenBMC, redfishsim.Faults{ResetNeverCompletes: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startSim(t, false, redfishsim.Options{Profile: tc.profile})
			srv.SetFaults(tc.faults)
			a := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "0.6"}))
			start := time.Now()
			err := a.Off(ctxT(t))
			if err == nil {
				t.Fatal("off succeeded though the system never powered off")
			}
			if el := time.Since(start); el < 600*time.Millisecond {
				t.Fatalf("gave up after %v, before power_timeout", el)
			}
			if agents.IsUnknown(err) != tc.unknown {
				t.Fatalf("unknown=%v, want %v: %v", agents.IsUnknown(err), tc.unknown, err)
			}
			t.Logf("error: %v", err)
			wantNoSessions(t, srv)
		})
	}
}

// Acceptance 4: neither ForceOff nor PushPowerButton allowed; several
// systems without systems_uri.
func TestResetTypeAndSystemChoice(t *testing.T) {
	srv := startSim(t, false, redfishsim.Options{AllowedResetTypes: []string{"On", "GracefulShutdown", "GracefulRestart"}})
	a := newAgent(t, simParams(t, srv, nil))
	err := a.Off(ctxT(t))
	if err == nil || !errors.Is(err, agents.ErrFailed) {
		t.Fatalf("off without ForceOff: %v", err)
	}
	for _, w := range []string{"ForceOff", "GracefulShutdown", "PushPowerButton"} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not name %s", err, w)
		}
	}
	if n := len(srv.Resets()); n != 0 {
		t.Fatalf("%d resets sent; GracefulShutdown must not stand in for off", n)
	}

	multi := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileMulti})
	a = newAgent(t, simParams(t, multi, nil))
	err = a.Off(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "/redfish/v1/Systems/Node1") || !strings.Contains(err.Error(), "/redfish/v1/Systems/Node2") || !strings.Contains(err.Error(), "systems_uri") {
		t.Fatalf("several systems: %v", err)
	}
	ports, err := a.List(ctxT(t))
	if err != nil || len(ports) != 2 || ports[0].ID != "Node1" || ports[1].ID != "Node2" {
		t.Fatalf("list: %v %v", ports, err)
	}
	a = newAgent(t, simParams(t, multi, agents.Params{"systems_uri": "/redfish/v1/Systems/Node2"}))
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	a = newAgent(t, simParams(t, multi, agents.Params{"plug": "Node1"}))
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if multi.PowerState("Node1") != "Off" || multi.PowerState("Node2") != "Off" {
		t.Fatalf("power %s %s", multi.PowerState("Node1"), multi.PowerState("Node2"))
	}
	a = newAgent(t, simParams(t, multi, agents.Params{"plug": "Node3"}))
	if _, err := a.Status(ctxT(t)); err == nil || !strings.Contains(err.Error(), "Node3") {
		t.Fatalf("unknown plug: %v", err)
	}
	wantNoSessions(t, multi)
}

// Acceptance 5: TLS verification.
func TestTLS(t *testing.T) {
	srv := startSim(t, true, redfishsim.Options{})
	if _, err := newAgent(t, simParams(t, srv, nil)).Status(ctxT(t)); err != nil {
		t.Fatalf("with ca_file: %v", err)
	}
	_, err := newAgent(t, simParams(t, srv, agents.Params{"ca_file": ""})).Status(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without ca_file: %v", err)
	}
	var buf bytes.Buffer
	a, err := New(simParams(t, srv, agents.Params{"ca_file": "", "ssl_insecure": "1"}), slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Status(ctxT(t)); err != nil {
		t.Fatalf("ssl_insecure: %v", err)
	}
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "ssl_insecure") {
		t.Fatalf("no warning for ssl_insecure: %q", buf.String())
	}
	wantNoSessions(t, srv)
}

// Acceptance 6: session expiry mid-operation, wrong password, Basic auth.
func TestSessionsAndAuth(t *testing.T) {
	srv := startSim(t, false, redfishsim.Options{})
	a := newAgent(t, simParams(t, srv, nil))
	if _, err := a.Status(ctxT(t)); err != nil { // discovers the system
		t.Fatal(err)
	}
	created := srv.SessionsCreated()
	// Requests of the off session: GET system (1), POST reset (2): the
	// session dies under the reset.
	srv.SetFaults(redfishsim.Faults{ExpireSessionAfter: 2})
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off across session expiry: %v", err)
	}
	if got := srv.SessionsCreated() - created; got != 2 {
		t.Fatalf("%d logins for the off, want 2 (one re-login)", got)
	}
	if srv.PowerState("") != "Off" {
		t.Fatal("not off")
	}
	wantNoSessions(t, srv)

	bad := newAgent(t, simParams(t, srv, agents.Params{"password": "wrong-password"}))
	start := time.Now()
	err := bad.On(ctxT(t))
	if !errors.Is(err, agents.ErrAuth) || !errors.Is(err, agents.ErrFailed) {
		t.Fatalf("wrong password: %v", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("auth failure took %v", el)
	}
	// Worded for a person (issue 24), then in the BMC's words with their
	// ID (issue 23), never with the password.
	if want := "authentication failed at BMC " + srv.Addr + ` (check username "root" and the password parameter): the BMC answered HTTP 401: Base.`; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("wrong password: %q; want it to say %q", err, want)
	}

	pwFile := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pwFile, []byte(secret+"\n"), 0o600)
	basic := newAgent(t, simParams(t, srv, agents.Params{"password": "", "password_file": pwFile, "basic_auth": "1"}))
	created = srv.SessionsCreated()
	if err := basic.On(ctxT(t)); err != nil {
		t.Fatalf("basic auth: %v", err)
	}
	if srv.SessionsCreated() != created {
		t.Fatal("basic auth created a session")
	}
	badBasic := newAgent(t, simParams(t, srv, agents.Params{"password": "nope", "basic_auth": "1"}))
	if _, err := badBasic.Status(ctxT(t)); !errors.Is(err, agents.ErrAuth) {
		t.Fatalf("basic auth, wrong password: %v", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatal("secret in error")
	}
}

// Transient faults: 5xx, dropped connections and latency are ridden out.
func TestTransientFaults(t *testing.T) {
	srv := startSim(t, false, redfishsim.Options{})
	a := newAgent(t, simParams(t, srv, nil))
	srv.SetFaults(redfishsim.Faults{ServerErrors: 2})
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off with 5xx: %v", err)
	}
	srv.SetFaults(redfishsim.Faults{DropConnections: 2, Latency: 20 * time.Millisecond})
	if err := a.On(ctxT(t)); err != nil {
		t.Fatalf("on with dropped connections: %v", err)
	}
	wantStatus(t, a, agents.StateOn)
	srv.Close() // BMC gone: a clear failure, not a hang
	_, err := a.Status(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("BMC down: %v", err)
	}
}

// A reset refused with 412 (the system changed since it was read) is
// re-read and sent again with the fresh ETag; a BMC that refuses If-Match
// on actions altogether gets the reset without it. Either way exactly one
// reset is accepted.
func TestResetEtagMismatch(t *testing.T) {
	for _, tc := range []struct {
		name        string
		faults      redfishsim.Faults
		wantIfMatch bool
	}{
		{"edited-once", redfishsim.Faults{ConcurrentEdits: 1}, true},
		{"if-match-refused", redfishsim.Faults{RejectIfMatch: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startSim(t, false, redfishsim.Options{})
			a := newAgent(t, simParams(t, srv, nil))
			srv.SetFaults(tc.faults)
			if err := a.Off(ctxT(t)); err != nil {
				t.Fatalf("off: %v", err)
			}
			if p := srv.PowerState(""); p != "Off" {
				t.Fatalf("power %s after off", p)
			}
			if f := srv.Faults(); f.ConcurrentEdits != 0 {
				t.Fatalf("the edit was never made: %+v", f)
			}
			resets := srv.Resets()
			if len(resets) != 1 {
				t.Fatalf("%d resets accepted, want 1: %+v", len(resets), resets)
			}
			if got := resets[0].IfMatch != ""; got != tc.wantIfMatch {
				t.Fatalf("accepted reset carried If-Match %q; want one: %v", resets[0].IfMatch, tc.wantIfMatch)
			}
			wantNoSessions(t, srv)
		})
	}
}

func TestNewValidates(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(ca, []byte("not a certificate"), 0o600)
	for _, tc := range []struct {
		p    agents.Params
		want []string
	}{
		{agents.Params{}, []string{"parameter ip: required", "parameter username: required", "parameter password: required"}},
		{agents.Params{"ip": "h", "username": "u", "password": "p", "ipport": "70000", "redfish_uri": "/other", "power_timeout": "x", "bogus": "1"},
			[]string{"ipport", "redfish_uri", "power_timeout", "parameter bogus: unknown"}},
		{agents.Params{"ip": "h", "username": "u", "password": "p", "ca_file": ca}, []string{"ca_file", "no PEM"}},
		{agents.Params{"ip": "h", "username": "u", "password": "p", "ca_file": ca, "ssl_insecure": "1"}, []string{"cannot be combined"}},
		{agents.Params{"ip": "h", "username": "u", "password": "p", "systems_uri": "Systems/1"}, []string{"systems_uri"}},
	} {
		_, err := Kind().New(tc.p, nil)
		if err == nil {
			t.Fatalf("%v: accepted", tc.p)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", tc.p, err, w)
			}
		}
		if strings.Contains(err.Error(), "\"p\"") {
			t.Errorf("password in error: %v", err)
		}
	}
	// Aliases of fence_redfish are accepted.
	if _, err := Kind().New(agents.Params{"ipaddr": "h", "login": "u", "passwd": "p", "systems-uri": "/redfish/v1/Systems/1", "ssl": "1"}, nil); err != nil {
		t.Fatal(err)
	}
}

// Runs after the other tests of this file (tests run in source order) and
// checks the logs they all wrote, plus its own: no line holds the password.
func TestZZNoSecretInLogs(t *testing.T) {
	srv := startSim(t, true, redfishsim.Options{})
	a := newAgent(t, simParams(t, srv, agents.Params{"ssl_insecure": "1", "ca_file": ""}))
	a.Off(ctxT(t))
	newAgent(t, simParams(t, srv, agents.Params{"password": secret + "x"})).Status(ctxT(t))
	logSink.Lock()
	defer logSink.Unlock()
	if logSink.Len() == 0 {
		t.Fatal("no logs captured")
	}
	if strings.Contains(logSink.String(), secret) {
		t.Fatal("the password appears in the logs")
	}
}
