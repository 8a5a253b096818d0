package stonith

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/stonith/fencing"
)

// The engine through the real ipmi agent against real in-process BMCs
// (go-ipmi's reference BMC, RMCP+ cipher 17) on loopback.

func startBMC(t *testing.T, cfg ipmisim.BMCConfig) *ipmisim.BMC {
	t.Helper()
	b, err := ipmisim.StartBMC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func ipmiTarget(name, host string, port int) Target {
	return Target{
		Device: name, Agent: "ipmi", Plug: "",
		Params: agents.Params{
			"ip": host, "ipport": strconv.Itoa(port), "username": "admin", "password": "password",
			"login_timeout": "1", "command_timeout": "0.3", "command_retries": "1", "power_timeout": "1",
		},
		Timeout: 5 * time.Second,
	}
}

// deadPort returns a loopback UDP port nothing listens on.
func deadPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	return port
}

func ipmiEngine() *Engine {
	reg := agents.NewRegistry()
	reg.Register(ipmi.Kind())
	e := NewEngine(reg, nil)
	e.RetryDelay = 10 * time.Millisecond
	return e
}

func TestIPMITopology(t *testing.T) {
	e := ipmiEngine()
	a := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	b := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	topo := Topology{
		{Devices: []Target{ipmiTarget("dead-bmc", "127.0.0.1", deadPort(t))}},
		{Devices: []Target{ipmiTarget("psu-a", a.Host(), a.Port()), ipmiTarget("psu-b", b.Host(), b.Port())}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	rec := e.Fence(ctx, Request{Target: "node2", Action: fencing.ActionOff, Topology: topo, ID: 1, Epoch: 2})
	t.Logf("fence took %v: %s", time.Since(start), summary(rec))
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("outcome %s (%s)", rec.Outcome, rec.Error)
	}
	if a.PoweredOn() || b.PoweredOn() {
		t.Fatalf("success recorded but BMC power: a=%v b=%v", a.PoweredOn(), b.PoweredOn())
	}
	got := summary(rec)
	for _, want := range []string{"2/psu-a/off/1=success(off)", "2/psu-b/off/1=success(off)"} {
		if !strings.Contains(got, want) {
			t.Errorf("attempts %q lack %q", got, want)
		}
	}
	dead := rec.Attempts[0]
	if dead.Level != 1 || dead.Device != "dead-bmc" || dead.Result == fencing.ResultSuccess || dead.Error == "" {
		t.Fatalf("dead BMC attempt %+v", dead)
	}
	if b.PowerCommands() != 1 || a.PowerCommands() != 1 {
		t.Fatalf("power commands a=%d b=%d, want 1 each", a.PowerCommands(), b.PowerCommands())
	}

	// Unfence through level 2 brings both feeds back, confirmed.
	rec = e.Fence(ctx, Request{Target: "node2", Action: fencing.ActionOn, Topology: topo, Levels: []int{2}})
	if rec.Outcome != fencing.OutcomeSuccess || !a.PoweredOn() || !b.PoweredOn() {
		t.Fatalf("unfence %s (%s): a=%v b=%v", rec.Outcome, rec.Error, a.PoweredOn(), b.PoweredOn())
	}
}

// A BMC that acknowledges power-off and stays on, with a device timeout
// that ends while the engine is still reading the state back (shorter
// than power_timeout): the try is failed and names the state read, not
// unknown — every read that answered said on.
func TestIPMIStaysOnPastDeviceTimeout(t *testing.T) {
	e := ipmiEngine()
	b := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	b.SetIgnorePowerOff(true)
	tg := ipmiTarget("psu-b", b.Host(), b.Port())
	tg.Params["power_timeout"] = "20"
	tg.Timeout = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := e.Fence(ctx, Request{Target: "node2", Action: fencing.ActionOff, Topology: Topology{{Devices: []Target{tg}}}})
	t.Logf("%s: %s: %s", rec.Outcome, summary(rec), rec.Error)
	if rec.Outcome != fencing.OutcomeFailed || rec.Attempts[0].Result != fencing.ResultFailed || rec.Attempts[0].ReadBack != "on" ||
		!strings.Contains(rec.Error, "still read back on") {
		t.Fatalf("outcome %s (%s): %s", rec.Outcome, summary(rec), rec.Error)
	}
}

// One of the two BMCs acknowledges power-off and never powers off: the
// level fails, and the record is not a success.
func TestIPMIOneOfTwoFails(t *testing.T) {
	e := ipmiEngine()
	a := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	b := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	b.SetIgnorePowerOff(true)
	level2 := Level{Devices: []Target{ipmiTarget("psu-a", a.Host(), a.Port()), ipmiTarget("psu-b", b.Host(), b.Port())}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rec := e.Fence(ctx, Request{Target: "node2", Action: fencing.ActionOff, Topology: Topology{level2}})
	t.Logf("%s: %s", rec.Outcome, summary(rec))
	if rec.Outcome != fencing.OutcomeFailed {
		t.Fatalf("outcome %s, want failed (%s)", rec.Outcome, rec.Error)
	}
	if !strings.Contains(summary(rec), "1/psu-b/off/1=failed(on)") || !strings.Contains(rec.Error, "psu-b") || strings.Contains(rec.Error, "psu-a") {
		t.Fatalf("attempts %q error %q", summary(rec), rec.Error)
	}
	if !b.PoweredOn() {
		t.Fatal("the ignoring BMC powered off")
	}

	// Behind a dead first level, the outcome is unknown: the dead BMC may
	// have acted for all we know.
	a.SetPower(true)
	topo := Topology{{Devices: []Target{ipmiTarget("dead-bmc", "127.0.0.1", deadPort(t))}}, level2}
	rec = e.Fence(ctx, Request{Target: "node2", Action: fencing.ActionOff, Topology: topo})
	t.Logf("%s: %s", rec.Outcome, summary(rec))
	// A closed port gets no IPMI answer: the agent cannot tell what
	// happened, so the attempt and (with no level succeeding) the record
	// are unknown rather than failed.
	if rec.Outcome != fencing.OutcomeUnknown || rec.Attempts[0].Result != fencing.ResultUnknown {
		t.Fatalf("outcome %s (%s)", rec.Outcome, summary(rec))
	}
}
