package rtt

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

const (
	ms = time.Millisecond
	s  = time.Second
)

func estimate(samples []time.Duration, expired ...time.Duration) Estimate {
	var m Estimator
	for _, r := range samples {
		m.Sample(r)
	}
	for _, w := range expired {
		m.Expired(w)
	}
	return m.Estimate()
}

func TestSample(t *testing.T) {
	for _, tc := range []struct {
		name     string
		samples  []time.Duration
		srtt     time.Duration
		rttvar   time.Duration
		answered bool
	}{
		{"none", nil, 0, 0, false},
		{"first sets srtt and half of it as the variation", []time.Duration{100 * ms}, 100 * ms, 50 * ms, true},
		{"steady", []time.Duration{100 * ms, 100 * ms}, 100 * ms, 37500 * time.Microsecond, true},
		// srtt 100 + (180-100)/8 = 110; rttvar (3·50 + 80)/4 = 57.5
		{"slower", []time.Duration{100 * ms, 180 * ms}, 110 * ms, 57500 * time.Microsecond, true},
		// srtt 100 - 80/8 = 90; rttvar (3·50 + 80)/4
		{"faster", []time.Duration{100 * ms, 20 * ms}, 90 * ms, 57500 * time.Microsecond, true},
	} {
		e := estimate(tc.samples)
		if e.SRTT != tc.srtt || e.RTTVar != tc.rttvar || e.Answered() != tc.answered || e.Samples != len(tc.samples) {
			t.Errorf("%s: %+v, want srtt %v rttvar %v answered %v", tc.name, e, tc.srtt, tc.rttvar, tc.answered)
		}
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		expired []time.Duration
		want    time.Duration
	}{
		{"none", nil, nil, 0},
		{"twice the wait", nil, []time.Duration{300 * ms}, 600 * ms},
		{"the longest wait", nil, []time.Duration{300 * ms, 1 * s, 200 * ms}, 2 * s},
		{"after an answer too", []time.Duration{10 * ms}, []time.Duration{300 * ms}, 600 * ms},
	} {
		if e := estimate(tc.samples, tc.expired...); e.Backoff != tc.want {
			t.Errorf("%s: back-off %v, want %v", tc.name, e.Backoff, tc.want)
		}
	}
	// An answer ends the back-off.
	var m Estimator
	m.Expired(time.Second)
	m.Sample(10 * ms)
	if e := m.Estimate(); e.Backoff != 0 {
		t.Errorf("back-off %v after an answer", e.Backoff)
	}
}

func TestRetransmit(t *testing.T) {
	const initial, floor, ceiling = s, 200 * ms, 10 * s
	steady := func(r time.Duration) []time.Duration {
		v := make([]time.Duration, 50)
		for i := range v {
			v[i] = r
		}
		return v
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		expired []time.Duration
		want    time.Duration
	}{
		{"initial before an answer", nil, nil, initial},
		{"a back-off longer than initial", nil, []time.Duration{2 * s}, 4 * s},
		{"a back-off capped by the ceiling", nil, []time.Duration{20 * s}, ceiling},
		// 100 + 4·50
		{"first answer", []time.Duration{100 * ms}, nil, 300 * ms},
		{"fast: the floor", []time.Duration{ms}, nil, floor},
		{"slow: the ceiling", []time.Duration{5 * s}, nil, ceiling},
		{"a back-off after an answer", []time.Duration{100 * ms}, []time.Duration{time.Second}, 2 * s},
	} {
		if got := estimate(tc.samples, tc.expired...).Retransmit(initial, floor, ceiling); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Steady answers: the variation fades and srtt/4 is the margin.
	if got := estimate(steady(4*s)).Retransmit(initial, floor, ceiling); got < 5*s || got > 5100*ms {
		t.Errorf("steady 4s: %v, want about srtt + srtt/4", got)
	}
	// A ceiling below the floor wins.
	if got := estimate(nil).Retransmit(initial, 2*s, s/2); got != s/2 {
		t.Errorf("ceiling under the floor: %v", got)
	}
}

func TestDeadline(t *testing.T) {
	const floor, ceiling = 300 * ms, 2 * time.Minute
	for _, tc := range []struct {
		name    string
		n       int
		samples []time.Duration
		expired []time.Duration
		want    time.Duration
	}{
		{"the floor before an answer", 1, nil, nil, floor},
		{"the floor for a fast device", 1, []time.Duration{10 * ms}, nil, floor},
		{"four round trips", 1, []time.Duration{600 * ms}, nil, 2400 * ms},
		{"n requests of four", 3, []time.Duration{600 * ms}, nil, 7200 * ms},
		{"the back-off before an answer", 1, nil, []time.Duration{300 * ms}, 600 * ms},
		{"n back-offs", 3, nil, []time.Duration{300 * ms}, 1800 * ms},
		{"a back-off longer than four round trips", 1, []time.Duration{100 * ms}, []time.Duration{time.Second}, 2 * s},
		{"four round trips longer than a back-off", 1, []time.Duration{time.Second}, []time.Duration{100 * ms}, 4 * s},
		{"the ceiling", 3, []time.Duration{20 * s}, nil, ceiling},
	} {
		if got := estimate(tc.samples, tc.expired...).Deadline(tc.n, floor, ceiling); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The estimate's timeouts are those the agents computed with estimators
// of their own before they shared this one: ipmi's retransmission timeout
// and redfish's request and login timeouts (its least(n): n·srtt, or n/4
// requests of twice the longest wait cut short, within the configured
// timeout and maxRequestTimeout).
func TestSameAsTheAgentsFormulas(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 500; run++ {
		var m Estimator
		var srtt, rttvar, grow time.Duration
		samples := 0
		commandTimeout := time.Duration(1+rng.IntN(3000)) * ms
		requestTimeout := time.Duration(1+rng.IntN(20000)) * ms
		const maxRequestTimeout = 2 * time.Minute
		for step := 0; step < 40; step++ {
			d := time.Duration(rng.Int64N(int64(8 * s)))
			if rng.IntN(4) == 0 {
				m.Expired(d)
				grow = max(grow, 2*d)
			} else {
				m.Sample(d)
				if samples == 0 {
					srtt, rttvar = d, d/2
				} else {
					diff := srtt - d
					if diff < 0 {
						diff = -diff
					}
					rttvar = (3*rttvar + diff) / 4
					srtt = (7*srtt + d) / 8
				}
				samples++
				grow = 0
			}
			e := m.Estimate()

			floor, ceiling := min(200*ms, commandTimeout), max(10*s, commandTimeout)
			want := commandTimeout
			if samples > 0 {
				want = min(max(srtt+max(4*rttvar, srtt/4), floor), ceiling)
			}
			// ipmi never reports a wait given up (it resends instead).
			if grow == 0 {
				if got := e.Retransmit(commandTimeout, floor, ceiling); got != want {
					t.Fatalf("run %d step %d: retransmit %v, ipmi's %v", run, step, got, want)
				}
			}

			least := func(n time.Duration) time.Duration {
				d := grow * n / 4
				if samples > 0 {
					d = max(d, n*srtt)
				}
				return d
			}
			for _, c := range []struct {
				n, requests int
			}{{4, 1}, {12, 3}} {
				want := min(max(requestTimeout, least(time.Duration(c.n))), max(maxRequestTimeout, requestTimeout))
				if got := e.Deadline(c.requests, requestTimeout, max(maxRequestTimeout, requestTimeout)); got != want {
					t.Fatalf("run %d step %d: deadline of %d requests %v, redfish's %v", run, step, c.requests, got, want)
				}
			}
			if e.SRTT != srtt || e.Answered() != (samples > 0) {
				t.Fatalf("run %d step %d: srtt %v (%v), want %v (%d samples)", run, step, e.SRTT, e.Answered(), srtt, samples)
			}
		}
	}
}

// Samples and waits given up arrive from every session and request at
// once; an Estimate is always read whole.
func TestConcurrent(t *testing.T) {
	var m Estimator
	const workers, each, r = 8, 500, 40 * ms
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				m.Sample(r)
				if i%50 == 0 {
					m.Expired(r)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				e := m.Estimate()
				if e.Answered() && e.SRTT != r {
					t.Errorf("srtt %v of answers all %v", e.SRTT, r)
					return
				}
				// 40ms answers and 80ms back-offs are all under the floor.
				if got := e.Retransmit(s, 200*ms, 10*s); e.Answered() && got != 200*ms {
					t.Errorf("retransmit %v", got)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := m.Estimate(); e.Samples != workers*each || e.SRTT != r {
		t.Fatalf("%+v after %d samples of %v", e, workers*each, r)
	}
}
