package redfish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// attacker is a second host a hostile BMC's links point at. It records
// everything it receives and answers like a compliant BMC of its own (a
// clone that says yes to any credentials), so that an agent that follows a
// foreign link could believe it fenced the node.
type attacker struct {
	addr string
	sim  *redfishsim.Sim

	mu   sync.Mutex
	seen []string
}

func startAttacker(t *testing.T, profile string) *attacker {
	t.Helper()
	sim, err := redfishsim.New(redfishsim.Options{Profile: profile, Users: []redfishsim.User{{Name: "root", Password: secret}}})
	if err != nil {
		t.Fatal(err)
	}
	at := &attacker{sim: sim}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		at.mu.Lock()
		at.seen = append(at.seen, fmt.Sprintf("%s %s X-Auth-Token=%q Authorization=%q body=%q",
			r.Method, r.URL, r.Header.Get("X-Auth-Token"), r.Header.Get("Authorization"), body))
		at.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.Header.Del("X-Auth-Token")
		r.Header.Del("Authorization")
		r.SetBasicAuth("root", secret)
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); sim.Close() })
	at.addr = strings.TrimPrefix(srv.URL, "http://")
	// Its own links point at itself the same way, so a client that came
	// over would send the reset and read the state back here.
	self := "@" + at.addr
	sim.SetFaults(redfishsim.Faults{ForeignLinks: map[redfishsim.Link]string{
		redfishsim.LinkSystemID: self, redfishsim.LinkReset: self, redfishsim.LinkTaskLocation: self,
	}})
	return at
}

// received returns what the attacker was sent.
func (at *attacker) received() []string {
	at.mu.Lock()
	defer at.mu.Unlock()
	return append([]string(nil), at.seen...)
}

func (at *attacker) wantNothing(t *testing.T) {
	t.Helper()
	if got := at.received(); len(got) > 0 {
		leaked := ""
		if strings.Contains(strings.Join(got, "\n"), secret) {
			leaked = " (the password among them)"
		}
		t.Fatalf("the other host received %d requests%s:\n%s", len(got), leaked, strings.Join(got, "\n"))
	}
}

// hostileLinks is one case per kind of link a BMC hands the agent: the
// profile that has it, and the words the agent's error must use for it.
var hostileLinks = []struct {
	link    redfishsim.Link
	profile string
	names   string
	basic   bool
}{
	{redfishsim.LinkSystems, redfishsim.ProfileDMTF, "service root Systems link", false},
	{redfishsim.LinkSystems, redfishsim.ProfileDMTF, "service root Systems link", true},
	{redfishsim.LinkSessions, redfishsim.ProfileDMTF, "service root Links.Sessions link", false},
	{redfishsim.LinkSessionLocation, redfishsim.ProfileDMTF, "session Location", false},
	{redfishsim.LinkMember, redfishsim.ProfileDMTF, "Systems collection member", false},
	{redfishsim.LinkMember, redfishsim.ProfileDMTF, "Systems collection member", true},
	{redfishsim.LinkActionInfo, redfishsim.ProfileOpenBMC, "#ComputerSystem.Reset @Redfish.ActionInfo", false},
	{redfishsim.LinkReset, redfishsim.ProfileDMTF, "#ComputerSystem.Reset target", false},
	{redfishsim.LinkReset, redfishsim.ProfileDMTF, "#ComputerSystem.Reset target", true},
	{redfishsim.LinkTaskLocation, redfishsim.ProfileOpenBMC, "task monitor Location", false},
	// No session service: the agent falls back to Basic auth by itself.
	{redfishsim.LinkSystems, redfishsim.ProfileSushy, "service root Systems link", false},
	{redfishsim.LinkMember, redfishsim.ProfileSushy, "Systems collection member", false},
	{redfishsim.LinkReset, redfishsim.ProfileSushy, "#ComputerSystem.Reset target", false},
}

func hostileName(link redfishsim.Link, profile string, basic bool) string {
	switch {
	case basic:
		return string(link) + "/basic-auth"
	case profile == redfishsim.ProfileSushy:
		return string(link) + "/no-session-service"
	}
	return string(link)
}

// A BMC whose link names another host (a text join onto the base URL would
// change the host): the agent sends that host nothing — no password, no
// token, no Authorization header — and fails, naming the link; it never
// reports success. Checked in-process and through `fenced agent redfish`.
//
// Three spellings of the other host: "@host:port/..." (which a text join
// turns into userinfo@host:port), "//host:port/..." (network-path
// reference) and "http://host:port/..." (absolute URL).
func TestHostileLinks(t *testing.T) {
	for _, tc := range hostileLinks {
		for _, form := range []string{"@", "//", "http://"} {
			t.Run(hostileName(tc.link, tc.profile, tc.basic)+"/"+form, func(t *testing.T) { testHostileLink(t, tc.link, tc.profile, tc.names, tc.basic, form) })
		}
	}
	logSink.Lock()
	defer logSink.Unlock()
	if strings.Contains(logSink.String(), secret) {
		t.Fatal("the password appears in the logs")
	}
}

func testHostileLink(t *testing.T, kind redfishsim.Link, profile, names string, basic bool, form string) {
	at := startAttacker(t, profile)
	srv := startSim(t, false, redfishsim.Options{Profile: profile})
	link := form + at.addr
	srv.SetFaults(redfishsim.Faults{ForeignLinks: map[redfishsim.Link]string{kind: link}})
	extra := agents.Params{}
	if basic {
		extra["basic_auth"] = "1"
	}
	a := newAgent(t, simParams(t, srv, extra))
	err := a.Off(ctxT(t))
	at.wantNothing(t)
	if err == nil {
		t.Fatalf("off succeeded; the BMC reads %s", srv.PowerState(""))
	}
	if !errors.Is(err, agents.ErrFailed) || agents.IsUnknown(err) {
		t.Fatalf("want a failure (not an unknown outcome): %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, names) || !strings.Contains(msg, link) {
		t.Fatalf("error does not name the %s %q: %v", names, link, err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatal("password in the error")
	}
	if kind != redfishsim.LinkTaskLocation {
		// Refused before the reset: nothing was sent to the BMC either.
		if n := len(srv.Resets()); n != 0 || srv.PowerState("") != "On" {
			t.Fatalf("%d resets reached the BMC, power %s", n, srv.PowerState(""))
		}
	}
	t.Logf("off: %v", err)

	// The same BMC through the FenceAgentAPI front-end, a real process.
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if err := srv.SetPowerState("", "On"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runAgentStdin(t, srv, basic, "off")
	at.wantNothing(t)
	if code != 1 || strings.Contains(stdout, "Success") {
		t.Fatalf("fenced agent redfish -o off: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "Failed: ") || !strings.Contains(stderr, names) || !strings.Contains(stderr, link) {
		t.Fatalf("fenced agent redfish: stderr does not report the failure naming the %s %q: %q", names, link, stderr)
	}
}

// runAgentStdin runs `fenced agent redfish` against srv (plain HTTP) with
// its parameters on stdin and returns the exit code and both outputs.
func runAgentStdin(t *testing.T, srv *redfishsim.Server, basic bool, action string) (int, string, string) {
	t.Helper()
	host, port, _ := strings.Cut(srv.Addr, ":")
	in := fmt.Sprintf("action=%s\nip=%s\nipport=%s\nusername=root\npassword=%s\nplain_http=1\npower_timeout=3\nnodename=node1\n",
		action, host, port, secret)
	if basic {
		in += "basic_auth=1\n"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fencedBin, "agent", "redfish")
	cmd.Stdin = strings.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if strings.Contains(stdout.String()+stderr.String(), secret) {
		t.Fatalf("password in the agent's output: %q %q", stdout.String(), stderr.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("fenced agent: %v", err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// The ComputerSystem's own @odata.id is not a link the agent follows: the
// read-back, by the agent and by the stonith engine, comes from the URI the
// system was read at, on the BMC the off went to.
func TestHostileSystemIDReadBackFromTheBMC(t *testing.T) {
	at := startAttacker(t, redfishsim.ProfileDMTF)
	srv := startSim(t, false, redfishsim.Options{PowerOffDelay: 50 * time.Millisecond})
	srv.SetFaults(redfishsim.Faults{ForeignLinks: map[redfishsim.Link]string{redfishsim.LinkSystemID: "@" + at.addr}})

	reg := agents.NewRegistry()
	reg.Register(Kind())
	eng := stonith.NewEngine(reg, testLogger())
	p := simParams(t, srv, nil)
	rec := eng.Fence(ctxT(t), stonith.Request{Target: "node1", Action: fencing.ActionOff, ID: 1, Epoch: 1,
		Topology: stonith.Topology{{Devices: []stonith.Target{{Device: "bmc1", Agent: "redfish", Params: p, Timeout: 10 * time.Second}}}}})
	at.wantNothing(t)
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("fence: %s: %s", rec.Outcome, rec.Error)
	}
	if p := srv.PowerState(""); p != "Off" {
		t.Fatalf("fence succeeded, the BMC reads %s", p)
	}
	if n := len(srv.Resets()); n != 1 {
		t.Fatalf("%d resets reached the BMC, want 1", n)
	}
}

// The stonith engine over a BMC whose member link names another host: the
// fence fails, every attempt names the link, and the other host hears
// nothing across the engine's retries.
func TestHostileLinkThroughEngine(t *testing.T) {
	at := startAttacker(t, redfishsim.ProfileDMTF)
	srv := startSim(t, false, redfishsim.Options{})
	link := "@" + at.addr
	srv.SetFaults(redfishsim.Faults{ForeignLinks: map[redfishsim.Link]string{redfishsim.LinkMember: link}})
	reg := agents.NewRegistry()
	reg.Register(Kind())
	eng := stonith.NewEngine(reg, testLogger())
	eng.RetryDelay = 10 * time.Millisecond
	rec := eng.Fence(ctxT(t), stonith.Request{Target: "node1", Action: fencing.ActionOff, ID: 1, Epoch: 1,
		Topology: stonith.Topology{{Devices: []stonith.Target{{Device: "bmc1", Agent: "redfish", Params: simParams(t, srv, nil), Timeout: 10 * time.Second, Retries: 1}}}}})
	at.wantNothing(t)
	if rec.Outcome != fencing.OutcomeFailed {
		t.Fatalf("fence: %s: %s", rec.Outcome, rec.Error)
	}
	if len(rec.Attempts) != 2 {
		t.Fatalf("%d attempts, want 2", len(rec.Attempts))
	}
	for _, a := range rec.Attempts {
		if a.Result != fencing.ResultFailed || !strings.Contains(a.Error, "Systems collection member") || !strings.Contains(a.Error, link) {
			t.Fatalf("attempt %+v", a)
		}
	}
	if srv.PowerState("") != "On" || len(srv.Resets()) != 0 {
		t.Fatal("a reset reached the BMC")
	}
}
