package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// The quirks of BMCs the project did not write (issue 23), each against
// its profile of the simulator: the agent's actions, what it sends, what
// it logs and what its errors say.

// capture is a logger whose lines a test reads (they also go to logSink).
type capture struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.b.Write(p)
	c.mu.Unlock()
	return lockedWriter{}.Write(p)
}

func (c *capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// lines counts the log lines containing s.
func (c *capture) lines(s string) int {
	n := 0
	for _, l := range strings.Split(c.String(), "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

func newCapturedAgent(t testing.TB, p agents.Params) (*Agent, *capture) {
	t.Helper()
	c := &capture{}
	a, err := New(p, slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, c
}

func resetTypes(sim *redfishsim.Sim) []string {
	var out []string
	for _, r := range sim.Resets() {
		out = append(out, r.ResetType)
	}
	return out
}

// recorder serves a simulator through a handler that notes how each
// request authenticated and whether it came over TLS.
type recorder struct {
	sim *redfishsim.Sim
	srv *httptest.Server

	mu   sync.Mutex
	seen []string // "POST /path auth=basic|token|none tls=true"
}

func startRecorder(t *testing.T, useTLS bool, opts redfishsim.Options) *recorder {
	t.Helper()
	if opts.Users == nil {
		opts.Users = []redfishsim.User{{Name: "root", Password: secret}}
	}
	sim, err := redfishsim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{sim: sim}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := "none"
		switch {
		case r.Header.Get("X-Auth-Token") != "":
			auth = "token"
		case r.Header.Get("Authorization") != "":
			auth = "basic"
		}
		rec.mu.Lock()
		rec.seen = append(rec.seen, fmt.Sprintf("%s %s auth=%s tls=%v", r.Method, r.URL.Path, auth, r.TLS != nil))
		rec.mu.Unlock()
		sim.ServeHTTP(w, r)
	})
	if useTLS {
		rec.srv = httptest.NewTLSServer(h)
	} else {
		rec.srv = httptest.NewServer(h)
	}
	t.Cleanup(func() { rec.srv.Close(); sim.Close() })
	return rec
}

func (rec *recorder) params(t *testing.T, extra agents.Params) agents.Params {
	t.Helper()
	addr := strings.TrimPrefix(strings.TrimPrefix(rec.srv.URL, "https://"), "http://")
	host, port, _ := strings.Cut(addr, ":")
	p := agents.Params{"ip": host, "ipport": port, "username": "root", "password": secret, "power_timeout": "5"}
	if cert := rec.srv.Certificate(); rec.srv.TLS != nil && cert != nil {
		ca := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		p["ca_file"] = ca
	} else {
		p["plain_http"] = "1"
	}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.seen)
}

func (rec *recorder) count(sub string) int {
	n := 0
	for _, r := range rec.requests() {
		if strings.Contains(r, sub) {
			n++
		}
	}
	return n
}

const fallbackLine = "the BMC has no Redfish session service"

// sushy-tools has no session service: with fence_redfish's parameters (no
// basic_auth) the agent falls back to Basic auth over TLS, says so once,
// and every action works; nothing is ever sent with Basic credentials
// over plain HTTP, and no login is attempted once the root said there is
// no session service (sushy-tools answers such a login 401).
func TestQuirkNoSessionService(t *testing.T) {
	rec := startRecorder(t, true, redfishsim.Options{Profile: redfishsim.ProfileSushy,
		PowerOffDelay: 30 * time.Millisecond, PowerOnDelay: 30 * time.Millisecond})
	rec.sim.SetFaults(redfishsim.Faults{LoginRefused: http.StatusUnauthorized})
	a, logs := newCapturedAgent(t, rec.params(t, nil))
	ctx := ctxT(t)

	wantStatus(t, a, agents.StateOn)
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off: %v", err)
	}
	if p := rec.sim.PowerState(""); p != "Off" {
		t.Fatalf("after off the BMC reads %s", p)
	}
	wantStatus(t, a, agents.StateOff)
	if err := a.On(ctx); err != nil {
		t.Fatalf("on: %v", err)
	}
	if err := a.Reboot(ctx); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	wantStatus(t, a, agents.StateOn)
	if err := a.Monitor(ctx); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	if err := a.Check(ctx, true); err != nil {
		t.Fatalf("check: %v", err)
	}
	if a.Holds() {
		t.Fatal("holds a session on a BMC that has none")
	}
	if ka := a.KeepAliveInterval(); ka != 0 {
		// The device monitor would take the session it never gets for
		// one lost, and check again at every poll.
		t.Fatalf("keep-alive interval %v with no session to keep", ka)
	}
	if ka := newAgent(t, rec.params(t, agents.Params{"basic_auth": "1"})).KeepAliveInterval(); ka != 0 {
		t.Fatalf("keep-alive interval %v with basic_auth", ka)
	}
	if err := a.KeepAlive(ctx); err != nil {
		t.Fatalf("keep-alive with nothing held: %v", err)
	}
	if ports, err := a.List(ctx); err != nil || len(ports) != 1 {
		t.Fatalf("list: %v %v", ports, err)
	}

	if got, want := resetTypes(rec.sim), []string{"ForceOff", "On", "ForceOff", "On"}; !slices.Equal(got, want) {
		t.Fatalf("resets %v, want %v", got, want)
	}
	if n := rec.count("POST /redfish/v1/SessionService/Sessions"); n != 0 {
		t.Fatalf("%d logins attempted on a BMC whose service root names no session service", n)
	}
	if n := rec.count("auth=basic"); n == 0 {
		t.Fatal("no request carried Basic credentials")
	}
	if n := rec.count("auth=basic tls=false"); n != 0 {
		t.Fatalf("%d requests with Basic credentials over plain HTTP", n)
	}
	if n := logs.lines(fallbackLine); n != 1 {
		t.Fatalf("the fallback is logged %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "over TLS") || !strings.Contains(logs.String(), "names no SessionService") {
		t.Fatalf("the fallback line does not say why and how:\n%s", logs)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("password in the logs")
	}
}

// A BMC whose root names a session service but whose login answers 404,
// 405 or 501 gets Basic auth too, logged once across operations; one that
// is merely busy (503) does not.
func TestQuirkLoginNotSupported(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			rec := startRecorder(t, true, redfishsim.Options{})
			rec.sim.SetFaults(redfishsim.Faults{LoginRefused: code})
			a, logs := newCapturedAgent(t, rec.params(t, nil))
			if err := a.Off(ctxT(t)); err != nil {
				t.Fatalf("off: %v", err)
			}
			if err := a.On(ctxT(t)); err != nil {
				t.Fatalf("on: %v", err)
			}
			if p := rec.sim.PowerState(""); p != "On" || len(rec.sim.Resets()) != 2 {
				t.Fatalf("power %s, %d resets", p, len(rec.sim.Resets()))
			}
			if n := rec.count("POST /redfish/v1/SessionService/Sessions"); n != 1 {
				t.Fatalf("%d logins attempted, want 1 (then Basic auth)", n)
			}
			if n := logs.lines(fallbackLine); n != 1 || logs.lines(fmt.Sprintf("answered HTTP %d", code)) != 1 {
				t.Fatalf("fallback logged %d times, want once, naming HTTP %d:\n%s", n, code, logs)
			}
		})
	}
	rec := startRecorder(t, false, redfishsim.Options{})
	rec.sim.SetFaults(redfishsim.Faults{LoginRefused: http.StatusServiceUnavailable})
	a, logs := newCapturedAgent(t, rec.params(t, nil))
	if err := a.Off(ctxT(t)); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("off with the login answering 503: %v", err)
	}
	if rec.count("auth=basic") != 0 || logs.lines(fallbackLine) != 0 {
		t.Fatalf("a busy session service led to Basic auth:\n%s", logs)
	}
}

// A wrong password on a BMC that has a session service is a wrong
// password: an authentication failure with the BMC's words, no Basic
// auth tried.
func TestQuirkWrongPasswordIsNoFallback(t *testing.T) {
	rec := startRecorder(t, false, redfishsim.Options{})
	a, logs := newCapturedAgent(t, rec.params(t, agents.Params{"password": "wrong-password"}))
	err := a.Off(ctxT(t))
	if !errors.Is(err, agents.ErrAuth) {
		t.Fatalf("wrong password: %v", err)
	}
	if !strings.Contains(err.Error(), "invalid credentials") || !strings.Contains(err.Error(), "Base.1.8.ResourceAtUriUnauthorized") {
		t.Fatalf("the error drops the BMC's message or its ID: %v", err)
	}
	if n := rec.count("auth=basic"); n != 0 || logs.lines(fallbackLine) != 0 {
		t.Fatalf("fell back to Basic auth on a wrong password (%d requests):\n%s", n, logs)
	}
	if err := a.Check(ctxT(t), true); !errors.Is(err, agents.ErrAuth) {
		t.Fatalf("check with a wrong password: %v", err)
	}
	if rec.count("auth=basic") != 0 || len(rec.sim.Resets()) != 0 {
		t.Fatal("Basic auth or a reset after a refused login")
	}
}

// On sushy-tools a wrong password is reported with the BMC's sentence
// and its ID (sushy says it only in error.message, beside a bare
// Base.1.0.GeneralError), and not as a missing session service.
func TestQuirkErrorTextWrongPassword(t *testing.T) {
	srv := startSim(t, true, redfishsim.Options{Profile: redfishsim.ProfileSushy})
	a, _ := newCapturedAgent(t, simParams(t, srv, agents.Params{"password": "wrong-" + secret}))
	_, err := a.Status(ctxT(t))
	if !errors.Is(err, agents.ErrAuth) {
		t.Fatalf("wrong password: %v", err)
	}
	if !strings.Contains(err.Error(), "HTTP 401: Base.1.0.GeneralError: Incorrect username or password") {
		t.Fatalf("the error does not carry the BMC's message with its ID: %v", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatal("password in the error")
	}
	t.Logf("error: %v", err)
}

// The BMC's words in errors: every message with its ID, each once,
// cleaned of control and format characters and of our secrets, bounded.
func TestErrorSummary(t *testing.T) {
	const pw = "hunter2-" + secret
	for _, tc := range []struct {
		name, body string
		want       []string
		not        []string
	}{
		{"sushy", `{"error":{"code":"Base.1.0.GeneralError","message":"Incorrect username or password","@Message.ExtendedInfo":[{"MessageId":"Base.1.0.GeneralError"}]}}`,
			[]string{"Base.1.0.GeneralError: Incorrect username or password"}, []string{"; Base.1.0.GeneralError"}},
		{"pointer to ExtendedInfo", `{"error":{"code":"Base.1.8.GeneralError","message":"A general error has occurred. See ExtendedInfo for more information.","@Message.ExtendedInfo":[{"MessageId":"Base.1.8.NoValidSession","Message":"There is no valid session established with the implementation."}]}}`,
			[]string{"Base.1.8.NoValidSession: There is no valid session established with the implementation."}, []string{"See ExtendedInfo"}},
		{"both say something", `{"error":{"code":"iLO.0.10.ExtendedInfo","message":"Login failed","@Message.ExtendedInfo":[{"MessageId":"Base.1.4.NoValidSession","Message":"No session"},{"MessageId":"iLO.2.14.UnauthorizedLoginAttempt"}]}}`,
			[]string{"iLO.0.10.ExtendedInfo: Login failed; Base.1.4.NoValidSession: No session; iLO.2.14.UnauthorizedLoginAttempt"}, nil},
		{"message only", `{"error":{"message":"Incorrect username or password"}}`, []string{"HTTP 401: Incorrect username or password"}, nil},
		{"control and format characters", `{"error":{"code":"X","message":"bad\n\u001b[31mlevel=ERROR\u0007 \u202eevil\u200b\r\nend"}}`,
			[]string{"X: bad [31mlevel=ERROR evil end"}, []string{"\n", "\x1b", "\u202e", "\u200b", "\r", "\a"}},
		{"password echoed", `{"error":{"code":"Base.1.8.GeneralError","message":"password '` + pw + `' rejected","@Message.ExtendedInfo":[{"MessageId":"X","Message":"for ` + pw + `"}]}}`,
			[]string{"[redacted]"}, []string{pw, "hunter2"}},
		{"password where the summary is cut", `{"error":{"message":"` + strings.Repeat("a", maxMessagePart-10) + pw + `"}}`,
			nil, []string{"hunter2", secret[:6]}},
		{"long", `{"error":{"code":"C","message":"` + strings.Repeat("é", 1000) + `","@Message.ExtendedInfo":[{"MessageId":"M1","Message":"` + strings.Repeat("m", 1000) + `"},{"MessageId":"M2","Message":"` + strings.Repeat("n", 1000) + `"}]}}`,
			[]string{"C: ééé", "...; M1: mmm"}, nil},
		{"not JSON", "<html><body>401 Unauthorized\n</body></html>", []string{"HTTP 401: <html><body>401 Unauthorized </body></html>"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fromGofish(schemas.ConstructError(401, []byte(tc.body)), pw, "token-1234")
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q lacks %q", msg, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(msg, w) {
					t.Errorf("%q contains %q", msg, w)
				}
			}
			if len(msg) > len("HTTP 401: ")+maxMessage {
				t.Errorf("%d bytes: %q", len(msg), msg)
			}
			if !json.Valid([]byte(fmt.Sprintf("%q", msg))) || !strings.HasPrefix(msg, "HTTP 401") {
				t.Errorf("%q", msg)
			}
		})
	}
}

// A config of https cannot be led into Basic auth over plain HTTP: a
// BMC without a session service whose links name its own host and port
// over http is refused before anything is sent there.
func TestQuirkNoSessionServiceNoPlainHTTP(t *testing.T) {
	rec := startRecorder(t, true, redfishsim.Options{Profile: redfishsim.ProfileSushy})
	addr := strings.TrimPrefix(rec.srv.URL, "https://")
	for _, link := range []redfishsim.Link{redfishsim.LinkSystems, redfishsim.LinkMember, redfishsim.LinkReset} {
		t.Run(string(link), func(t *testing.T) {
			rec.sim.SetFaults(redfishsim.Faults{ForeignLinks: map[redfishsim.Link]string{link: "http://" + addr}})
			before := len(rec.requests())
			a, _ := newCapturedAgent(t, rec.params(t, nil))
			err := a.Off(ctxT(t))
			if err == nil || !strings.Contains(err.Error(), `scheme "http"`) {
				t.Fatalf("off: %v", err)
			}
			for _, r := range rec.requests()[before:] {
				if strings.Contains(r, "tls=false") {
					t.Fatalf("a request reached the BMC over plain HTTP: %s", r)
				}
			}
			if len(rec.sim.Resets()) != 0 {
				t.Fatal("a reset was sent")
			}
		})
	}
	// plain_http configured: Basic auth over it, with a warning.
	plain := startRecorder(t, false, redfishsim.Options{Profile: redfishsim.ProfileSushy})
	a, logs := newCapturedAgent(t, plain.params(t, nil))
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off over plain_http: %v", err)
	}
	if logs.lines("level=WARN") != 1 || logs.lines("in clear") != 1 {
		t.Fatalf("no warning for Basic auth over plain HTTP:\n%s", logs)
	}
}

// fence_redfish's parameters through `fenced agent redfish` (a real
// process) against the sushy profile: status and off work.
func TestQuirkNoSessionServiceCommand(t *testing.T) {
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	srv := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileSushy})
	if code, stdout, stderr := runAgentStdin(t, srv, false, "status"); code != 0 {
		t.Fatalf("status: exit %d, %q %q", code, stdout, stderr)
	}
	if code, stdout, stderr := runAgentStdin(t, srv, false, "off"); code != 0 || srv.PowerState("") != "Off" {
		t.Fatalf("off: exit %d, %q %q; power %s", code, stdout, stderr, srv.PowerState(""))
	}
}

// slow-off: PowerState reads PoweringOff for a while after ForceOff. Off
// returns only once it reads Off; status meanwhile says on; an off that
// finds it PoweringOff sends ForceOff again (it cannot tell a hard off's
// transition from a shutdown that hangs), which the BMC takes without
// starting over, and waits; a power_timeout shorter than the transition
// is an unknown outcome.
func TestQuirkSlowPoweringOff(t *testing.T) {
	const delay = 1200 * time.Millisecond
	srv := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileSlowOff, PowerOffDelay: delay})
	a := newAgent(t, simParams(t, srv, nil))
	b := newAgent(t, simParams(t, srv, nil))
	ctx := ctxT(t)
	start := time.Now()
	offErr := make(chan error, 1)
	go func() { offErr <- a.Off(ctx) }()
	deadline := time.Now().Add(delay / 2)
	for srv.PowerState("") != "PoweringOff" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p := srv.PowerState(""); p != "PoweringOff" {
		t.Fatalf("the BMC reads %s during the transition", p)
	}
	wantStatus(t, b, agents.StateOn)
	if err := b.Off(ctx); err != nil {
		t.Fatalf("second off during PoweringOff: %v", err)
	}
	if err := <-offErr; err != nil {
		t.Fatalf("off: %v", err)
	}
	if el := time.Since(start); el < delay {
		t.Fatalf("off returned after %v, before the %v transition ended", el, delay)
	}
	if p := srv.PowerState(""); p != "Off" {
		t.Fatalf("off returned while the BMC reads %s", p)
	}
	if got := resetTypes(srv.Sim); !slices.Equal(got, []string{"ForceOff", "ForceOff"}) {
		t.Fatalf("resets %v, want two ForceOff", got)
	}
	if err := a.Reboot(ctx); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	wantStatus(t, a, agents.StateOn)
	if err := a.Monitor(ctx); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	short := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "0.4"}))
	err := short.Off(ctx)
	if !agents.IsUnknown(err) || !strings.Contains(err.Error(), "PoweringOff") {
		t.Fatalf("power_timeout shorter than PoweringOff: %v", err)
	}
	wantNoSessions(t, srv)
}

// push-button: the BMC offers only PushPowerButton. Off presses it once
// from On and believes only the read-back; on from Off likewise; reboot
// is a press to Off, confirmed, then a press to On. Nothing is pressed
// when the system already is where it should be, nothing from a
// transitional state (it waits for the system to settle), and a press
// that may have reached the BMC is never sent again.
func TestQuirkPushPowerButtonOnly(t *testing.T) {
	opts := redfishsim.Options{Profile: redfishsim.ProfilePushButton, PowerOffDelay: 50 * time.Millisecond, PowerOnDelay: 50 * time.Millisecond}
	t.Run("actions", func(t *testing.T) {
		srv := startSim(t, true, opts)
		a := newAgent(t, simParams(t, srv, nil))
		ctx := ctxT(t)
		wantStatus(t, a, agents.StateOn)
		if err := a.Off(ctx); err != nil {
			t.Fatalf("off: %v", err)
		}
		if p := srv.PowerState(""); p != "Off" {
			t.Fatalf("after off the BMC reads %s", p)
		}
		if err := a.Off(ctx); err != nil { // already off: no press
			t.Fatalf("second off: %v", err)
		}
		if err := a.On(ctx); err != nil {
			t.Fatalf("on: %v", err)
		}
		if err := a.On(ctx); err != nil { // already on: no press
			t.Fatalf("second on: %v", err)
		}
		if err := a.Reboot(ctx); err != nil {
			t.Fatalf("reboot: %v", err)
		}
		wantStatus(t, a, agents.StateOn)
		if err := a.Monitor(ctx); err != nil {
			t.Fatalf("monitor: %v", err)
		}
		if got := resetTypes(srv.Sim); len(got) != 4 || slices.ContainsFunc(got, func(s string) bool { return s != "PushPowerButton" }) {
			t.Fatalf("resets %v, want 4 presses (off, on, reboot's off and on)", got)
		}
		wantNoSessions(t, srv)
	})
	t.Run("settles-first", func(t *testing.T) {
		srv := startSim(t, false, opts)
		a := newAgent(t, simParams(t, srv, nil))
		if err := srv.SetPowerState("", "PoweringOn"); err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(300 * time.Millisecond); srv.SetPowerState("", "On") }()
		if err := a.Off(ctxT(t)); err != nil {
			t.Fatalf("off from PoweringOn: %v", err)
		}
		if got := resetTypes(srv.Sim); len(got) != 1 {
			t.Fatalf("resets %v, want one press", got)
		}
		if p := srv.PowerState(""); p != "Off" {
			t.Fatalf("power %s", p)
		}
	})
	t.Run("answer-lost", func(t *testing.T) {
		srv := startSim(t, false, opts)
		a := newAgent(t, simParams(t, srv, nil))
		wantStatus(t, a, agents.StateOn)
		srv.SetFaults(redfishsim.Faults{ResetAnswersLost: 1})
		if err := a.Off(ctxT(t)); err != nil {
			t.Fatalf("off whose press lost its answer: %v", err)
		}
		if n := len(srv.Resets()); n != 1 || srv.PowerState("") != "Off" {
			t.Fatalf("%d presses, power %s; want one press and Off", n, srv.PowerState(""))
		}
	})
	t.Run("press-ignored", func(t *testing.T) {
		srv := startSim(t, false, opts)
		srv.SetFaults(redfishsim.Faults{ResetIgnored: true})
		a := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "0.5"}))
		err := a.Off(ctxT(t))
		if !agents.IsUnknown(err) || !strings.Contains(err.Error(), "power button was pressed") {
			t.Fatalf("off with the press ignored: %v", err)
		}
		if n := len(srv.Resets()); n != 1 {
			t.Fatalf("%d presses, want 1", n)
		}
	})
	t.Run("etag-race", func(t *testing.T) {
		srv := startSim(t, false, opts)
		srv.SetFaults(redfishsim.Faults{ConcurrentEdits: 1})
		a := newAgent(t, simParams(t, srv, nil))
		if err := a.Off(ctxT(t)); err != nil {
			t.Fatalf("off: %v", err)
		}
		if n := len(srv.Resets()); n != 1 || srv.PowerState("") != "Off" {
			t.Fatalf("%d presses accepted, power %s", n, srv.PowerState(""))
		}
	})
}

// loginRaw opens a session on srv as another client would, and returns
// its Location.
func loginRaw(t *testing.T, srv *redfishsim.Server) string {
	t.Helper()
	body := strings.NewReader(fmt.Sprintf(`{"UserName":"root","Password":%q}`, secret))
	resp, err := http.Post(srv.URL+"/redfish/v1/SessionService/Sessions", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	return resp.Header.Get("Location")
}

func logoutRaw(t *testing.T, srv *redfishsim.Server, loc string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+loc, nil)
	req.SetBasicAuth("root", secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
}

// session-limit: with both slots taken by others, every action and the
// device check fail at once (not an unknown outcome, not a password
// problem), saying the BMC has no free session slot; once a slot is
// free they work. A held session is one of the slots: a check that finds
// none free logs it out and logs in anew instead of failing.
func TestQuirkSessionLimit(t *testing.T) {
	srv := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileSessionLimit})
	first, _ := loginRaw(t, srv), loginRaw(t, srv)
	a := newAgent(t, simParams(t, srv, nil))
	ctx := ctxT(t)
	check := func(what string, err error) {
		t.Helper()
		if err == nil || agents.IsUnknown(err) || errors.Is(err, agents.ErrAuth) {
			t.Fatalf("%s with no free slot: %v", what, err)
		}
		if !strings.Contains(err.Error(), "no free session slot") || !strings.Contains(err.Error(), "Base.1.8.SessionLimitExceeded") {
			t.Fatalf("%s: the error does not say the BMC has no free session slot: %v", what, err)
		}
	}
	refused := srv.LoginsRefused()
	check("off", a.Off(ctx))
	if n := srv.LoginsRefused() - refused; n != 1 {
		t.Fatalf("%d logins refused for one off; a full table is not retried at once", n)
	}
	_, err := a.Status(ctx)
	check("status", err)
	check("monitor", a.Monitor(ctx))
	check("check", a.Check(ctx, true))
	t.Logf("device health: %v", a.Check(ctx, false))
	if len(srv.Resets()) != 0 || srv.PowerState("") != "On" {
		t.Fatal("a reset was sent")
	}

	logoutRaw(t, srv, first)
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off with a free slot: %v", err)
	}
	if n := srv.OpenSessions(); n != 1 {
		t.Fatalf("%d sessions open after the off, want the other client's 1", n)
	}
	// The agent's held session takes the last slot; checks go on.
	for i := range 3 {
		if err := a.Check(ctx, true); err != nil {
			t.Fatalf("check %d holding the last slot: %v", i, err)
		}
		if !a.Holds() || srv.OpenSessions() != 2 {
			t.Fatalf("check %d: holds %v, %d sessions open", i, a.Holds(), srv.OpenSessions())
		}
	}
	if err := a.On(ctx); err != nil {
		t.Fatalf("on through the held session: %v", err)
	}
	if err := a.Reboot(ctx); err != nil {
		t.Fatalf("reboot through the held session: %v", err)
	}
	wantStatus(t, a, agents.StateOn)
	a.Drop()
	if n := srv.OpenSessions(); n != 1 {
		t.Fatalf("%d sessions open after drop", n)
	}
}

// slow-task: a reset answers 202 with a task monitor whose task reads
// Running long after the power went off. Off succeeds as soon as
// PowerState reads Off, within power_timeout however long the task runs;
// never before PowerState reads Off, even when the task says Completed.
func TestQuirkSlowResetTask(t *testing.T) {
	t.Run("power-first", func(t *testing.T) {
		srv := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileSlowTask, TaskDelay: 3 * time.Second})
		a := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "2"}))
		ctx := ctxT(t)
		start := time.Now()
		if err := a.Off(ctx); err != nil {
			t.Fatalf("off: %v", err)
		}
		if el := time.Since(start); el > 1500*time.Millisecond {
			t.Fatalf("off took %v: it waited on the task, not on PowerState", el)
		}
		if p := srv.PowerState(""); p != "Off" {
			t.Fatalf("off returned while the BMC reads %s", p)
		}
		if err := a.On(ctx); err != nil {
			t.Fatalf("on: %v", err)
		}
		if err := a.Reboot(ctx); err != nil {
			t.Fatalf("reboot: %v", err)
		}
		wantStatus(t, a, agents.StateOn)
		if err := a.Monitor(ctx); err != nil {
			t.Fatalf("monitor: %v", err)
		}
		wantNoSessions(t, srv)
	})
	t.Run("power-later", func(t *testing.T) {
		srv := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileSlowTask, TaskDelay: 3 * time.Second, PowerOffDelay: 600 * time.Millisecond})
		a := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "2"}))
		start := time.Now()
		if err := a.Off(ctxT(t)); err != nil {
			t.Fatalf("off: %v", err)
		}
		if el := time.Since(start); el < 600*time.Millisecond || srv.PowerState("") != "Off" {
			t.Fatalf("off returned after %v, the BMC reads %s", el, srv.PowerState(""))
		}
	})
	t.Run("task-completes-power-stays", func(t *testing.T) {
		srv := startSim(t, false, redfishsim.Options{Profile: redfishsim.ProfileSlowTask, TaskDelay: 200 * time.Millisecond})
		srv.SetFaults(redfishsim.Faults{ResetIgnored: true})
		a := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "1"}))
		err := a.Off(ctxT(t))
		if err == nil || !strings.Contains(err.Error(), "PowerState still On") {
			t.Fatalf("off whose task completed with the power on: %v", err)
		}
	})
	t.Run("engine-default-30s-task", func(t *testing.T) {
		srv := startSim(t, true, redfishsim.Options{Profile: redfishsim.ProfileSlowTask})
		reg := agents.NewRegistry()
		reg.Register(Kind())
		eng := stonith.NewEngine(reg, testLogger())
		start := time.Now()
		rec := eng.Fence(ctxT(t), stonith.Request{Target: "node1", Action: fencing.ActionOff, ID: 1, Epoch: 1,
			Topology: stonith.Topology{{Devices: []stonith.Target{{Device: "bmc1", Agent: "redfish", Params: simParams(t, srv, nil), Timeout: 20 * time.Second}}}}})
		if rec.Outcome != fencing.OutcomeSuccess || srv.PowerState("") != "Off" {
			t.Fatalf("fence: %s: %s (power %s)", rec.Outcome, rec.Error, srv.PowerState(""))
		}
		t.Logf("fence with a 30s reset task confirmed in %v", time.Since(start).Round(time.Millisecond))
	})
}

// BenchmarkQuirkOffReadBack measures one off and its read-back (login,
// read the system, the reset, PowerState read back Off, logout) on each
// quirk profile at its defaults, over HTTPS: sushy by Basic auth,
// slow-off through its 5s of PoweringOff, push-button by a press,
// session-limit with one of its 2 slots taken by another client,
// slow-task with its 30s task. It reports the median.
//
//	go test ./agents/redfish -run '^$' -bench QuirkOffReadBack -benchtime 5x
func BenchmarkQuirkOffReadBack(b *testing.B) {
	for _, prof := range []string{redfishsim.ProfileDMTF, redfishsim.ProfileSushy, redfishsim.ProfileSlowOff,
		redfishsim.ProfilePushButton, redfishsim.ProfileSessionLimit, redfishsim.ProfileSlowTask} {
		b.Run(prof, func(b *testing.B) {
			srv := startSim(b, true, redfishsim.Options{Profile: prof})
			a := newAgent(b, simParams(b, srv, agents.Params{"power_timeout": "20"}))
			ctx := context.Background()
			if prof == redfishsim.ProfileSessionLimit {
				// Another client holds one of the two slots.
				c, err := New(simParams(b, srv, nil), nil)
				if err != nil {
					b.Fatal(err)
				}
				s, err := c.open(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer s.close()
			}
			if _, err := a.Status(ctx); err != nil {
				b.Fatal(err)
			}
			var times []time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := srv.SetPowerState("", "On"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if err := a.Off(ctx); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(t0))
				if p := srv.PowerState(""); p != "Off" {
					b.Fatalf("off returned, the BMC reads %s", p)
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
			b.Logf("%s: off + read-back median %v over %d", prof, times[len(times)/2].Round(100*time.Microsecond), len(times))
		})
	}
}

// A service root without Links.Sessions but with a SessionService (older
// firmware) still has sessions: the agent logs in at DSP0266's URI and
// does not fall back to Basic auth.
func TestQuirkRootWithoutLinksSessions(t *testing.T) {
	sim, err := redfishsim.New(redfishsim.Options{Users: []redfishsim.User{{Name: "root", Password: secret}}})
	if err != nil {
		t.Fatal(err)
	}
	var basic sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			basic.Store(r.URL.Path, true)
		}
		if strings.TrimSuffix(r.URL.Path, "/") != "/redfish/v1" {
			sim.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, r)
		var root map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &root); err != nil {
			t.Errorf("service root: %v", err)
		}
		delete(root, "Links")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(root)
	}))
	t.Cleanup(func() { srv.Close(); sim.Close() })
	host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	a, logs := newCapturedAgent(t, agents.Params{"ip": host, "ipport": port, "plain_http": "1", "username": "root", "password": secret})
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off: %v", err)
	}
	if sim.SessionsCreated() != 1 || sim.OpenSessions() != 0 || sim.PowerState("") != "Off" {
		t.Fatalf("%d sessions created, %d open, power %s", sim.SessionsCreated(), sim.OpenSessions(), sim.PowerState(""))
	}
	basic.Range(func(k, _ any) bool { t.Errorf("Basic credentials sent to %v", k); return true })
	if logs.lines(fallbackLine) != 0 {
		t.Fatalf("fell back:\n%s", logs)
	}
}

// Which login answers mean "no free session slot", and which do not.
func TestNoSlotRecognised(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		full   bool
	}{
		{503, `{"error":{"code":"Base.1.8.GeneralError","message":"See ExtendedInfo","@Message.ExtendedInfo":[{"MessageId":"Base.1.8.SessionLimitExceeded","Message":"The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation."}]}}`, true},
		{400, `{"error":{"@Message.ExtendedInfo":[{"MessageId":"IDRAC.2.8.RAC0218","Message":"The maximum number of user sessions is reached."}],"code":"Base.1.12.GeneralError","message":"A general error has occurred."}}`, true},
		{403, `{"error":{"code":"Base.1.4.SessionLimitExceeded","message":"session limit"}}`, true},
		{503, `{"error":{"code":"iLO.0.10.ExtendedInfo","message":"No sessions available"}}`, true},
		{500, `{"error":{"message":"Insufficient resources to create a new session"}}`, true},
		{401, `{"error":{"code":"Base.1.0.GeneralError","message":"Incorrect username or password"}}`, false},
		{401, `{"error":{"message":"too many failed session logins: account locked"}}`, false},
		{503, `{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.8.ServiceTemporarilyUnavailable","Message":"Retry in 1 seconds."}]}}`, false},
		{400, `{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.8.PropertyMissing","Message":"The property UserName is a required property of the session."}]}}`, false},
	} {
		err := asNoSlot(fromGofish(schemas.ConstructError(tc.status, []byte(tc.body))))
		if isNoSlot(err) != tc.full {
			t.Errorf("%d %s: no free slot = %v, want %v (%v)", tc.status, tc.body, isNoSlot(err), tc.full, err)
		}
		if tc.full && (isAuth(err) || transient(context.Background(), err)) {
			t.Errorf("%d: a full session table taken for a password problem or a transient one: %v", tc.status, err)
		}
		if !tc.full && tc.status == 401 && !isAuth(err) {
			t.Errorf("a refused password is no longer an auth failure: %v", err)
		}
	}
}

// A graceful shutdown that hangs (the operating system stuck unmounting
// the shared storage, say) reads PoweringOff for ever. A fence does not
// wait for it: Off sends ForceOff, and returns once the read-back says
// Off. A BMC that refuses resets while powering off (409) leaves the
// wait, and the read-back still decides.
func TestOffCutsAHungShutdown(t *testing.T) {
	srv := startSim(t, false, redfishsim.Options{})
	a := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "5"}))
	ctx := ctxT(t)
	if err := srv.SetPowerState("", "PoweringOff"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, a, agents.StateOn)
	start := time.Now()
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off during a hung shutdown: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("off took %v: it waited for the shutdown", el)
	}
	if p := srv.PowerState(""); p != "Off" {
		t.Fatalf("off returned while the BMC reads %s", p)
	}
	if got := resetTypes(srv.Sim); !slices.Equal(got, []string{"ForceOff"}) {
		t.Fatalf("resets %v, want one ForceOff", got)
	}

	// The BMC takes no reset while powering off: the off waits for the
	// shutdown, and a power_timeout that ends first is no success.
	if err := srv.SetPowerState("", "PoweringOff"); err != nil {
		t.Fatal(err)
	}
	srv.SetFaults(redfishsim.Faults{BusyWhilePoweringOff: true})
	short := newAgent(t, simParams(t, srv, agents.Params{"power_timeout": "0.5"}))
	if err := short.Off(ctx); err == nil || !strings.Contains(err.Error(), "PoweringOff") {
		t.Fatalf("off against a busy BMC during a hung shutdown: %v", err)
	}
	go func() { time.Sleep(300 * time.Millisecond); srv.SetPowerState("", "Off") }()
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off once the shutdown ends: %v", err)
	}
	wantNoSessions(t, srv)
}
