package tenure

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestTimeArithmeticSaturates(t *testing.T) {
	cases := []struct {
		t    Time
		d    time.Duration
		want Time
	}{
		{100, 5, 105},
		{Never - 1, 5, Never},
		{Never, time.Duration(math.MaxInt64), Never},
		{math.MinInt64 + 1, -5, math.MinInt64},
		{-100, -5, -105},
	}
	for _, c := range cases {
		if got := c.t.Add(c.d); got != c.want {
			t.Errorf("%d.Add(%d) = %d, want %d", c.t, c.d, got, c.want)
		}
	}
	if d := Never.Sub(math.MinInt64); d != math.MaxInt64 {
		t.Errorf("Sub overflowed: %d", d)
	}
	// The successor's wait from any bound is never before the bound: a
	// wrapped sum would have let it skip the wait.
	big := Timing{Lease: time.Duration(math.MaxInt64 / 2), Margin: time.Duration(math.MaxInt64 / 2)}
	if w := big.SuccessorWait(Never - 10); w != Never {
		t.Errorf("SuccessorWait wrapped to %d", w)
	}
	if w := big.SuccessorWait(1 << 62); w < 1<<62 {
		t.Errorf("SuccessorWait %d before its bound", w)
	}
}

func TestCheckBounds(t *testing.T) {
	ok := Timing{Heartbeat: time.Second, Lease: 3 * time.Second, Margin: 500 * time.Millisecond, Grace: 2 * time.Second, FenceTimeout: 20 * time.Second}
	if ps := ok.Check(); ps != nil {
		t.Fatalf("defaults refused: %v", ps)
	}
	cases := []struct {
		name  string
		mod   func(*Timing)
		field string // "" = valid
	}{
		{"lease 500ms (minimum)", func(t *Timing) {
			t.Lease, t.Margin, t.Heartbeat, t.Grace = 500*time.Millisecond, 25*time.Millisecond, 200*time.Millisecond, 400*time.Millisecond
		}, ""},
		{"lease below minimum", func(t *Timing) { t.Lease = 499 * time.Millisecond }, "lease"},
		{"lease 10m (maximum)", func(t *Timing) { t.Lease, t.Margin, t.Heartbeat = 10*time.Minute, time.Minute, time.Minute }, ""},
		{"lease above maximum", func(t *Timing) { t.Lease = 10*time.Minute + 1 }, "lease"},
		{"heartbeat minimum", func(t *Timing) { t.Heartbeat = MinHeartbeat }, ""},
		{"heartbeat below minimum", func(t *Timing) { t.Heartbeat = MinHeartbeat - 1 }, "heartbeat"},
		{"heartbeat overflowing ×2", func(t *Timing) { t.Heartbeat = time.Duration(math.MaxInt64) }, "heartbeat"},
		{"margin overflowing", func(t *Timing) { t.Margin = time.Duration(math.MaxInt64) }, "margin"},
		{"grace minimum", func(t *Timing) { t.Grace = MinGrace }, ""},
		{"grace below minimum", func(t *Timing) { t.Grace = MinGrace - 1 }, "grace"},
		{"fence timeout minimum", func(t *Timing) { t.FenceTimeout = MinFenceTimeout }, ""},
		{"fence timeout 1ns", func(t *Timing) { t.FenceTimeout = 1 }, "fence_timeout"},
		{"fence timeout maximum", func(t *Timing) { t.FenceTimeout = MaxFenceTimeout }, ""},
		{"fence timeout above maximum", func(t *Timing) { t.FenceTimeout = MaxFenceTimeout + 1 }, "fence_timeout"},
		{"two heartbeats exactly fit", func(t *Timing) { t.Heartbeat = (t.Lease - t.Margin) / 2 }, ""},
		{"two heartbeats do not fit", func(t *Timing) { t.Heartbeat = (t.Lease-t.Margin)/2 + 1 }, "heartbeat"},
		{"margin at lease/20", func(t *Timing) { t.Margin = t.Lease / MinMarginFraction }, ""},
		{"margin below lease/20", func(t *Timing) { t.Margin = t.Lease/MinMarginFraction - 1 }, "margin"},
	}
	for _, c := range cases {
		tm := ok
		c.mod(&tm)
		ps := tm.Check()
		if c.field == "" {
			if ps != nil {
				t.Errorf("%s: refused: %v", c.name, ps)
			}
			continue
		}
		found := false
		for _, p := range ps {
			found = found || p.Field == c.field
		}
		if !found {
			t.Errorf("%s: no problem for %s in %v", c.name, c.field, ps)
		}
	}
}

func TestBoundOf(t *testing.T) {
	// Five nodes, majority three: the third-earliest contact bounds the
	// former holder's last renewal.
	got, ok := BoundOf([]Time{50, 10, 40, 20, 30}, 3)
	if !ok || got != Time(30).Add(time.Millisecond) {
		t.Fatalf("bound %v %v", got, ok)
	}
	if _, ok := BoundOf([]Time{10, 20}, 3); ok {
		t.Fatal("bound from fewer answers than a majority")
	}
	in := []Time{3, 1, 2}
	BoundOf(in, 2)
	if in[0] != 3 {
		t.Fatal("BoundOf sorted its caller's slice")
	}
}

func TestRaftTimings(t *testing.T) {
	rt := (Timing{Lease: 3 * time.Second}).Raft()
	if rt.HeartbeatTimeout != 3*time.Second || rt.Detect != 750*time.Millisecond || rt.Stagger != 37500*time.Microsecond {
		t.Fatal(rt)
	}
	// Detection, staggered for 9 nodes, stays well inside the lease.
	if rt.Detect+8*rt.Stagger >= 3*time.Second/2 {
		t.Fatal(rt)
	}
	if !strings.Contains(Demotion{Reason: ReasonMonitorFailed, Detail: "gone"}.String(), "monitor failed: gone") {
		t.Fatal("demotion text")
	}
}
