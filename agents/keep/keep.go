// Package keep holds an agent's logged-in session to its device between
// operations (agents.Keeper), for the agents that keep one (ipmi,
// redfish). An agent keeps at most one session, in a Slot. One operation
// at a time uses it, through the session's Lease, and hands it back; a
// keep-alive runs on it only while nobody else does, and an operation
// that needs the session cancels the keep-alive instead of waiting for
// it. A newer session replaces the held one, and the one replaced,
// dropped or left at Close is retired: logged out once nobody uses it,
// and never handed out again.
//
// The sessions an agent opens are recorded in a Journal (a file under the
// daemon's data_dir): a process killed before it logged them out leaves
// them there, and the next one closes them (agents.SessionRecord).
//
// What a session is, how it logs in and out and what a keep-alive asks
// stay with each agent's protocol.
package keep

import (
	"context"
	"errors"
	"sync"
)

// Session is what a Slot holds: a pointer to an agent's session type,
// which embeds a Lease.
type Session interface {
	comparable
	lease() *Lease
}

// Lease is one session's turns: it is taken by one user at a time (an
// operation or a keep-alive) and given back, until it ends. Embed it in
// the session type; the zero Lease is free. A Lease must not be copied.
type Lease struct {
	// Wake, when set, is called each time a Slot hands the session to a
	// taker, and when a taker cancels the keep-alive using it: a protocol
	// whose abandoned request leaves the session waiting (a read on an
	// IPMI socket) ends that wait, so that the taker's requests go out
	// at once. Set it before the session is shared.
	Wake func()

	init  sync.Once
	turn  chan struct{} // holds a token while the session is taken
	ended chan struct{} // closed by End
	end   sync.Once

	mu    sync.Mutex
	yield func() // cancels the keep-alive using the session, if one does
}

func (l *Lease) lease() *Lease { return l }

func (l *Lease) chans() {
	l.init.Do(func() {
		l.turn = make(chan struct{}, 1)
		l.ended = make(chan struct{})
	})
}

func (l *Lease) wake() {
	if l.Wake != nil {
		l.Wake()
	}
}

func (l *Lease) isEnded() bool {
	select {
	case <-l.ended:
		return true
	default:
		return false
	}
}

// TryTake takes the session if nobody uses it and it has not ended (a new
// session always can be taken), without waking it.
func (l *Lease) TryTake() bool {
	l.chans()
	select {
	case l.turn <- struct{}{}:
	default:
		return false
	}
	if l.isEnded() {
		<-l.turn
		return false
	}
	return true
}

// Give hands the session back after use.
func (l *Lease) Give() {
	l.chans()
	<-l.turn
}

// End marks the session ended: nobody takes it any more, and those
// waiting for it stop waiting. Ending twice is ending once.
func (l *Lease) End() {
	l.chans()
	l.end.Do(func() { close(l.ended) })
}

// Retire waits, within ctx, until nobody uses the session, then ends it
// and calls logout while it holds the session; if ctx is done first, it
// ends it and calls logout at once.
func (l *Lease) Retire(ctx context.Context, logout func()) {
	l.chans()
	select {
	case l.turn <- struct{}{}:
		defer func() { <-l.turn }()
	case <-ctx.Done():
	}
	l.End()
	logout()
}

// errEnded: the session ended while a taker waited for it.
var errEnded = errors.New("session ended")

// take takes the session for an operation: a keep-alive using it is
// cancelled, another operation waited for.
func (l *Lease) take(ctx context.Context) error {
	if l.TryTake() {
		l.wake()
		return nil
	}
	l.mu.Lock()
	y := l.yield
	l.mu.Unlock()
	if y != nil {
		y()
		l.wake()
	}
	select {
	case l.turn <- struct{}{}:
	case <-l.ended:
		return errEnded
	case <-ctx.Done():
		return ctx.Err()
	}
	if l.isEnded() {
		<-l.turn
		return errEnded
	}
	l.wake()
	return nil
}

func (l *Lease) setYield(fn func()) {
	l.mu.Lock()
	l.yield = fn
	l.mu.Unlock()
}

// Slot is where an agent keeps its session: one or none. Make it with
// NewSlot and keep it in one place (an agent's field): a copy shares the
// slot's lock but is a view of what it held when copied, which it compares
// equal to while the slot holds the same session.
type Slot[S Session] struct {
	mu     *sync.Mutex
	cur    S
	closed bool
}

// NewSlot returns an empty, open slot.
func NewSlot[S Session]() Slot[S] { return Slot[S]{mu: new(sync.Mutex)} }

func (h *Slot[S]) held() S {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

// Holds reports whether a session is held.
func (h *Slot[S]) Holds() bool {
	var none S
	return h.held() != none
}

// Take takes the held session for one operation (a keep-alive using it is
// cancelled, another operation waited for); the caller gives it back. ok
// is false when no session is held; err is ctx's when it ends first. A
// session retired while Take waited for it is not taken: Take takes the
// one held then, if any.
func (h *Slot[S]) Take(ctx context.Context) (s S, ok bool, err error) {
	var none S
	for {
		s := h.held()
		if s == none {
			return none, false, nil
		}
		err := s.lease().take(ctx)
		if err == nil {
			return s, true, nil
		}
		if ctx.Err() != nil {
			return none, false, ctx.Err()
		}
	}
}

// KeepAlive runs probe on the held session if nobody uses it, then gives
// it back. An operation that takes the session meanwhile cancels probe's
// context; that probe's failure is no error (nil). It returns the session
// probed and probe's error; nothing (and nil) when no session is held or
// it is in use.
func (h *Slot[S]) KeepAlive(ctx context.Context, probe func(context.Context, S) error) (S, error) {
	var none S
	s := h.held()
	if s == none {
		return none, nil
	}
	l := s.lease()
	if !l.TryTake() {
		return none, nil
	}
	l.wake()
	defer l.Give()
	kctx, cancel := context.WithCancel(ctx)
	l.setYield(cancel)
	err := probe(kctx, s)
	l.setYield(nil)
	yielded := kctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err == nil || yielded {
		return none, nil
	}
	return s, err
}

// Swap holds s in place of the held session, and returns that one for the
// caller to retire. Once the slot is closed, s is not held and ok is
// false.
func (h *Slot[S]) Swap(s S) (old S, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return old, false
	}
	old, h.cur = h.cur, s
	return old, true
}

// CompareAndSwap holds s in place of old if the slot holds old (none: the
// zero S) and is open, and reports whether it did.
func (h *Slot[S]) CompareAndSwap(old, s S) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.cur != old {
		return false
	}
	h.cur = s
	return true
}

// Drop empties the slot and returns what it held, for the caller to
// retire.
func (h *Slot[S]) Drop() S {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.cur
	var none S
	h.cur = none
	return s
}

// Close empties the slot for good (it holds nothing more) and returns what
// it held, for the caller to retire.
func (h *Slot[S]) Close() S {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	s := h.cur
	var none S
	h.cur = none
	return s
}
