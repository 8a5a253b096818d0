package stonith

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/stonith/fencing"
)

// BenchmarkSlowBMC measures one fence (off and its read-back, as the
// engine records it) through a UDP relay that delays every datagram by
// the given time each way, in front of OpenIPMI's ipmi_sim (cipher 3; its
// host process really dies, about a second after the command) and of
// go-ipmi's reference BMC (cipher 17; powers off at once). "cold" builds
// the agent for the fence, as the engine does for a device nobody keeps:
// the fence logs in first; "warm" fences through the device's kept agent,
// whose session a health check opened before (as the daemon's monitor
// does). Reported: off + read-back p50/p99, split into the command and the
// read-back, and how many fences succeeded within the device timeout
// (fence_timeout's default, 20s). Devices: the agent's defaults
// (command_timeout 1s, command_retries 2, login_timeout 5s).
//
//	go test ./stonith -run '^$' -bench SlowBMC -benchtime 5x
func BenchmarkSlowBMC(b *testing.B) {
	for _, sim := range []string{"ipmi_sim", "go-ipmi"} {
		for _, delay := range []time.Duration{0, 300 * time.Millisecond, 2500 * time.Millisecond} {
			for _, mode := range []string{"cold", "warm"} {
				b.Run(fmt.Sprintf("%s/delay=%v/%s", sim, delay, mode), func(b *testing.B) {
					benchSlowBMC(b, sim, delay, mode == "warm")
				})
			}
		}
	}
}

// slowBMC is a simulated BMC behind a delaying relay.
type slowBMC struct {
	relay   *ipmisim.Relay
	cipher  string
	powerOn func(b *testing.B)
}

func startSlowBMC(b *testing.B, sim string, delay time.Duration) *slowBMC {
	b.Helper()
	var target *net.UDPAddr
	s := &slowBMC{}
	switch sim {
	case "ipmi_sim":
		o, err := ipmisim.StartOpenIPMI(context.Background(), ipmisim.OpenIPMIConfig{Dir: b.TempDir(), KillWait: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { o.Close() })
		target = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: o.Port}
		s.cipher = "3"
		direct := ipmiEngine()
		on := Target{Device: "direct", Agent: "ipmi", Params: benchParams("127.0.0.1", o.Port, "3"), Timeout: 20 * time.Second}
		s.powerOn = func(b *testing.B) {
			rec := direct.Fence(context.Background(), Request{Target: "node", Action: fencing.ActionOn, Topology: Topology{{Devices: []Target{on}}}})
			if rec.Outcome != fencing.OutcomeSuccess {
				b.Fatalf("power on: %s", rec.Error)
			}
			for !o.HostRunning() {
				time.Sleep(5 * time.Millisecond)
			}
		}
	default:
		bm, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { bm.Close() })
		target = bm.Addr()
		s.cipher = "17"
		s.powerOn = func(*testing.B) { bm.SetPower(true) }
	}
	r, err := ipmisim.StartRelay(target, delay)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	s.relay = r
	return s
}

func benchParams(host string, port int, cipher string) agents.Params {
	return agents.Params{"ip": host, "ipport": strconv.Itoa(port), "username": "admin", "password": "password", "cipher": cipher}
}

func benchSlowBMC(b *testing.B, sim string, delay time.Duration, warm bool) {
	bmc := startSlowBMC(b, sim, delay)
	e := ipmiEngine()
	t := Target{Device: "bmc", Agent: "ipmi", Params: benchParams(bmc.relay.Host(), bmc.relay.Port(), bmc.cipher), Timeout: 20 * time.Second}
	if warm {
		k, err := e.Keep(t)
		if err != nil {
			b.Fatal(err)
		}
		defer k.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = k.Check(ctx, true)
		cancel()
		if err != nil {
			b.Fatalf("warming the session: %v", err)
		}
	}
	var total, command, readBack []time.Duration
	ok := 0
	var errs []string
	for b.Loop() {
		b.StopTimer()
		bmc.powerOn(b)
		b.StartTimer()
		rec := e.Fence(context.Background(), Request{Target: "node", Action: fencing.ActionOff, Topology: Topology{{Devices: []Target{t}}}})
		at := rec.Attempts[len(rec.Attempts)-1]
		total = append(total, at.Duration)
		command = append(command, at.Duration-at.ReadBackDuration)
		readBack = append(readBack, at.ReadBackDuration)
		if rec.Outcome == fencing.OutcomeSuccess {
			ok++
		} else {
			errs = append(errs, rec.Error)
		}
	}
	report(b, "off+readback", total)
	report(b, "command", command)
	report(b, "readback", readBack)
	b.ReportMetric(float64(ok)/float64(len(total)), "succeeded")
	b.Logf("%s, %v each way, %s: %d/%d fences confirmed; off+read-back %s; command %s; read-back %s",
		sim, delay, map[bool]string{true: "warm session", false: "cold (login per fence)"}[warm], ok, len(total), quantiles(total), quantiles(command), quantiles(readBack))
	if len(errs) > 0 {
		b.Logf("first failure: %s", errs[0])
	}
}

// report adds name's p50 and p99 (milliseconds) to the benchmark's metrics.
func report(b *testing.B, name string, d []time.Duration) {
	p50, p99 := percentiles(d)
	b.ReportMetric(float64(p50.Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, name+"-p99-ms")
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99+99)/100-1]
}

func quantiles(d []time.Duration) string {
	p50, p99 := percentiles(d)
	return "p50 " + p50.Round(time.Millisecond).String() + " p99 " + p99.Round(time.Millisecond).String()
}

var _ = strings.Join
