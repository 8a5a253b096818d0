package redfish

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// BenchmarkOffReadBack measures one fencing off against the simulator over
// HTTPS with no added latency: login, read the system, ForceOff, read back
// Off, logout. It reports the median per operation (run with -benchtime=20x
// for the median of 20).
func BenchmarkOffReadBack(b *testing.B) {
	srv := startSim(b, true, redfishsim.Options{})
	a := newAgent(b, simParams(b, srv, nil))
	ctx := context.Background()
	if _, err := a.Status(ctx); err != nil { // discovery and first handshake outside the timing
		b.Fatal(err)
	}
	var times []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		srv.SetPowerState("", "On")
		b.StartTimer()
		t0 := time.Now()
		if err := a.Off(ctx); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	if srv.OpenSessions() != 0 {
		b.Fatalf("%d sessions left open", srv.OpenSessions())
	}
}

// BenchmarkFence20Concurrent fences 20 simulated BMCs at once (each with its
// own HTTPS server and agent) and reports the wall time of the whole round.
func BenchmarkFence20Concurrent(b *testing.B) {
	const n = 20
	srvs := make([]*redfishsim.Server, n)
	ags := make([]*Agent, n)
	for i := range srvs {
		srvs[i] = startSim(b, true, redfishsim.Options{PowerOffDelay: 0})
		ags[i] = newAgent(b, simParams(b, srvs[i], nil))
	}
	ctx := context.Background()
	var rounds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for _, s := range srvs {
			s.SetPowerState("", "On")
		}
		b.StartTimer()
		t0 := time.Now()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for j := range ags {
			wg.Add(1)
			go func() { defer wg.Done(); errs[j] = ags[j].Off(ctx) }()
		}
		wg.Wait()
		rounds = append(rounds, time.Since(t0))
		for j, err := range errs {
			if err != nil {
				b.Fatalf("BMC %d: %v", j, err)
			}
			if p := srvs[j].PowerState(""); p != "Off" {
				b.Fatalf("BMC %d reads %s", j, p)
			}
		}
	}
	b.StopTimer()
	slices.Sort(rounds)
	b.ReportMetric(float64(rounds[len(rounds)/2].Microseconds())/1000, "median-round-ms")
}

// BenchmarkSlowRedfish measures one fence through the stonith engine (off
// and the engine's read-back, as it records them) against the simulator
// over HTTPS with every answer delayed by the latency given. "cold" builds
// the agent for the fence (login, discovery, logout); "warm" fences
// through the device's kept agent, whose session a health check opened
// before. The device timeout is fence_timeout's default, 20s; the
// agent's timeouts are its defaults.
//
//	go test ./agents/redfish -run '^$' -bench SlowRedfish -benchtime 5x
func BenchmarkSlowRedfish(b *testing.B) {
	for _, lat := range []time.Duration{0, 300 * time.Millisecond, 2500 * time.Millisecond} {
		for _, warm := range []bool{false, true} {
			mode := map[bool]string{false: "cold", true: "warm"}[warm]
			b.Run(fmt.Sprintf("latency=%v/%s", lat, mode), func(b *testing.B) {
				srv := startSim(b, true, redfishsim.Options{})
				srv.SetFaults(redfishsim.Faults{Latency: lat})
				reg := agents.NewRegistry()
				reg.Register(Kind())
				e := stonith.NewEngine(reg, nil)
				t := stonith.Target{Device: "bmc", Agent: "redfish", Params: simParams(b, srv, nil), Timeout: 20 * time.Second}
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
				var total []time.Duration
				ok := 0
				var failure string
				for b.Loop() {
					b.StopTimer()
					srv.SetPowerState("", "On")
					b.StartTimer()
					rec := e.Fence(context.Background(), stonith.Request{Target: "node", Action: fencing.ActionOff,
						Topology: stonith.Topology{{Devices: []stonith.Target{t}}}})
					at := rec.Attempts[len(rec.Attempts)-1]
					total = append(total, at.Duration)
					if rec.Outcome == fencing.OutcomeSuccess {
						ok++
					} else if failure == "" {
						failure = rec.Error
					}
				}
				slices.Sort(total)
				p50, p99 := total[len(total)/2], total[(len(total)*99+99)/100-1]
				b.ReportMetric(float64(p50.Microseconds())/1000, "off+readback-p50-ms")
				b.ReportMetric(float64(p99.Microseconds())/1000, "off+readback-p99-ms")
				b.ReportMetric(float64(ok)/float64(len(total)), "succeeded")
				b.Logf("latency %v, %s: %d/%d fences confirmed; off+read-back p50 %v p99 %v", lat, mode, ok, len(total), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
				if failure != "" {
					b.Logf("first failure: %s", failure)
				}
			})
		}
	}
}
