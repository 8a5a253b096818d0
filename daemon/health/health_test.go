package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		err      error
		timedOut bool
		want     string
	}{
		{nil, false, ""},
		{agents.AuthFailed("ipmi 10.0.0.1:623: connect", errors.New("rakp")), false, KindAuth},
		{fmt.Errorf("device x: monitor: %w", agents.AuthFailed("op", errors.New("401"))), false, KindAuth},
		{agents.Unknown("ipmi: get device id", errors.New("i/o timeout")), false, KindUnreachable},
		{agents.Failed("exec fence_x monitor", errors.New("killed at the deadline")), true, KindUnreachable},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), false, KindUnreachable},
		{agents.Failed("pdu: get", errors.New("noSuchName")), false, KindOther},
		{errors.New(`device x: unknown agent "nope"`), false, KindOther},
	}
	for _, tc := range cases {
		if got := Classify(tc.err, tc.timedOut); got != tc.want {
			t.Errorf("Classify(%v, %v) = %q, want %q", tc.err, tc.timedOut, got, tc.want)
		}
	}
}

func TestPath(t *testing.T) {
	hs := map[string]Health{
		"ok1": {State: StateOK}, "ok2": {State: StateOK},
		"bad1": {State: StateFailing}, "bad2": {State: StateFailing},
		"new": {State: StatePending},
	}
	get := func(d string) (Health, bool) { h, ok := hs[d]; return h, ok }
	cases := []struct {
		name   string
		levels [][]string
		want   string
	}{
		{"no topology", nil, PathNone},
		{"one healthy device", [][]string{{"ok1"}}, PathWorking},
		{"one failing device", [][]string{{"bad1"}}, PathFailing},
		{"level 1 fails, level 2 works", [][]string{{"bad1"}, {"ok1", "ok2"}}, PathWorking},
		{"both PDUs must be healthy", [][]string{{"bad1"}, {"ok1", "bad2"}}, PathFailing},
		{"a level not checked yet", [][]string{{"bad1"}, {"ok1", "new"}}, PathUnknown},
		{"a device not watched here", [][]string{{"bad1"}, {"elsewhere"}}, PathUnknown},
		{"only pending", [][]string{{"new"}}, PathUnknown},
		{"an empty level works for nothing", [][]string{{}, {"bad1"}}, PathFailing},
	}
	for _, tc := range cases {
		if got := Path(tc.levels, get); got != tc.want {
			t.Errorf("%s: Path = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Devices([][]string{{"a"}, {"b", "a"}, {"c"}}); fmt.Sprint(got) != "[a b c]" {
		t.Errorf("Devices = %v", got)
	}
}

// fakeDevices answers checks from a map of errors, counting them.
type fakeDevices struct {
	mu     sync.Mutex
	errs   map[string]error
	hang   map[string]bool
	calls  map[string]int
	active atomic.Int32
	peak   atomic.Int32
}

func newFake() *fakeDevices {
	return &fakeDevices{errs: map[string]error{}, hang: map[string]bool{}, calls: map[string]int{}}
}

func (f *fakeDevices) set(dev string, err error) {
	f.mu.Lock()
	f.errs[dev] = err
	f.mu.Unlock()
}

func (f *fakeDevices) count(dev string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[dev]
}

func (f *fakeDevices) check(ctx context.Context, t stonith.Target) error {
	n := f.active.Add(1)
	defer f.active.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	f.mu.Lock()
	f.calls[t.Device]++
	err, hang := f.errs[t.Device], f.hang[t.Device]
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return agents.Failed("exec "+t.Device+" monitor", errors.New("killed with its process group at the deadline"))
	}
	time.Sleep(2 * time.Millisecond)
	return err
}

func devs(interval time.Duration, names ...string) []Device {
	var out []Device
	for _, n := range names {
		out = append(out, Device{Name: n, Target: stonith.Target{Device: n, Timeout: time.Second}, Interval: interval})
	}
	return out
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A device whose password changes is reported failing (auth) at its next
// check, and healthy again at the check after it is fixed; Since and
// Failures follow.
func TestCheckerStateChanges(t *testing.T) {
	f := newFake()
	var observed atomic.Int32
	m := New(Options{Self: "node1", Devices: devs(50*time.Millisecond, "bmc"), Check: f.check, FirstWithin: time.Millisecond,
		Observe: func(Health) { observed.Add(1) }})
	if h, ok := m.Get("bmc"); !ok || h.State != StatePending {
		t.Fatalf("before any check: %+v %v", h, ok)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	state := func(s string) func() bool { return func() bool { h, _ := m.Get("bmc"); return h.State == s } }
	waitFor(t, "ok", 2*time.Second, state(StateOK))
	h, _ := m.Get("bmc")
	if h.LastCheck.IsZero() || h.Latency <= 0 || h.Since.IsZero() || h.Interval != 50*time.Millisecond {
		t.Fatalf("after a good check: %+v", h)
	}
	okSince := h.Since

	f.set("bmc", fmt.Errorf("device bmc: monitor: %w", agents.AuthFailed("ipmi 127.0.0.1:623: connect", errors.New("RAKP authentication failed"))))
	changed := time.Now()
	waitFor(t, "failing", 2*time.Second, state(StateFailing))
	if took := time.Since(changed); took > 50*time.Millisecond+500*time.Millisecond {
		t.Errorf("failure reported after %v with a 50ms interval", took)
	}
	waitFor(t, "three failures", 2*time.Second, func() bool { h, _ := m.Get("bmc"); return h.Failures >= 3 })
	h, _ = m.Get("bmc")
	if h.Kind != KindAuth || h.Error == "" || !h.Since.After(okSince) || !h.Since.Before(h.LastCheck) {
		t.Fatalf("failing: %+v", h)
	}
	failSince := h.Since

	f.set("bmc", nil)
	waitFor(t, "ok again", 2*time.Second, state(StateOK))
	h, _ = m.Get("bmc")
	if h.Failures != 0 || h.Kind != "" || h.Error != "" || !h.Since.After(failSince) {
		t.Fatalf("healthy again: %+v", h)
	}
	if observed.Load() < 5 {
		t.Errorf("Observe called %d times", observed.Load())
	}
}

// A check that hangs holds only its own device, until its timeout: the
// others keep their interval, reading the state never waits, and Run ends
// with the context.
func TestHangingCheck(t *testing.T) {
	f := newFake()
	f.hang["stuck"] = true
	ds := devs(20*time.Millisecond, "stuck", "a", "b")
	ds[0].Target.Timeout = time.Hour
	m := New(Options{Self: "n", Devices: ds, Check: f.check, FirstWithin: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()

	waitFor(t, "the hanging check to start", 2*time.Second, func() bool { h, _ := m.Get("stuck"); return !h.Checking.IsZero() })
	waitFor(t, "the other devices' checks", 2*time.Second, func() bool { return f.count("a") >= 10 && f.count("b") >= 10 })
	start := time.Now()
	for range 1000 {
		m.All()
		m.Get("stuck")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("reading the state took %v while a check hangs", took)
	}
	if h, _ := m.Get("stuck"); h.State != StatePending || f.count("stuck") != 1 {
		t.Errorf("hanging device: %+v, %d checks", h, f.count("stuck"))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	// A check cut short by the stop is not recorded as a failure.
	if h, _ := m.Get("stuck"); h.State != StatePending || !h.Checking.IsZero() {
		t.Errorf("after stop: %+v", h)
	}
}

// A check that runs into its timeout is reported unreachable.
func TestTimeoutIsUnreachable(t *testing.T) {
	f := newFake()
	f.hang["slow"] = true
	ds := devs(time.Hour, "slow")
	ds[0].Target.Timeout = 30 * time.Millisecond
	m := New(Options{Self: "n", Devices: ds, Check: f.check, FirstWithin: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "failing", 2*time.Second, func() bool { h, _ := m.Get("slow"); return h.State == StateFailing })
	if h, _ := m.Get("slow"); h.Kind != KindUnreachable || h.Latency < 30*time.Millisecond {
		t.Errorf("timed-out check: %+v", h)
	}
}

// Many devices: no more than MaxChecks at once, and the first checks are
// spread over FirstWithin rather than all at once.
func TestSpreadAndConcurrency(t *testing.T) {
	f := newFake()
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("pdu-%d", i))
	}
	m := New(Options{Self: "node2", Devices: devs(time.Hour, names...), Check: f.check, FirstWithin: 400 * time.Millisecond, MaxChecks: 3})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "every first check", 3*time.Second, func() bool {
		for _, h := range m.All() {
			if h.State == StatePending {
				return false
			}
		}
		return true
	})
	if p := f.peak.Load(); p > 3 {
		t.Errorf("%d checks ran at once, MaxChecks 3", p)
	}
	var first, last time.Time
	for _, h := range m.All() {
		if first.IsZero() || h.LastCheck.Before(first) {
			first = h.LastCheck
		}
		if h.LastCheck.After(last) {
			last = h.LastCheck
		}
	}
	if spread := last.Sub(first); spread < 100*time.Millisecond {
		t.Errorf("40 first checks within %v: not spread", spread)
	}
	if last.Sub(start) > 400*time.Millisecond+time.Second {
		t.Errorf("last first check %v after start", last.Sub(start))
	}
	// Phases differ between nodes for the same device.
	if phase("node1", "pdu-a", time.Minute) == phase("node2", "pdu-a", time.Minute) {
		t.Error("two nodes check pdu-a at the same offset")
	}
	if p := phase("node1", "pdu-a", time.Minute); p < 0 || p >= time.Minute {
		t.Errorf("phase %v outside [0, 1m)", p)
	}
}

// A check made elsewhere (fencectl device status) counts as a check; a
// device the monitor does not watch is ignored.
func TestRecord(t *testing.T) {
	m := New(Options{Self: "n", Devices: devs(time.Minute, "bmc")})
	now := time.Now()
	m.Record("bmc", now, 3*time.Millisecond, agents.Unknown("ipmi: connect", errors.New("timeout")), false)
	if h, _ := m.Get("bmc"); h.State != StateFailing || h.Kind != KindUnreachable || h.Latency != 3*time.Millisecond || !h.LastCheck.Equal(now) {
		t.Errorf("recorded: %+v", h)
	}
	m.Record("other", now, 0, nil, false)
	if _, ok := m.Get("other"); ok || m.Watches("other") || !m.Watches("bmc") {
		t.Error("a device not watched was recorded")
	}
}
