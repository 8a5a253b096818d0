package ipmi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/command/app"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/fenced/fenced/agents"
)

// Sessions left open by a process that ended without logging them out
// (agents.SessionRecorder, agents.SessionCloser). Every RMCP+ session the
// agent opens is recorded by the BMC's ID for it, as the agent's requests
// carry it in clear; no key or password is. A successor closes them: it
// logs in and sends Close Session for each ID, which IPMI lets any session
// of the same privilege do. That needs one free slot; a BMC without one
// says so, and its sessions then wait for the BMC's inactivity timeout.
// Sessions of IPMI v1.5 (lanplus=0) are not recorded.

var (
	_ agents.SessionRecorder = (*Agent)(nil)
	_ agents.SessionCloser   = (*Agent)(nil)
	_ agents.SlotReporter    = (*Agent)(nil)
)

// RecordSessions has every session the agent opens from now on reported to
// l.
func (a *Agent) RecordSessions(l agents.SessionLedger) { a.ledger.Store(&l) }

// NoFreeSlot reports whether the last check found the BMC's session table
// full, and checked on the held session instead.
func (a *Agent) NoFreeSlot() bool { return a.slotsFull.Load() }

// recordOpened reports s, just logged in, to the ledger.
func (s *session) recordOpened() {
	l := s.a.ledger.Load()
	if l == nil || s.conn == nil {
		return
	}
	id := s.conn.sessionID()
	if id == 0 {
		return // IPMI v1.5, or no authenticated request went out
	}
	s.rec = &agents.SessionRecord{Agent: "ipmi", Address: s.a.cfg.addr(), ID: fmt.Sprintf("%08x", id), Opened: time.Now().UTC()}
	(*l).Opened(*s.rec)
}

// recordClosed reports s as closed, once.
func (s *session) recordClosed() {
	l := s.a.ledger.Load()
	if l == nil || s.rec == nil {
		return
	}
	(*l).Closed(*s.rec)
	s.rec = nil
}

// CloseSessions sends Close Session for each recorded session of this
// BMC, on the held session or one of its own. An ID the BMC answers it does not know is a session already
// gone (expired, or closed by the BMC's restart).
func (a *Agent) CloseSessions(ctx context.Context, recs []agents.SessionRecord) (map[agents.SessionRecord]error, error) {
	failed := map[agents.SessionRecord]error{}
	type target struct {
		rec agents.SessionRecord
		id  uint32
	}
	var todo []target
	for _, r := range recs {
		if r.Agent != "ipmi" || r.Address != a.cfg.addr() {
			failed[r] = fmt.Errorf("recorded for %s at %s, not this device (ipmi at %s)", r.Agent, r.Address, a.cfg.addr())
			continue
		}
		id, err := strconv.ParseUint(r.ID, 16, 32)
		if err != nil || id == 0 {
			failed[r] = fmt.Errorf("session ID %q is not an IPMI session ID (8 hex digits)", r.ID)
			continue
		}
		todo = append(todo, target{r, uint32(id)})
	}
	if len(todo) == 0 {
		return failed, nil
	}
	// On the held session, if any (the check that opened it came first:
	// no login of its own), else on a session of its own.
	s, held, err := a.held.Take(ctx)
	switch {
	case err != nil:
		return failed, agents.Failed(a.op("close sessions"), fmt.Errorf("waiting for the session: %w", err))
	case held:
		defer s.release()
	default:
		if s, err = a.open(ctx); err != nil {
			return failed, err
		}
		defer s.close(ctx, true)
	}
	own := s.conn.sessionID()
	for _, t := range todo {
		if t.id == own {
			continue // the BMC gave the ID out again, to the session closing the others
		}
		_, err := s.c.CloseSession(ctx, &app.CloseSessionRequest{SessionID: t.id})
		s.answered(ctx, err)
		var rerr *types.ResponseError
		switch {
		case err == nil:
			a.log.Info("ipmi closed a session a previous run left open", "session_id", t.rec.ID, "opened", t.rec.Opened.Format(time.RFC3339))
		case errors.As(err, &rerr) && gone(rerr.CompletionCode()):
			a.log.Debug("ipmi session a previous run left open is gone already", "session_id", t.rec.ID)
		default:
			failed[t.rec] = s.classify(ctx, "close session "+t.rec.ID, err, false)
		}
	}
	return failed, nil
}

// gone reports a Close Session refusal that means the BMC has no such
// session (IPMI v2.0 table 22-25: invalid session ID or handle; some BMCs
// answer parameter out of range, or invalid data).
func gone(cc types.CompletionCode) bool {
	switch cc {
	case types.CodeCloseSessionInvalidSessionID, types.CodeCloseSessionInvalidSessionHandle,
		types.CodeParameterOutOfRange, types.CodeRequestDataFieldInvalid:
		return true
	}
	return false
}

// withBudget returns a context that ends with ctx, or once budget() has
// passed since start, as context.WithTimeout would (its error is
// context.DeadlineExceeded), except that budget is asked again each time
// the time it last gave runs out: it grows as the login measures the BMC.
// spent reports whether the budget ended it, and the budget it had then.
func withBudget(ctx context.Context, start time.Time, budget func() time.Duration) (_ context.Context, cancel func(), spent func() (bool, time.Duration)) {
	b := &budgetCtx{Context: ctx, done: make(chan struct{}), stop: make(chan struct{})}
	allowed := budget()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTimer(time.Until(start.Add(allowed)))
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				b.end(context.Canceled)
				return
			case <-ctx.Done():
				b.end(ctx.Err())
				return
			case <-t.C:
			}
			if n := budget(); n > allowed {
				allowed = n
				t.Reset(time.Until(start.Add(allowed)))
				continue
			}
			b.mu.Lock()
			b.spent = true
			b.mu.Unlock()
			b.end(context.DeadlineExceeded)
			return
		}
	}()
	var once sync.Once
	end := func() {
		once.Do(func() { close(b.stop) })
		<-finished
	}
	return b, end, func() (bool, time.Duration) {
		end()
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.spent, allowed
	}
}

// budgetCtx is withBudget's context.
type budgetCtx struct {
	context.Context // the parent: its deadline and values
	done, stop      chan struct{}

	mu    sync.Mutex
	err   error
	spent bool
}

func (b *budgetCtx) Done() <-chan struct{} { return b.done }

func (b *budgetCtx) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *budgetCtx) end(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
		close(b.done)
	}
}
