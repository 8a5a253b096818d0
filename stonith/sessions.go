package stonith

import (
	"context"
	"fmt"

	"github.com/fenced/fenced/agents"
)

// Sessions that outlive the process (agents.SessionRecord): the engine
// hands every agent that records its sessions the engine's ledger, under
// the device's name, and closes what a previous process left open with
// the device's agent.

// deviceLedger is the engine's ledger for the agents of one device.
type deviceLedger struct {
	device string
	l      agents.SessionLedger
}

func (d deviceLedger) Opened(r agents.SessionRecord) { r.Device = d.device; d.l.Opened(r) }
func (d deviceLedger) Closed(r agents.SessionRecord) { r.Device = d.device; d.l.Closed(r) }

func (e *Engine) recordSessions(a agents.Agent, t Target) {
	if r, ok := a.(agents.SessionRecorder); ok && e.Sessions != nil {
		r.RecordSessions(deviceLedger{device: t.Device, l: e.Sessions})
	}
}

// CloseSessions closes recs, sessions a previous process left open on t's
// device, with an agent built from t, within t's timeout: see
// agents.SessionCloser. An agent that cannot close sessions fails them all.
func (e *Engine) CloseSessions(ctx context.Context, t Target, recs []agents.SessionRecord) (map[agents.SessionRecord]error, error) {
	a, closeAgent, err := e.build(t, e.log.With("device", t.Device, "agent", t.Agent))
	if err != nil {
		return nil, err
	}
	defer closeAgent()
	c, ok := a.(agents.SessionCloser)
	if !ok {
		return nil, fmt.Errorf("device %s: agent %s cannot close sessions", t.Device, t.Agent)
	}
	ctx, cancel := e.deviceContext(ctx, t)
	defer cancel()
	failed, err := c.CloseSessions(ctx, recs)
	if err != nil {
		return failed, fmt.Errorf("device %s: close sessions left open: %w", t.Device, err)
	}
	return failed, nil
}
