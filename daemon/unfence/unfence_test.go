package unfence

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

type plainAgent struct{}

func (plainAgent) Off(context.Context) error                    { return nil }
func (plainAgent) On(context.Context) error                     { return nil }
func (plainAgent) Reboot(context.Context) error                 { return nil }
func (plainAgent) Status(context.Context) (agents.State, error) { return agents.StateOn, nil }

type scsiAgent struct{ plainAgent }

func (scsiAgent) UnfenceAtStart() bool { return true }

func registry() *agents.Registry {
	reg := agents.NewRegistry()
	reg.Register(agents.Kind{Name: "plain", New: func(agents.Params, *slog.Logger) (agents.Agent, error) { return plainAgent{}, nil }})
	reg.Register(agents.Kind{Name: "scsi", New: func(agents.Params, *slog.Logger) (agents.Agent, error) { return scsiAgent{}, nil }})
	reg.Register(agents.Kind{Name: "broken", New: func(agents.Params, *slog.Logger) (agents.Agent, error) {
		return nil, errors.New("program not found")
	}})
	return reg
}

// topo: level 1 a BMC, level 2 a SCSI reservation device and a PDU.
func topo() stonith.Topology {
	return stonith.Topology{
		{Devices: []stonith.Target{{Device: "bmc", Agent: "plain"}}},
		{Devices: []stonith.Target{{Device: "scsi", Agent: "scsi", Plug: "node1"}, {Device: "pdu", Agent: "plain", Plug: "3"}}},
	}
}

// harness records what the unfencer runs.
type harness struct {
	reqs []stonith.Request
	fail int // tries left that fail
}

func (h *harness) opts(modes map[string]string) Options {
	return Options{
		Self: "node1", Topology: topo(), Modes: modes, Registry: registry(),
		Fence: func(_ context.Context, req stonith.Request) fencing.Record {
			h.reqs = append(h.reqs, req)
			rec := fencing.Record{Kind: fencing.KindUnfence, Target: req.Target, Action: req.Action, Executor: req.Executor, Outcome: fencing.OutcomeSuccess}
			if h.fail > 0 {
				h.fail--
				rec.Outcome, rec.Error = fencing.OutcomeFailed, "level 2: device scsi: try 1: failed: reservation conflict"
			}
			return rec
		},
		Epoch: func() uint64 { return 7 },
	}
}

// The SCSI device (its agent declares on_target, automatic) is unfenced
// by the node for itself: "on" through that device alone, at its level.
func TestAttempt(t *testing.T) {
	h := &harness{}
	u := New(h.opts(nil))
	if d := u.Devices(); len(d) != 1 || d[0] != "scsi" || u.Err() != nil {
		t.Fatalf("devices %v, err %v", d, u.Err())
	}
	rec, ok := u.Attempt(context.Background())
	if !ok || rec.Outcome != fencing.OutcomeSuccess || rec.Kind != fencing.KindUnfence {
		t.Fatalf("attempt: %v %+v", ok, rec)
	}
	if len(h.reqs) != 1 {
		t.Fatalf("%d requests", len(h.reqs))
	}
	r := h.reqs[0]
	if r.Target != "node1" || r.Action != fencing.ActionOn || r.Executor != "node1" || r.Epoch != 7 ||
		len(r.Levels) != 1 || r.Levels[0] != 2 || len(r.Topology) != 2 || len(r.Topology[0].Devices) != 0 ||
		len(r.Topology[1].Devices) != 1 || r.Topology[1].Devices[0].Device != "scsi" || r.Topology[1].Devices[0].Plug != "node1" {
		t.Fatalf("request %+v", r)
	}
	h.fail = 1
	if rec, ok := u.Attempt(context.Background()); ok || !strings.Contains(rec.Error, "reservation conflict") {
		t.Fatalf("a failing device: %v %+v", ok, rec)
	}
}

// Modes override the agent: on_start unfences a device whose agent does
// not ask for it, never skips one that does.
func TestModes(t *testing.T) {
	h := &harness{}
	u := New(h.opts(map[string]string{"scsi": ModeNever, "pdu": ModeOnStart}))
	if d := u.Devices(); len(d) != 1 || d[0] != "pdu" {
		t.Fatalf("devices %v", d)
	}
	u = New(h.opts(map[string]string{"scsi": ModeNever}))
	if d := u.Devices(); len(d) != 0 || u.Err() != nil {
		t.Fatalf("nothing to unfence: devices %v, err %v", d, u.Err())
	}
}

// An agent that cannot be built: the devices cannot be told, and no
// attempt runs anything until they can.
func TestUnknownDevices(t *testing.T) {
	h := &harness{}
	o := h.opts(nil)
	o.Topology = append(o.Topology, stonith.Level{Devices: []stonith.Target{{Device: "mpath", Agent: "broken"}}})
	u := New(o)
	if err := u.Err(); err == nil || !strings.Contains(err.Error(), "device mpath: program not found") {
		t.Fatalf("err %v", err)
	}
	rec, ok := u.Attempt(context.Background())
	if ok || rec.Kind != "" || !strings.Contains(rec.Error, "cannot tell which devices to unfence: device mpath: program not found") {
		t.Fatalf("attempt: %v %+v", ok, rec)
	}
	if len(h.reqs) != 0 {
		t.Errorf("%d unfences run without knowing the devices", len(h.reqs))
	}
}
