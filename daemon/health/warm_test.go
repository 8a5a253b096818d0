package health

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeKeeper records what the monitor asks of a device's kept agent.
type fakeKeeper struct {
	mu                    sync.Mutex
	held                  bool
	checks, keeps, alives int
	drops                 int
	aliveErr              error
	closed                atomic.Bool
}

func (k *fakeKeeper) Check(ctx context.Context, keep bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checks++
	if keep {
		k.keeps++
	}
	k.held = keep
	return nil
}

func (k *fakeKeeper) KeepAlive(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.alives++
	if k.aliveErr != nil {
		err := k.aliveErr
		k.aliveErr = nil
		return err
	}
	return nil
}

func (k *fakeKeeper) KeepAliveInterval() time.Duration { return 60 * time.Millisecond }
func (k *fakeKeeper) Holds() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held
}
func (k *fakeKeeper) Drop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held = false
	k.drops++
}
func (k *fakeKeeper) Close() error { k.closed.Store(true); return nil }

func (k *fakeKeeper) get() (checks, keeps, alives, drops int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.checks, k.keeps, k.alives, k.drops
}

// With a kept agent, checks go through it; while Warm says so they keep
// their session and keep-alives run between them; a failed keep-alive
// runs a check at once; Warm turning true opens a session at once, and
// turning false logs it out. The agent is closed when Run ends.
func TestWarmSessions(t *testing.T) {
	k := &fakeKeeper{}
	var warm atomic.Bool
	m := New(Options{Self: "n", Devices: devs(time.Second, "bmc"), FirstWithin: time.Millisecond, WarmPoll: 10 * time.Millisecond,
		Keep: func(Device) (Keeper, error) { return k, nil },
		Warm: func(string) bool { return warm.Load() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()

	waitFor(t, "the first check", 2*time.Second, func() bool { c, _, _, _ := k.get(); return c == 1 })
	if _, keeps, _, _ := k.get(); keeps != 0 || k.Holds() {
		t.Fatal("a session kept while Warm says no")
	}
	if h, _ := m.Get("bmc"); h.State != StateOK {
		t.Fatalf("after the check: %+v", h)
	}
	warm.Store(true)
	waitFor(t, "a check that keeps its session", 500*time.Millisecond, func() bool { _, keeps, _, _ := k.get(); return keeps == 1 })
	waitFor(t, "keep-alives", time.Second, func() bool { _, _, alives, _ := k.get(); return alives >= 3 })
	checks, _, _, _ := k.get()
	if checks != 2 {
		t.Fatalf("%d checks: keep-alives must not be checks", checks)
	}
	k.mu.Lock()
	k.aliveErr = errors.New("no reply from the BMC")
	k.mu.Unlock()
	waitFor(t, "a check after the failed keep-alive", time.Second, func() bool { c, _, _, _ := k.get(); return c == 3 })
	warm.Store(false)
	waitFor(t, "the session logged out", time.Second, func() bool { _, _, _, drops := k.get(); return drops == 1 })
	if k.Holds() {
		t.Fatal("held after Warm turned false")
	}
	cancel()
	<-done
	if !k.closed.Load() {
		t.Fatal("the kept agent was not closed")
	}
}

// Rewarm has a kept device ask Warm at once, not at its next poll: a
// session that stopped mattering is logged out, and one that started to
// matter is opened (before the device's first scheduled check, too).
func TestRewarm(t *testing.T) {
	k := &fakeKeeper{}
	var warm atomic.Bool
	warm.Store(true)
	m := New(Options{Self: "n", Devices: devs(time.Hour, "bmc"), FirstWithin: time.Hour, WarmPoll: time.Hour,
		Keep: func(Device) (Keeper, error) { return k, nil },
		Warm: func(string) bool { return warm.Load() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	time.Sleep(50 * time.Millisecond)
	if c, _, _, _ := k.get(); c != 0 {
		t.Fatalf("%d checks before any is due or asked for", c)
	}
	m.Rewarm()
	waitFor(t, "a check that keeps its session", time.Second, func() bool { _, keeps, _, _ := k.get(); return keeps == 1 && k.Holds() })
	warm.Store(false)
	m.Rewarm()
	waitFor(t, "the session logged out", time.Second, func() bool { _, _, _, drops := k.get(); return drops == 1 && !k.Holds() })
	warm.Store(true)
	m.Rewarm()
	waitFor(t, "a session opened again", time.Second, func() bool { _, keeps, _, _ := k.get(); return keeps == 2 && k.Holds() })
}

// slowKeeper is a fakeKeeper whose checks wait for release, and whose BMC
// may have no free slot.
type slowKeeper struct {
	fakeKeeper
	release chan struct{}
	full    atomic.Bool
}

func (k *slowKeeper) Check(ctx context.Context, keep bool) error {
	select {
	case <-k.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return k.fakeKeeper.Check(ctx, keep)
}

func (k *slowKeeper) NoFreeSlot() bool { return k.full.Load() }

// A Rewarm that comes while the device's check runs (a check can be long:
// a login over a slow path) is answered as soon as the check is done, not
// at the next poll: a node that just learnt whom it may have to fence
// opens the session at once.
func TestRewarmDuringACheck(t *testing.T) {
	k := &slowKeeper{release: make(chan struct{})}
	var warm atomic.Bool
	m := New(Options{Self: "n", Devices: devs(time.Hour, "bmc"), FirstWithin: time.Millisecond, WarmPoll: time.Hour,
		Keep: func(Device) (Keeper, error) { return k, nil },
		Warm: func(string) bool { return warm.Load() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "the first check to start", time.Second, func() bool { h, _ := m.Get("bmc"); return !h.Checking.IsZero() })
	warm.Store(true)
	m.Rewarm()
	close(k.release)
	waitFor(t, "a check that keeps its session", time.Second, func() bool { _, keeps, _, _ := k.get(); return keeps == 1 && k.Holds() })
}

// Health says whether the session is held, whether a check has tried to
// open one to keep, and that a check passed on the held session because
// the BMC had no free slot; SessionChanged is told.
func TestSessionInHealth(t *testing.T) {
	k := &slowKeeper{release: make(chan struct{})}
	close(k.release)
	var warm atomic.Bool
	var changes atomic.Int32
	m := New(Options{Self: "n", Devices: devs(time.Hour, "bmc"), FirstWithin: time.Hour, WarmPoll: time.Hour,
		Keep:           func(Device) (Keeper, error) { return k, nil },
		Warm:           func(string) bool { return warm.Load() },
		SessionChanged: func(string) { changes.Add(1) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "the device watched", time.Second, func() bool { h, _ := m.Get("bmc"); return h.KeepsSession })
	if h, _ := m.Get("bmc"); h.Session != "" || h.WarmTried {
		t.Fatalf("before any check: %+v", h)
	}
	warm.Store(true)
	k.full.Store(true)
	m.Rewarm()
	waitFor(t, "the session held", time.Second, func() bool { h, _ := m.Get("bmc"); return h.Session == SessionHeld })
	h, _ := m.Get("bmc")
	if !h.WarmTried || h.Note != NoteNoFreeSlot || changes.Load() == 0 {
		t.Fatalf("held on a full BMC: %+v, %d changes told", h, changes.Load())
	}
	warm.Store(false)
	m.Rewarm()
	waitFor(t, "the session logged out", time.Second, func() bool { h, _ := m.Get("bmc"); return h.Session == "" })
	if h, _ := m.Get("bmc"); !h.WarmTried {
		t.Fatalf("after the logout: %+v", h)
	}
}

// LeftOpen runs once per kept device as its watch starts: right after the
// check that opens the session when one is wanted (so the sessions a
// crashed process left are closed on it), else before any check.
func TestLeftOpenOrder(t *testing.T) {
	for _, want := range []bool{true, false} {
		k := &fakeKeeper{}
		var mu sync.Mutex
		var order []string
		m := New(Options{Self: "n", Devices: devs(time.Hour, "bmc"), FirstWithin: time.Hour, WarmPoll: time.Hour,
			Keep: func(Device) (Keeper, error) { return k, nil },
			Warm: func(string) bool { return want },
			LeftOpen: func(_ context.Context, dev string, kk Keeper) {
				mu.Lock()
				defer mu.Unlock()
				c, keeps, _, _ := k.get()
				order = append(order, "left-open", dev)
				if kk != k || c != keeps || (want && c != 1) || (!want && c != 0) {
					t.Errorf("warm %v: LeftOpen after %d checks (%d keeping), with %v", want, c, keeps, kk)
				}
			}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		waitFor(t, "LeftOpen", time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 2 })
		if h, _ := m.Get("bmc"); want != (h.Session == SessionHeld) || !h.Started || !h.KeepsSession {
			t.Errorf("warm %v: %+v", want, h)
		}
		cancel()
		<-done
	}
}
