package keep

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sess is a session as an agent has one: a Lease, and what the test
// watches (its users, its wake-ups, its logouts).
type sess struct {
	Lease
	id      int
	users   atomic.Int32
	wakes   atomic.Int32
	logouts atomic.Int32
}

func newSess(id int) *sess {
	s := &sess{id: id}
	s.Wake = func() { s.wakes.Add(1) }
	return s
}

func (s *sess) logout() { s.logouts.Add(1) }

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func take(t *testing.T, h *Slot[*sess]) *sess {
	t.Helper()
	s, ok, err := h.Take(ctxFor(t, 5*time.Second))
	if err != nil || !ok {
		t.Fatalf("take: %v %v %v", s, ok, err)
	}
	return s
}

// blocked reports whether f has not returned within a short while; if
// it has not, it is left running and its result is on the channel.
func blocked[T any](f func() T) (chan T, bool) {
	c := make(chan T, 1)
	go func() { c <- f() }()
	select {
	case <-c:
		return c, false
	case <-time.After(50 * time.Millisecond):
		return c, true
	}
}

func TestEmptySlot(t *testing.T) {
	h := NewSlot[*sess]()
	if h.Holds() {
		t.Fatal("a new slot holds a session")
	}
	if s, ok, err := h.Take(context.Background()); s != nil || ok || err != nil {
		t.Fatalf("take from an empty slot: %v %v %v", s, ok, err)
	}
	ran := false
	if s, err := h.KeepAlive(context.Background(), func(context.Context, *sess) error { ran = true; return nil }); s != nil || err != nil || ran {
		t.Fatalf("keep-alive of an empty slot: %v %v (ran %v)", s, err, ran)
	}
	if h.Drop() != nil || h.Close() != nil {
		t.Fatal("an empty slot dropped or closed a session")
	}
}

// Swap, CompareAndSwap, Drop and Close: what the slot holds afterwards and
// what it gives back.
func TestSlotChanges(t *testing.T) {
	a, b := newSess(1), newSess(2)
	for _, tc := range []struct {
		name   string
		do     func(h *Slot[*sess]) (any, any)
		want   [2]any
		holds  *sess
		closed bool
	}{
		{"swap into an empty slot", func(h *Slot[*sess]) (any, any) { return h.Swap(a) }, [2]any{(*sess)(nil), true}, a, false},
		{"swap a held one", func(h *Slot[*sess]) (any, any) { h.Swap(a); return h.Swap(b) }, [2]any{a, true}, b, false},
		{"swap into a closed slot", func(h *Slot[*sess]) (any, any) { h.Swap(a); h.Close(); return h.Swap(b) }, [2]any{(*sess)(nil), false}, nil, true},
		{"hold if none", func(h *Slot[*sess]) (any, any) { return h.CompareAndSwap(nil, a), nil }, [2]any{true, nil}, a, false},
		{"hold if none, one held", func(h *Slot[*sess]) (any, any) { h.Swap(a); return h.CompareAndSwap(nil, b), nil }, [2]any{false, nil}, a, false},
		{"replace the one held", func(h *Slot[*sess]) (any, any) { h.Swap(a); return h.CompareAndSwap(a, b), nil }, [2]any{true, nil}, b, false},
		{"replace one no longer held", func(h *Slot[*sess]) (any, any) { h.Swap(b); return h.CompareAndSwap(a, newSess(3)), nil }, [2]any{false, nil}, b, false},
		{"forget the one held", func(h *Slot[*sess]) (any, any) { h.Swap(a); return h.CompareAndSwap(a, nil), nil }, [2]any{true, nil}, nil, false},
		{"hold if none, closed", func(h *Slot[*sess]) (any, any) { h.Close(); return h.CompareAndSwap(nil, a), nil }, [2]any{false, nil}, nil, true},
		{"drop", func(h *Slot[*sess]) (any, any) { h.Swap(a); return h.Drop(), nil }, [2]any{a, nil}, nil, false},
		{"close", func(h *Slot[*sess]) (any, any) { h.Swap(a); return h.Close(), nil }, [2]any{a, nil}, nil, true},
	} {
		h := NewSlot[*sess]()
		r0, r1 := tc.do(&h)
		if r0 != tc.want[0] || r1 != tc.want[1] {
			t.Errorf("%s: returned %v, %v; want %v, %v", tc.name, r0, r1, tc.want[0], tc.want[1])
		}
		if h.cur != tc.holds || h.Holds() != (tc.holds != nil) || h.closed != tc.closed {
			t.Errorf("%s: holds %v (closed %v), want %v (closed %v)", tc.name, h.cur, h.closed, tc.holds, tc.closed)
		}
		// Once closed, nothing is held again.
		if h.Swap(newSess(4)); tc.closed && h.Holds() {
			t.Errorf("%s: a closed slot took a session", tc.name)
		}
	}
}

// A copy of a slot compares equal to it while it holds the same session.
func TestSlotCopyComparesTheSession(t *testing.T) {
	h := NewSlot[*sess]()
	h.Swap(newSess(1))
	seen := h
	if h != seen {
		t.Fatal("a copy differs from its slot")
	}
	h.Swap(newSess(2))
	if h == seen {
		t.Fatal("a copy taken before a swap compares equal after it")
	}
}

// One operation at a time: a second waits for the first to give the
// session back, or for its context.
func TestTakeWaitsForAnOperation(t *testing.T) {
	h := NewSlot[*sess]()
	a := newSess(1)
	h.Swap(a)
	if s := take(t, &h); s != a {
		t.Fatalf("took %v", s)
	}
	if a.wakes.Load() != 1 {
		t.Fatalf("%d wake-ups, want one for the taker", a.wakes.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, waits := blocked(func() error { _, _, err := h.Take(ctx); return err })
	if !waits {
		t.Fatal("a second operation took a session in use")
	}
	cancel()
	if err := <-c; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	type took struct {
		s  *sess
		ok bool
	}
	c2, waits := blocked(func() took { s, ok, _ := h.Take(ctxFor(t, 5*time.Second)); return took{s, ok} })
	if !waits {
		t.Fatal("a second operation took a session in use")
	}
	a.Give()
	if got := <-c2; got.s != a || !got.ok {
		t.Fatalf("after give: %+v", got)
	}
	a.Give()
}

// A keep-alive runs only while nobody uses the session; an operation that
// wants the session cancels it, and does not wait for its request. The
// keep-alive reports no error then.
func TestKeepAliveYields(t *testing.T) {
	h := NewSlot[*sess]()
	a := newSess(1)
	h.Swap(a)
	started, stop := make(chan struct{}), make(chan struct{})
	type result struct {
		s   *sess
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := h.KeepAlive(context.Background(), func(ctx context.Context, s *sess) error {
			close(started)
			select {
			case <-ctx.Done():
				return errors.New("request interrupted")
			case <-stop:
				return nil
			}
		})
		done <- result{s, err}
	}()
	<-started
	// A keep-alive skips a session in use.
	ran := false
	if s, err := h.KeepAlive(context.Background(), func(context.Context, *sess) error { ran = true; return nil }); s != nil || err != nil || ran {
		t.Fatalf("second keep-alive: %v %v (ran %v)", s, err, ran)
	}
	wakes := a.wakes.Load()
	if s := take(t, &h); s != a {
		t.Fatalf("took %v", s)
	}
	if r := <-done; r.s != nil || r.err != nil {
		t.Fatalf("keep-alive an operation took the session from: %v %v, want nil", r.s, r.err)
	}
	// Woken when the keep-alive was cancelled and when taken.
	if got := a.wakes.Load() - wakes; got != 2 {
		t.Fatalf("%d wake-ups for the taker, want 2", got)
	}
	a.Give()
	close(stop)
}

// A keep-alive's failure is reported with its session (the agent decides
// what it means); a done context of its own is no yield.
func TestKeepAliveFails(t *testing.T) {
	h := NewSlot[*sess]()
	a := newSess(1)
	h.Swap(a)
	boom := errors.New("no answer")
	if s, err := h.KeepAlive(context.Background(), func(context.Context, *sess) error { return boom }); s != a || err != boom {
		t.Fatalf("failed keep-alive: %v %v", s, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := h.KeepAlive(ctx, func(ctx context.Context, _ *sess) error { return ctx.Err() }); s != a || !errors.Is(err, context.Canceled) {
		t.Fatalf("keep-alive with a done context: %v %v", s, err)
	}
	if !a.TryTake() {
		t.Fatal("the keep-alive did not give the session back")
	}
	a.Give()
}

// A replaced session is retired once its operation is done with it: the
// operation is never cut short, and the session is logged out once.
func TestRetireWaitsForTheOperation(t *testing.T) {
	h := NewSlot[*sess]()
	a, b := newSess(1), newSess(2)
	h.Swap(a)
	take(t, &h)
	old, _ := h.Swap(b)
	c, waits := blocked(func() bool { old.Retire(context.Background(), old.logout); return true })
	if !waits || a.logouts.Load() != 0 {
		t.Fatalf("retired under an operation (waits %v, %d logouts)", waits, a.logouts.Load())
	}
	if s := take(t, &h); s != b {
		t.Fatalf("took %v, want the new session", s)
	}
	a.Give()
	<-c
	if a.logouts.Load() != 1 || a.TryTake() {
		t.Fatalf("retired session: %d logouts, takeable again", a.logouts.Load())
	}
	b.Give()
}

// Retire does not wait past its context: the session is ended and logged
// out even though an operation still uses it.
func TestRetireWithinItsContext(t *testing.T) {
	a := newSess(1)
	a.TryTake()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	a.Retire(ctx, a.logout)
	if a.logouts.Load() != 1 {
		t.Fatalf("%d logouts", a.logouts.Load())
	}
	a.Give()
	if a.TryTake() {
		t.Fatal("an ended session was taken")
	}
}

// An operation waiting for a session that ends goes on to the one held
// then, or to none.
func TestTakeSkipsAnEndedSession(t *testing.T) {
	h := NewSlot[*sess]()
	a, b := newSess(1), newSess(2)
	h.Swap(a)
	take(t, &h)
	type took struct {
		s  *sess
		ok bool
	}
	c, waits := blocked(func() took { s, ok, _ := h.Take(ctxFor(t, 5*time.Second)); return took{s, ok} })
	if !waits {
		t.Fatal("took a session in use")
	}
	h.Swap(b)
	a.End()
	if got := <-c; got.s != b || !got.ok {
		t.Fatalf("after the held session ended: %+v, want the new one", got)
	}
	b.Give()
	a.Give()

	// Ended and nothing held any more: no session.
	h = NewSlot[*sess]()
	h.Swap(a)
	a2 := newSess(3)
	h.Swap(a2)
	take(t, &h)
	c, _ = blocked(func() took { s, ok, _ := h.Take(ctxFor(t, 5*time.Second)); return took{s, ok} })
	h.Drop()
	a2.End()
	if got := <-c; got.s != nil || got.ok {
		t.Fatalf("after the held session ended and was dropped: %+v", got)
	}
	a2.Give()
}

// Operations, keep-alives, replacements and retirements all at once: a
// session never has two users, is never logged out under one or handed
// out after its end, and every session replaced is logged out once.
func TestConcurrent(t *testing.T) {
	h := NewSlot[*sess]()
	var (
		mu      sync.Mutex
		all     []*sess
		nextID  atomic.Int32
		retired sync.WaitGroup
	)
	fresh := func() *sess {
		s := newSess(int(nextID.Add(1)))
		mu.Lock()
		all = append(all, s)
		mu.Unlock()
		return s
	}
	use := func(s *sess) {
		if n := s.users.Add(1); n != 1 {
			t.Errorf("session %d has %d users", s.id, n)
		}
		if s.logouts.Load() != 0 {
			t.Errorf("session %d used after its logout", s.id)
		}
		time.Sleep(time.Duration(s.id%3) * 100 * time.Microsecond)
		s.users.Add(-1)
	}
	retire := func(s *sess) {
		if s == nil {
			return
		}
		retired.Add(1)
		go func() {
			defer retired.Done()
			s.Retire(context.Background(), func() {
				if s.users.Load() != 0 {
					t.Errorf("session %d logged out under a user", s.id)
				}
				s.logout()
			})
		}()
	}
	h.Swap(fresh())
	ctx := ctxFor(t, 30*time.Second)
	var wg sync.WaitGroup
	const workers, rounds = 6, 300
	for w := 0; w < workers; w++ {
		wg.Add(3)
		go func() { // operations
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				s, ok, err := h.Take(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					// As an agent does: a new session, held unless
					// another is by then.
					s = fresh()
					s.TryTake()
					if !h.CompareAndSwap(nil, s) {
						use(s)
						s.Give()
						retire(s)
						continue
					}
				}
				use(s)
				s.Give()
			}
		}()
		go func() { // keep-alives
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				_, _ = h.KeepAlive(ctx, func(kctx context.Context, s *sess) error {
					use(s)
					return kctx.Err()
				})
			}
		}()
		go func() { // checks that replace the session, and drops
			defer wg.Done()
			for i := 0; i < rounds/10; i++ {
				if i%4 == 3 {
					retire(h.Drop())
					continue
				}
				old, ok := h.Swap(fresh())
				if !ok {
					t.Error("swap into an open slot failed")
				}
				retire(old)
			}
		}()
	}
	wg.Wait()
	retire(h.Close())
	retired.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, s := range all {
		if n := s.logouts.Load(); n != 1 {
			t.Errorf("session %d logged out %d times", s.id, n)
		}
	}
	if h.Holds() {
		t.Error("a closed slot holds a session")
	}
}
