package stonith

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/agents/redfish"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
	"github.com/fenced/fenced/stonith/fencing"
)

// keyChecker is a slog handler that fails on a record carrying the same
// key twice (from the logger's own attributes and the record's): a log
// parser keeping the last value would lose the first (the device's name
// under the BMC's address, once).
type keyChecker struct {
	t     *testing.T
	attrs []slog.Attr
	mu    *sync.Mutex
	lines *int
}

func (h keyChecker) Enabled(context.Context, slog.Level) bool { return true }
func (h keyChecker) Handle(_ context.Context, r slog.Record) error {
	seen := map[string]bool{}
	var keys []string
	check := func(a slog.Attr) bool {
		if seen[a.Key] {
			h.t.Errorf("log line %q has the key %s twice (keys %v)", r.Message, a.Key, append(keys, a.Key))
		}
		seen[a.Key] = true
		keys = append(keys, a.Key)
		return true
	}
	for _, a := range h.attrs {
		check(a)
	}
	r.Attrs(check)
	h.mu.Lock()
	*h.lines++
	h.mu.Unlock()
	return nil
}
func (h keyChecker) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}
func (h keyChecker) WithGroup(string) slog.Handler { return h }

// TestLogKeysUnique: a fence through the ipmi and redfish agents logs no
// line with a key twice.
func TestLogKeysUnique(t *testing.T) {
	lines := 0
	log := slog.New(keyChecker{t: t, mu: &sync.Mutex{}, lines: &lines}).With("node", "node1", "component", "stonith")
	reg := agents.NewRegistry()
	reg.Register(ipmi.Kind())
	reg.Register(redfish.Kind())
	e := NewEngine(reg, log)
	b := startBMC(t, ipmisim.BMCConfig{Password: "password", PoweredOn: true})
	sim, err := redfishsim.Start("127.0.0.1:0", false, redfishsim.Options{Users: []redfishsim.User{{Name: "root", Password: "pw"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	host, port, _ := strings.Cut(sim.Addr, ":")
	topo := Topology{
		{Devices: []Target{ipmiTarget("node2-bmc", b.Host(), b.Port())}},
	}
	rec := e.Fence(context.Background(), Request{Target: "node2", Action: fencing.ActionOff, Topology: topo, Epoch: 1})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("ipmi fence: %s %s", rec.Outcome, rec.Error)
	}
	rf := Target{Device: "node3-redfish", Agent: "redfish", Timeout: 10 * time.Second,
		Params: agents.Params{"ip": host, "ipport": port, "username": "root", "password": "pw", "plain_http": "1", "power_timeout": "5"}}
	rec = e.Fence(context.Background(), Request{Target: "node3", Action: fencing.ActionOff, Topology: Topology{{Devices: []Target{rf}}}, Epoch: 1})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("redfish fence: %s %s", rec.Outcome, rec.Error)
	}
	if lines < 4 {
		t.Fatalf("only %d log lines checked", lines)
	}
}
