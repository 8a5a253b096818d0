package exec

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosnmp/gosnmp"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/agents/pdu/pdutest"
)

// The real Debian fence-agents, run unmodified through the adapter against
// real simulators.

func requireShortSkip(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Debian fence-agents against simulators")
	}
}

const apcCtl = "1.3.6.1.4.1.318.1.1.4.4.2.1.3."

func snmpPeek(t *testing.T, sim *pdutest.Sim, oid string) int {
	t.Helper()
	g := &gosnmp.GoSNMP{Target: sim.Host, Port: uint16(sim.Port), Community: "private", Version: gosnmp.Version2c, Timeout: time.Second, Retries: 1, Context: context.Background()}
	if err := g.Connect(); err != nil {
		t.Fatal(err)
	}
	defer g.Conn.Close()
	res, err := g.Get([]string{oid})
	if err != nil {
		t.Fatal(err)
	}
	return int(gosnmp.ToBigInt(res.Variables[0].Value).Int64())
}

func TestFenceApcSnmp(t *testing.T) {
	requireShortSkip(t)
	sim := pdutest.Start(t, pdutest.Options{DataDir: "../pdu/testdata/apc"})
	a := newAgent(t, agents.Params{
		"agent": "fence_apc_snmp", "ip": sim.Host, "ipport": strconv.Itoa(sim.Port),
		"community_file": secretFile(t, "private"), "snmp_version": "2c", "plug": "2",
	})
	wantState(t, a, agents.StateOn)
	if err := a.Off(tctx(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	if v := snmpPeek(t, sim, apcCtl+"2"); v != 2 {
		t.Fatalf("outlet 2 = %d after off", v)
	}
	wantState(t, a, agents.StateOff)
	if err := a.On(tctx(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	if v := snmpPeek(t, sim, apcCtl+"2"); v != 1 {
		t.Fatalf("outlet 2 = %d after on", v)
	}
	wantState(t, a, agents.StateOn)
	ports, err := a.List(tctx(t, 60*time.Second))
	if err != nil || len(ports) != 4 || ports[0].Alias != "node1" {
		t.Fatalf("list = %+v, %v", ports, err)
	}

	// A wrong community: the agent times out and says so; we say failed.
	b := newAgent(t, agents.Params{
		"agent": "fence_apc_snmp", "ip": sim.Host, "ipport": strconv.Itoa(sim.Port),
		"community_file": secretFile(t, "wrong-community-77"), "snmp_version": "2c", "plug": "2",
	})
	st, err := b.Status(tctx(t, 60*time.Second))
	if err == nil || st != agents.StateUnknown {
		t.Fatalf("status with wrong community = %v, %v", st, err)
	}
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("no RunError in %v", err)
	}
	if s := re.Stderr(); !strings.Contains(s, "No Response") || strings.Contains(s, "wrong-community-77") || strings.Contains(err.Error(), "wrong-community-77") {
		t.Fatalf("stderr %q / error %v: empty or leaks the community", s, err)
	}
	t.Logf("wrong community: %v", err)
}

func TestFenceIpmilan(t *testing.T) {
	requireShortSkip(t)
	sim, err := ipmisim.StartOpenIPMI(context.Background(), ipmisim.OpenIPMIConfig{Dir: t.TempDir(), Password: "ipmi-secret-1", KillWait: time.Second, PowerOffWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	a := newAgent(t, agents.Params{
		"agent": "fence_ipmilan", "ip": sim.Host, "ipport": strconv.Itoa(sim.Port),
		"username": "admin", "password_file": secretFile(t, "ipmi-secret-1"),
		"lanplus": "1", "cipher": "3",
	})
	wantState(t, a, agents.StateOn)
	if !sim.HostRunning() {
		t.Fatal("host not running at start")
	}
	if err := a.Off(tctx(t, 60*time.Second)); err != nil {
		t.Fatalf("off: %v (stderr %q)", err, a.LastStderr())
	}
	if sim.HostRunning() {
		t.Fatal("fence_ipmilan off confirmed but the host process still runs")
	}
	wantState(t, a, agents.StateOff)
	if err := a.On(tctx(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantState(t, a, agents.StateOn)
	deadline := time.Now().Add(5 * time.Second)
	for !sim.HostRunning() {
		if time.Now().After(deadline) {
			t.Fatal("host process not started by on")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// method=cycle would ask fence_ipmilan for a power cycle it never runs
// here (reboot is off, read back, then on): refused when the device is
// built, with the reason; onoff, which is what happens, is accepted.
func TestMethodCycleRefused(t *testing.T) {
	requireShortSkip(t)
	p := agents.Params{"agent": "fence_ipmilan", "ip": "127.0.0.1", "username": "admin", "password": "x", "lanplus": "1"}
	p["method"] = "cycle"
	_, err := New(p, nil)
	if err == nil || !strings.Contains(err.Error(), "parameter method: cycle is refused") || !strings.Contains(err.Error(), "confirmed by reading the status back") {
		t.Fatalf("method=cycle: %v", err)
	}
	p["method"] = "onoff"
	if _, err := New(p, nil); err != nil {
		t.Fatalf("method=onoff: %v", err)
	}
	// The front-end's view: the program's parameters follow exec's own.
	decl, err := ParamsFor(agents.Params{"agent": "fence_ipmilan"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]agents.Param{}
	for _, d := range decl {
		byName[d.Name] = d
	}
	if byName["agent"].Name == "" || byName["lanplus"].Type != "boolean" || !byName["password"].Secret || byName["password_script"].Secret || byName["action"].Name != "" {
		t.Fatalf("ParamsFor(fence_ipmilan) = %+v", decl)
	}
}
