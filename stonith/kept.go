package stonith

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fenced/fenced/agents"
)

// Kept is one device's agent kept between operations by its owner (the
// node's device health monitor: one goroutine per device), which checks
// the device through it and keeps its session warm. The engine lends it
// to every operation on a target built from the same parameters (same
// agent, plug and parameters), so a fence uses the session the checks
// opened instead of logging in: see the package documentation, "Kept
// agents and warm sessions".
//
// Its methods are safe for concurrent use. Close it when done with it.
type Kept struct {
	e   *Engine
	t   Target
	key string
	a   agents.Agent
	log *slog.Logger

	mu      sync.Mutex
	checked time.Time // when the last check finished
	err     error     // of the last check
}

// Keep builds t's agent, to be kept, and lends it to operations on
// t.Device from now on (in place of any kept before for the device).
// It touches no device.
func (e *Engine) Keep(t Target) (*Kept, error) {
	log := e.log.With("device", t.Device, "agent", t.Agent)
	a, err := e.newAgent(t, log)
	if err != nil {
		return nil, err
	}
	k := &Kept{e: e, t: t, key: targetKey(t), a: a, log: log}
	e.mu.Lock()
	e.kept[t.Device] = k
	e.mu.Unlock()
	return k, nil
}

// Target is what the agent was built from.
func (k *Kept) Target() Target { return k.t }

// Check checks the device as Engine.Monitor does, through the kept agent.
// With keep, an agent that can hold a session (agents.Keeper) logs in
// anew and holds that session for the operations to come; without, it
// holds none.
func (k *Kept) Check(ctx context.Context, keep bool) error {
	var err error
	switch a := k.a.(type) {
	case agents.Keeper:
		err = a.Check(ctx, keep)
	case agents.Monitor:
		err = a.Monitor(ctx)
	default:
		_, err = k.a.Status(ctx)
	}
	if err != nil {
		err = fmt.Errorf("device %s: monitor: %w", k.t.Device, err)
	}
	k.mu.Lock()
	k.checked, k.err = time.Now(), err
	k.mu.Unlock()
	return err
}

// KeepAlive keeps the agent's session from expiring (agents.Keeper); a
// no-op for agents that hold none.
func (k *Kept) KeepAlive(ctx context.Context) error {
	if kp, ok := k.a.(agents.Keeper); ok {
		if err := kp.KeepAlive(ctx); err != nil {
			return fmt.Errorf("device %s: keep-alive: %w", k.t.Device, err)
		}
	}
	return nil
}

// KeepAliveInterval is how often KeepAlive is needed while a session is
// held; 0 for agents that hold none.
func (k *Kept) KeepAliveInterval() time.Duration {
	if kp, ok := k.a.(agents.Keeper); ok {
		return kp.KeepAliveInterval()
	}
	return 0
}

// Holds reports whether the agent holds a session.
func (k *Kept) Holds() bool {
	kp, ok := k.a.(agents.Keeper)
	return ok && kp.Holds()
}

// NoFreeSlot reports whether the agent's last check found no free session
// slot on the device (agents.SlotReporter); false for agents that do not
// say.
func (k *Kept) NoFreeSlot() bool {
	r, ok := k.a.(agents.SlotReporter)
	return ok && r.NoFreeSlot()
}

// CloseSessions closes sessions a previous process left open on the
// device, through the kept agent (agents.SessionCloser: on the session it
// holds, if it holds one), within the device's timeout.
func (k *Kept) CloseSessions(ctx context.Context, recs []agents.SessionRecord) (map[agents.SessionRecord]error, error) {
	c, ok := k.a.(agents.SessionCloser)
	if !ok {
		return nil, fmt.Errorf("device %s: agent %s cannot close sessions", k.t.Device, k.t.Agent)
	}
	ctx, cancel := k.e.deviceContext(ctx, k.t)
	defer cancel()
	failed, err := c.CloseSessions(ctx, recs)
	if err != nil {
		return failed, fmt.Errorf("device %s: close sessions left open: %w", k.t.Device, err)
	}
	return failed, nil
}

// Drop logs out the agent's session, if it holds one.
func (k *Kept) Drop() {
	if kp, ok := k.a.(agents.Keeper); ok {
		kp.Drop()
	}
}

// failing reports whether the last check failed.
func (k *Kept) failing() (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err != nil, k.err
}

// roundTrip is the agent's measured round trip, if it measures one.
func (k *Kept) roundTrip() (rtt, timeout time.Duration, ok bool) {
	if r, is := k.a.(agents.RoundTripper); is {
		return r.RoundTrip()
	}
	return 0, 0, false
}

// Close stops lending the agent and closes it (logging out its session).
func (k *Kept) Close() error {
	k.e.mu.Lock()
	if k.e.kept[k.t.Device] == k {
		delete(k.e.kept, k.t.Device)
	}
	k.e.mu.Unlock()
	if c, ok := k.a.(agents.Closer); ok {
		return c.Close()
	}
	return nil
}

// kept returns the agent kept for t, if it was built from t's parameters.
func (e *Engine) keptFor(t Target) *Kept {
	e.mu.Lock()
	defer e.mu.Unlock()
	if k := e.kept[t.Device]; k != nil && k.key == targetKey(t) {
		return k
	}
	return nil
}
