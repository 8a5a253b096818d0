package unfence

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith"
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

// harness records what the unfencer does.
type harness struct {
	mu         sync.Mutex
	ineligible []string // every reason set, "" for a clear
	reqs       []stonith.Request
	commits    []stonith.Record
	joined     atomic.Bool
	fail       atomic.Int32 // tries left that fail
}

func (h *harness) opts(modes map[string]string) Options {
	return Options{
		Self: "node1", Topology: topo(), Modes: modes, Registry: registry(),
		Fence: func(_ context.Context, req stonith.Request) stonith.Record {
			h.mu.Lock()
			h.reqs = append(h.reqs, req)
			h.mu.Unlock()
			rec := stonith.Record{Kind: stonith.KindUnfence, Target: req.Target, Action: req.Action, Executor: req.Executor, Outcome: stonith.OutcomeSuccess}
			if h.fail.Add(-1) >= 0 {
				rec.Outcome, rec.Error = stonith.OutcomeFailed, "level 2: device scsi: try 1: failed: reservation conflict"
			}
			return rec
		},
		SetIneligible: func(source, reason string) {
			if source != Source {
				panic(source)
			}
			h.mu.Lock()
			h.ineligible = append(h.ineligible, reason)
			h.mu.Unlock()
		},
		Joined: h.joined.Load,
		Epoch:  func() uint64 { return 7 },
		Commit: func(_ context.Context, rec stonith.Record) error {
			h.mu.Lock()
			h.commits = append(h.commits, rec)
			h.mu.Unlock()
			return nil
		},
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, JoinPoll: 5 * time.Millisecond,
	}
}

func (h *harness) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ineligible) == 0 {
		return "<never set>"
	}
	return h.ineligible[len(h.ineligible)-1]
}

func (h *harness) requests() []stonith.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]stonith.Request(nil), h.reqs...)
}

func run(t *testing.T, u *Unfencer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The SCSI device (its agent declares on_target, automatic) is unfenced
// by the node for itself, only after it knows a leader; until then, and
// from New on, the node is ineligible.
func TestUnfenceAtStart(t *testing.T) {
	h := &harness{}
	u := New(h.opts(nil))
	if got := h.last(); !strings.Contains(got, "waiting for a cluster leader") || !strings.Contains(got, "scsi") {
		t.Fatalf("after New: ineligible %q", got)
	}
	if d := u.Devices(); len(d) != 1 || d[0] != "scsi" {
		t.Fatalf("devices %v", d)
	}
	stop := run(t, u)
	defer stop()
	time.Sleep(50 * time.Millisecond)
	if n := len(h.requests()); n != 0 {
		t.Fatalf("%d unfences before a leader was known", n)
	}
	h.joined.Store(true)
	waitFor(t, "eligible", func() bool { return h.last() == "" })
	reqs := h.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Target != "node1" || r.Action != stonith.ActionOn || r.Executor != "node1" || r.Epoch != 7 ||
		len(r.Levels) != 1 || r.Levels[0] != 2 || len(r.Topology) != 2 || len(r.Topology[0].Devices) != 0 ||
		len(r.Topology[1].Devices) != 1 || r.Topology[1].Devices[0].Device != "scsi" || r.Topology[1].Devices[0].Plug != "node1" {
		t.Fatalf("request %+v", r)
	}
	waitFor(t, "the record", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.commits) == 1 })
	if c := h.commits[0]; c.Outcome != stonith.OutcomeSuccess || c.Kind != stonith.KindUnfence {
		t.Fatalf("committed %+v", c)
	}
}

// A failing unfence keeps the node ineligible with the error, retries with
// backoff, and the node becomes eligible once it succeeds. Only the first
// failure and the success are recorded.
func TestUnfenceRetries(t *testing.T) {
	h := &harness{}
	h.joined.Store(true)
	h.fail.Store(4)
	u := New(h.opts(nil))
	stop := run(t, u)
	defer stop()
	waitFor(t, "a failure", func() bool { return strings.Contains(h.last(), "reservation conflict") })
	if got := h.last(); !strings.Contains(got, "unfencing this node failed (try 1, next in 10ms)") {
		t.Errorf("reason %q", got)
	}
	waitFor(t, "eligible", func() bool { return h.last() == "" })
	if n := len(h.requests()); n != 5 {
		t.Errorf("%d tries, want 5", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.commits) != 2 || h.commits[0].Outcome != stonith.OutcomeFailed || h.commits[1].Outcome != stonith.OutcomeSuccess {
		t.Errorf("committed %+v", h.commits)
	}
	var sawBackoff bool
	for _, r := range h.ineligible {
		sawBackoff = sawBackoff || strings.Contains(r, "next in 40ms")
	}
	if !sawBackoff {
		t.Errorf("backoff never reached its cap: %q", h.ineligible)
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
	h2 := &harness{}
	u = New(h2.opts(map[string]string{"scsi": ModeNever}))
	if d := u.Devices(); len(d) != 0 || len(h2.ineligible) != 0 {
		t.Fatalf("nothing to unfence: devices %v, ineligible %q", d, h2.ineligible)
	}
	// Nothing to do: Run returns at once and the node stays eligible.
	done := make(chan struct{})
	go func() { u.Run(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run with nothing to unfence did not return")
	}
}

// An agent that cannot be built keeps the node ineligible: it cannot tell
// whether that device must be unfenced.
func TestUnknownKeepsIneligible(t *testing.T) {
	h := &harness{}
	o := h.opts(nil)
	o.Topology = append(o.Topology, stonith.Level{Devices: []stonith.Target{{Device: "mpath", Agent: "broken"}}})
	u := New(o)
	if got := h.last(); !strings.Contains(got, "cannot tell which devices to unfence: device mpath: program not found") {
		t.Fatalf("ineligible %q", got)
	}
	h.joined.Store(true)
	stop := run(t, u)
	waitFor(t, "a retry", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.ineligible) >= 3 })
	stop()
	if n := len(h.requests()); n != 0 {
		t.Errorf("%d unfences run without knowing the devices", n)
	}
	if got := h.last(); got == "" {
		t.Error("became eligible")
	}
}
