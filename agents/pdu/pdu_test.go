package pdu

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosnmp/gosnmp"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/pdu/pdutest"
)

const apcCtl = "1.3.6.1.4.1.318.1.1.4.4.2.1.3."

// peek reads an INTEGER straight from the simulator, independently of the
// agent, to check what the agent claims.
func peek(t *testing.T, sim *pdutest.Sim, oid string) int {
	t.Helper()
	g := &gosnmp.GoSNMP{Target: sim.Host, Port: uint16(sim.Port), Community: "private", Version: gosnmp.Version2c, Timeout: time.Second, Retries: 1, Context: context.Background()}
	if err := g.Connect(); err != nil {
		t.Fatal(err)
	}
	defer g.Conn.Close()
	res, err := g.Get([]string{oid})
	if err != nil {
		t.Fatalf("peek %s: %v", oid, err)
	}
	return int(gosnmp.ToBigInt(res.Variables[0].Value).Int64())
}

func poke(t *testing.T, sim *pdutest.Sim, oid string, v int) {
	t.Helper()
	g := &gosnmp.GoSNMP{Target: sim.Host, Port: uint16(sim.Port), Community: "private", Version: gosnmp.Version2c, Timeout: time.Second, Retries: 1, Context: context.Background()}
	if err := g.Connect(); err != nil {
		t.Fatal(err)
	}
	defer g.Conn.Close()
	if _, err := g.Set([]gosnmp.SnmpPDU{{Name: oid, Type: gosnmp.Integer, Value: v}}); err != nil {
		t.Fatalf("poke %s: %v", oid, err)
	}
}

func newAgent(t *testing.T, p agents.Params) (*Agent, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	a, err := New(p, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	return a, &logs
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func wantState(t *testing.T, a *Agent, want agents.State) {
	t.Helper()
	got, err := a.Status(ctx(t))
	if err != nil || got != want {
		t.Fatalf("status = %v, %v; want %v", got, err, want)
	}
}

func TestAPCStatusOffOnReboot(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	for _, version := range []string{"1", "2c"} {
		t.Run("v"+version, func(t *testing.T) {
			a, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "community": "private", "snmp_version": version, "plug": "2"})
			wantState(t, a, agents.StateOn)
			if err := a.Off(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if v := peek(t, sim, apcCtl+"2"); v != 2 {
				t.Fatalf("after off, simulator outlet 2 = %d, want 2 (off)", v)
			}
			if v := peek(t, sim, apcCtl+"1"); v != 1 {
				t.Fatalf("outlet 1 was touched: %d", v)
			}
			wantState(t, a, agents.StateOff)
			if err := a.On(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if v := peek(t, sim, apcCtl+"2"); v != 1 {
				t.Fatalf("after on, simulator outlet 2 = %d", v)
			}
			if err := a.Reboot(ctx(t)); err != nil {
				t.Fatal(err)
			}
			wantState(t, a, agents.StateOn)
		})
	}
}

func TestAPCRebootPassesThroughOff(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	// A reboot must be off-confirmed-then-on; the simulator keeps no
	// history, so watch it from the outside while power_wait holds off.
	a, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "4", "power_wait": "0.4"})
	done := make(chan error, 1)
	go func() { done <- a.Reboot(ctx(t)) }()
	sawOff := false
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !sawOff {
		sawOff = peek(t, sim, apcCtl+"4") == 2
		time.Sleep(30 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !sawOff {
		t.Fatal("outlet 4 never read off during the reboot")
	}
	if v := peek(t, sim, apcCtl+"4"); v != 1 {
		t.Fatalf("after reboot outlet 4 = %d, want 1", v)
	}
}

func TestAPCOutletByNameAndList(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	a, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "node3"})
	if err := a.Off(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if v := peek(t, sim, apcCtl+"3"); v != 2 {
		t.Fatalf("outlet node3 = %d, want off", v)
	}
	ports, err := a.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 4 || ports[2] != (agents.Port{ID: "3", Alias: "node3"}) {
		t.Fatalf("list = %+v", ports)
	}
	b, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "node9"})
	err = b.Off(ctx(t))
	if err == nil || !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), `no outlet is named "node9"`) {
		t.Fatalf("off of unknown name: %v", err)
	}
}

func TestAPCSeveralOutletsOnePDU(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	a, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "3,4"})
	if err := a.Off(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"3", "4"} {
		if v := peek(t, sim, apcCtl+o); v != 2 {
			t.Fatalf("outlet %s = %d", o, v)
		}
	}
	// One outlet back on: the target is powered.
	poke(t, sim, apcCtl+"4", 1)
	wantState(t, a, agents.StateOn)
}

func TestStatusOfRebootingOutletIsUnknown(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	a, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "1"})
	poke(t, sim, apcCtl+"1", 3) // the simulator reads back 3 (reboot) forever
	st, err := a.Status(ctx(t))
	if st != agents.StateUnknown || !agents.IsUnknown(err) || !strings.Contains(err.Error(), "outlet 1") {
		t.Fatalf("status = %v, %v", st, err)
	}
}

func TestRaritanDetectedBySysObjectID(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/raritan"})
	const ctl = "1.3.6.1.4.1.13742.4.1.2.2.1.3."
	a, logs := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "2"})
	wantState(t, a, agents.StateOn)
	if !strings.Contains(logs.String(), "pdu_type=raritan_px") {
		t.Fatalf("family not detected as raritan_px: %s", logs)
	}
	if err := a.Off(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if v := peek(t, sim, ctl+"2"); v != 0 {
		t.Fatalf("raritan outlet 2 = %d, want 0 (off)", v)
	}
	wantState(t, a, agents.StateOff)
	if err := a.Reboot(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if v := peek(t, sim, ctl+"2"); v != 1 {
		t.Fatalf("raritan outlet 2 after reboot = %d", v)
	}
	// The wrong family for this PDU: the outlet table is not there.
	b, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "2", "pdu_type": "apc"})
	if err := b.Off(ctx(t)); !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "no such outlet") {
		t.Fatalf("apc tables on a raritan: %v", err)
	}
}

// The Eaton data accepts commands but its status never changes: a PDU that
// says yes and does nothing must not pass for fenced.
func TestEatonAcceptedButNeverOffFails(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/eaton"})
	a, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "node1", "power_timeout": "0.5"})
	wantState(t, a, agents.StateOn)
	err := a.Off(ctx(t))
	if err == nil || !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "outlet node1: reads 1, not off") {
		t.Fatalf("off = %v", err)
	}
	if v := peek(t, sim, "1.3.6.1.4.1.534.6.6.7.6.6.1.3.0.1"); v != 0 {
		t.Fatalf("off command not sent to outletControlOffCmd: %d", v)
	}
	b, _ := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "2"})
	wantState(t, b, agents.StateOff)
}

func TestDualPDU(t *testing.T) {
	a1 := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	a2 := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	// Outlet 3 on PDU A, outlet 4 on PDU B, written both ways.
	forms := []agents.Params{
		{"ip": a1.Host, "ipport": strconv.Itoa(a1.Port), "plug": "3," + a2.Addr + "/4"},
		{"ip": "unused.invalid", "plug": a1.Addr + "/3," + a2.Addr + "/4"},
	}
	for i, p := range forms {
		p["snmp_version"] = "2c"
		p["shell_timeout"] = "0.3"
		a, _ := newAgent(t, p)
		if i == 1 {
			if len(a.cfg.pdus) != 2 {
				t.Fatalf("qualified plugs give %d PDUs", len(a.cfg.pdus))
			}
		}
		if err := a.Off(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if peek(t, a1, apcCtl+"3") != 2 || peek(t, a2, apcCtl+"4") != 2 {
			t.Fatal("not both outlets off")
		}
		wantState(t, a, agents.StateOff)
		if err := a.On(ctx(t)); err != nil {
			t.Fatal(err)
		}
		wantState(t, a, agents.StateOn)
	}
}

func TestDualPDUOneDownFailsNamingIt(t *testing.T) {
	a1 := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	a2 := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	// The same outlet on both feeds: ip lists both PDUs.
	a, _ := newAgent(t, agents.Params{"ip": a1.Host, "ipport": strconv.Itoa(a1.Port), "plug": "3," + a2.Addr + "/3", "snmp_version": "2c", "shell_timeout": "0.3"})
	a2.Stop()
	start := time.Now()
	err := a.Off(ctx(t))
	if err == nil {
		t.Fatal("off succeeded with one PDU down")
	}
	t.Logf("error after %s: %v", time.Since(start), err)
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "pdu "+a2.Addr) || !strings.Contains(err.Error(), "outlets 3") {
		t.Fatalf("error does not say failed on %s outlet 3: %v", a2.Addr, err)
	}
	if strings.Contains(err.Error(), a1.Addr) {
		t.Fatalf("error blames the live PDU: %v", err)
	}
	// Nothing was switched on the live PDU: half a fence is no fence.
	if v := peek(t, a1, apcCtl+"3"); v != 1 {
		t.Fatalf("live PDU outlet 3 = %d, want still on", v)
	}
}

func writeSecret(t *testing.T, name, value string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestV3AuthPrivSHAAES(t *testing.T) {
	const user, auth, priv = "fencer", "auth-secret-42", "priv-secret-42"
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc", V3: pdutest.V3User{Name: user, AuthKey: auth, PrivKey: priv}})
	p := agents.Params{
		"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "plug": "1", "snmp_version": "3",
		"username": user, "snmp_sec_level": "authPriv", "snmp_auth_prot": "SHA", "snmp_priv_prot": "AES",
		"password_file": writeSecret(t, "auth", auth), "snmp_priv_passwd_file": writeSecret(t, "priv", priv),
		"snmp_context": "private",
	}
	a, logs := newAgent(t, p)
	if err := a.Off(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if v := peek(t, sim, apcCtl+"1"); v != 2 {
		t.Fatalf("v3 off: outlet 1 = %d", v)
	}
	wantState(t, a, agents.StateOff)

	p["password_file"] = writeSecret(t, "auth2", "wrong-secret-99")
	p["shell_timeout"] = "0.3"
	b, logs2 := newAgent(t, p)
	err := b.On(ctx(t))
	if err == nil {
		t.Fatal("on with a wrong v3 passphrase succeeded")
	}
	t.Logf("wrong passphrase: %v", err)
	if !errors.Is(err, agents.ErrAuth) {
		t.Errorf("wrong passphrase is not an authentication failure: %v", err)
	}
	if v := peek(t, sim, apcCtl+"1"); v != 2 {
		t.Fatalf("outlet switched with wrong credentials: %d", v)
	}
	for _, s := range []string{auth, priv, "wrong-secret-99"} {
		if strings.Contains(err.Error(), s) || strings.Contains(logs.String(), s) || strings.Contains(logs2.String(), s) {
			t.Fatalf("secret %q leaked", s)
		}
	}
}

func TestWrongCommunityFailsWithoutLeaking(t *testing.T) {
	sim := pdutest.Start(t, pdutest.Options{DataDir: "testdata/apc"})
	a, logs := newAgent(t, agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "1",
		"community_file": writeSecret(t, "community", "s3cret-community"), "shell_timeout": "0.2"})
	err := a.Off(ctx(t))
	if !errors.Is(err, agents.ErrFailed) {
		t.Fatalf("off with wrong community = %v", err)
	}
	if strings.Contains(err.Error(), "s3cret-community") || strings.Contains(logs.String(), "s3cret-community") {
		t.Fatal("community leaked")
	}
	if v := peek(t, sim, apcCtl+"1"); v != 1 {
		t.Fatalf("outlet switched: %d", v)
	}
}

func TestNewValidates(t *testing.T) {
	ok := agents.Params{"ip": "127.0.0.1", "plug": "1"}
	if _, err := New(ok, nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		p    agents.Params
		want string
	}{
		{agents.Params{"plug": "1"}, "parameter ip: required"},
		{agents.Params{"ip": "127.0.0.1"}, "parameter plug: required"},
		{agents.Params{"ip": "127.0.0.1", "plug": "0"}, "outlets are numbered from 1"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "ipport": "70000"}, "parameter ipport"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "snmp_version": "4"}, "parameter snmp_version"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "pdu_type": "acme"}, "parameter pdu_type"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "snmp_version": "3"}, "parameter username"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "snmp_version": "3", "username": "u", "snmp_sec_level": "authPriv", "password": "x"}, "parameter snmp_priv_passwd"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "snmp_version": "3", "username": "u", "password": "x", "snmp_auth_prot": "SHA3"}, "parameter snmp_auth_prot"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "community_file": "/nonexistent/c"}, "parameter community_file"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "bogus": "1"}, "parameter bogus: unknown"},
		{agents.Params{"ip": "127.0.0.1", "plug": "1", "power_timeout": "-1"}, "parameter power_timeout"},
		{agents.Params{"ip": "127.0.0.1", "plug": "127.0.0.1:99999/1"}, "not a UDP port"},
	}
	for _, c := range cases {
		_, err := New(c.p, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%v) = %v; want error containing %q", c.p, err, c.want)
		}
	}
	// Deprecated fence_apc_snmp names still work.
	if _, err := New(agents.Params{"ipaddr": "127.0.0.1", "port": "2", "login": "u", "passwd": "p", "snmp_version": "3"}, nil); err != nil {
		t.Fatalf("aliases: %v", err)
	}
}

func TestVendorBySysObjectID(t *testing.T) {
	for id, want := range map[string]string{
		".1.3.6.1.4.1.318.1.3.4.2": "apc",
		"1.3.6.1.4.1.318.1.3.4.5":  "apc_rpdu",
		"1.3.6.1.4.1.318.1.3.4.50": "apc",
		"1.3.6.1.4.1.534.6.6.7":    "eaton_epdu",
		"1.3.6.1.4.1.13742.4":      "raritan_px",
		"1.3.6.1.4.1.1718.3":       "servertech_sentry3",
		"1.3.6.1.4.1.3180":         "",
		"1.3.6.1.4.1.9.1.1":        "",
	} {
		v := vendorBySysObjectID(id)
		got := ""
		if v != nil {
			got = v.Name
		}
		if got != want {
			t.Errorf("vendorBySysObjectID(%s) = %q, want %q", id, got, want)
		}
	}
}

func TestPlugForms(t *testing.T) {
	a, err := New(agents.Params{"ip": "10.0.0.1, 10.0.0.2", "ipport": "1161", "plug": "3,4,[::1]:162/7,pdu-c/node5,3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range a.cfg.pdus {
		got = append(got, p.String()+"="+strings.Join(p.outlets, "+"))
	}
	want := "10.0.0.1:1161=3+4 10.0.0.2:1161=3+4 [::1]:162=7 pdu-c:1161=node5"
	if strings.Join(got, " ") != want {
		t.Fatalf("pdus = %s, want %s", strings.Join(got, " "), want)
	}
}

func FuzzNew(f *testing.F) {
	f.Add("127.0.0.1", "3,4", "161")
	f.Add("a,b", "[::1]:1/2,x/", "0")
	f.Fuzz(func(t *testing.T, ip, plug, port string) {
		a, err := New(agents.Params{"ip": ip, "plug": plug, "ipport": port}, nil)
		if err == nil && len(a.cfg.pdus) == 0 {
			t.Fatalf("accepted ip=%q plug=%q with no PDU", ip, plug)
		}
	})
}
