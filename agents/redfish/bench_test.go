package redfish

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/agents/redfish/redfishsim"
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
