package stonith

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith/fencing"
)

// cmdDevice is a scripted BMC whose agent is a Commander, Keeper,
// RoundTripper and AnswerReporter, as the IPMI agent is.
type cmdDevice struct {
	mu sync.Mutex
	on bool
	// offAfter: the state follows a power-off command this much later.
	offAfter time.Duration
	offAt    time.Time
	// silent: no request is answered (each waits for its context).
	silent bool
	// refuse: the command is refused (an IPMI completion code).
	refuse bool
	// ignore: the command is accepted and nothing happens.
	ignore bool
	// latency of every answer.
	latency time.Duration

	commands, statuses, checks, closes atomic.Int32
	builds                             atomic.Int32
}

type cmdAgent struct{ d *cmdDevice }

func (a *cmdAgent) answer(ctx context.Context) error {
	a.d.mu.Lock()
	silent, lat := a.d.silent, a.d.latency
	a.d.mu.Unlock()
	if silent {
		<-ctx.Done()
		return agents.Unknown("cmd", fmt.Errorf("no reply: %w", ctx.Err()))
	}
	if lat > 0 {
		select {
		case <-time.After(lat):
		case <-ctx.Done():
			return agents.Unknown("cmd", ctx.Err())
		}
	}
	agents.NoteAnswer(ctx)
	return nil
}

func (a *cmdAgent) Command(ctx context.Context, want agents.State) (time.Duration, error) {
	a.d.commands.Add(1)
	if err := a.answer(ctx); err != nil {
		return time.Second, err
	}
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	switch {
	case a.d.refuse:
		return time.Second, agents.Failed("cmd: power", errors.New("completion code 0xd5"))
	case a.d.ignore:
	case want == agents.StateOff:
		a.d.offAt = time.Now().Add(a.d.offAfter)
	default:
		a.d.on, a.d.offAt = true, time.Time{}
	}
	return time.Second, nil
}

func (a *cmdAgent) Status(ctx context.Context) (agents.State, error) {
	a.d.statuses.Add(1)
	if err := a.answer(ctx); err != nil {
		return agents.StateUnknown, err
	}
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	if !a.d.offAt.IsZero() && !time.Now().Before(a.d.offAt) {
		a.d.on, a.d.offAt = false, time.Time{}
	}
	if a.d.on {
		return agents.StateOn, nil
	}
	return agents.StateOff, nil
}

func (a *cmdAgent) Off(ctx context.Context) error    { return errors.New("the engine uses Command") }
func (a *cmdAgent) On(ctx context.Context) error     { return errors.New("the engine uses Command") }
func (a *cmdAgent) Reboot(ctx context.Context) error { return errors.New("the engine uses Command") }
func (a *cmdAgent) Check(ctx context.Context, keep bool) error {
	a.d.checks.Add(1)
	return a.answer(ctx)
}
func (a *cmdAgent) KeepAlive(ctx context.Context) error { return nil }
func (a *cmdAgent) KeepAliveInterval() time.Duration    { return time.Second }
func (a *cmdAgent) Holds() bool                         { return true }
func (a *cmdAgent) Drop()                               {}
func (a *cmdAgent) RoundTrip() (time.Duration, time.Duration, bool) {
	return time.Millisecond, 100 * time.Millisecond, true
}
func (a *cmdAgent) ReportsAnswers() bool { return true }
func (a *cmdAgent) Close() error         { a.d.closes.Add(1); return nil }

type cmdLab struct {
	mu      sync.Mutex
	devices map[string]*cmdDevice
	reg     *agents.Registry
}

func newCmdLab() *cmdLab {
	l := &cmdLab{devices: map[string]*cmdDevice{}, reg: agents.NewRegistry()}
	l.reg.Register(agents.Kind{Name: "cmd", New: func(p agents.Params, _ *slog.Logger) (agents.Agent, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		d, ok := l.devices[p["dev"]]
		if !ok {
			return nil, fmt.Errorf("cmd: no device %q", p["dev"])
		}
		d.builds.Add(1)
		return &cmdAgent{d: d}, nil
	}})
	return l
}

func (l *cmdLab) add(name string, d *cmdDevice) Target {
	d.on = true
	l.mu.Lock()
	l.devices[name] = d
	l.mu.Unlock()
	return Target{Device: name, Agent: "cmd", Params: agents.Params{"dev": name}, Timeout: 3 * time.Second}
}

func (l *cmdLab) engine() *Engine {
	e := NewEngine(l.reg, nil)
	e.RetryDelay = time.Millisecond
	return e
}

// A Commander gets one command; the engine's own status queries are the
// read-back, polled until the state follows.
func TestCommandThenReadBack(t *testing.T) {
	l := newCmdLab()
	d := &cmdDevice{offAfter: 250 * time.Millisecond}
	rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{l.add("bmc", d)}}}})
	if rec.Outcome != fencing.OutcomeSuccess || summary(rec) != "1/bmc/off/1=success(off)" {
		t.Fatalf("%s: %s (%s)", rec.Outcome, summary(rec), rec.Error)
	}
	if d.commands.Load() != 1 || d.statuses.Load() < 2 {
		t.Fatalf("%d commands, %d status queries: want one command and a polled read-back", d.commands.Load(), d.statuses.Load())
	}
	at := rec.Attempts[0]
	if at.ReadBackDuration < 250*time.Millisecond || at.ReadBackDuration > at.Duration {
		t.Fatalf("read-back took %v of %v; the state followed after 250ms", at.ReadBackDuration, at.Duration)
	}
}

// What the command said never decides: a refused command whose state reads
// off is a success (BMCs refuse power-off of a chassis that is off); one
// that reads on is a failure; an accepted command whose state stays on is
// a failure after the command's window; a silent device is unknown.
func TestCommandOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dev     func() *cmdDevice
		startOn bool
		outcome string
		errHas  string
	}{
		{"refused, already off", func() *cmdDevice { return &cmdDevice{refuse: true} }, false, fencing.OutcomeSuccess, ""},
		{"refused, on", func() *cmdDevice { return &cmdDevice{refuse: true} }, true, fencing.OutcomeFailed, "0xd5"},
		{"accepted, stays on", func() *cmdDevice { return &cmdDevice{ignore: true} }, true, fencing.OutcomeFailed, "still reads back on"},
		{"silent", func() *cmdDevice { return &cmdDevice{silent: true} }, true, fencing.OutcomeUnknown, "no reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newCmdLab()
			d := tc.dev()
			tg := l.add("bmc", d)
			d.on = tc.startOn
			rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{tg}}}})
			if rec.Outcome != tc.outcome || !strings.Contains(rec.Error, tc.errHas) {
				t.Fatalf("%s (%s), want %s containing %q", rec.Outcome, rec.Error, tc.outcome, tc.errHas)
			}
		})
	}
}

// A kept agent is lent to fences of a target with its parameters and not
// closed after them; a target with other parameters gets its own agent.
func TestKeptAgentIsLent(t *testing.T) {
	l := newCmdLab()
	d := &cmdDevice{}
	tg := l.add("bmc", d)
	e := l.engine()
	k, err := e.Keep(tg)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Check(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		d.mu.Lock()
		d.on = true
		d.mu.Unlock()
		if rec := fence(t, e, Request{Topology: Topology{{Devices: []Target{tg}}}}); rec.Outcome != fencing.OutcomeSuccess {
			t.Fatalf("fence %d: %s", i, rec.Error)
		}
	}
	if d.builds.Load() != 1 || d.closes.Load() != 0 {
		t.Fatalf("%d agents built, %d closed: want the kept one only, open", d.builds.Load(), d.closes.Load())
	}
	other := tg
	other.Params = agents.Params{"dev": "bmc", "cipher": "3"}
	fence(t, e, Request{Topology: Topology{{Devices: []Target{other}}}})
	if d.builds.Load() != 2 || d.closes.Load() != 1 {
		t.Fatalf("other parameters: %d built, %d closed; want one more, closed after", d.builds.Load(), d.closes.Load())
	}
	k.Close()
	if d.closes.Load() != 2 {
		t.Fatal("Close did not close the kept agent")
	}
	fence(t, e, Request{Topology: Topology{{Devices: []Target{tg}}}})
	if d.builds.Load() != 3 {
		t.Fatal("a closed kept agent was lent")
	}
}

// Levels in parallel: a kept level-1 device that does not answer lets
// level 2 start alongside after its wait; the record shows both, level 2
// confirms, and level 1, stopped, is not a success. A slow device that
// does answer holds the next level back; without Hedge the levels run one
// after the other; a level-1 device whose last check failed starts level 2
// at once.
func TestLevelsInParallel(t *testing.T) {
	setup := func(d1 *cmdDevice, hedge bool) (*Engine, Topology, *cmdDevice) {
		l := newCmdLab()
		t1 := l.add("bmc", d1)
		d2 := &cmdDevice{}
		t2 := l.add("pdu", d2)
		e := l.engine()
		e.Hedge = hedge
		k, err := e.Keep(t1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		return e, Topology{{Devices: []Target{t1}}, {Devices: []Target{t2}}}, d2
	}

	t.Run("silent", func(t *testing.T) {
		e, topo, d2 := setup(&cmdDevice{silent: true}, true)
		start := time.Now()
		rec := fence(t, e, Request{Topology: topo})
		took := time.Since(start)
		if rec.Outcome != fencing.OutcomeSuccess || d2.commands.Load() != 1 {
			t.Fatalf("%s (%s) %s", rec.Outcome, rec.Error, summary(rec))
		}
		var l1, l2 *fencing.Attempt
		for i := range rec.Attempts {
			switch rec.Attempts[i].Level {
			case 1:
				l1 = &rec.Attempts[i]
			case 2:
				l2 = &rec.Attempts[i]
			}
		}
		if l1 == nil || l2 == nil || l1.Result == fencing.ResultSuccess || !strings.Contains(l1.Error, "level 2 confirmed the fence") {
			t.Fatalf("attempts %s; level 1: %+v", summary(rec), l1)
		}
		// Started after the wait (3 × 100ms, at least hedgeMin), long
		// before level 1's 3s timeout.
		if l2.Start < hedgeMin || l2.Start > time.Second || took > 2*time.Second {
			t.Fatalf("level 2 started at %v, fence took %v", l2.Start, took)
		}
	})
	t.Run("slow but answering", func(t *testing.T) {
		e, topo, d2 := setup(&cmdDevice{latency: 200 * time.Millisecond, offAfter: 600 * time.Millisecond}, true)
		rec := fence(t, e, Request{Topology: topo})
		if rec.Outcome != fencing.OutcomeSuccess || d2.commands.Load() != 0 || summary(rec) != "1/bmc/off/1=success(off)" {
			t.Fatalf("%s %s: level 2 ran for a device that answered", rec.Outcome, summary(rec))
		}
	})
	t.Run("no hedge", func(t *testing.T) {
		e, topo, _ := setup(&cmdDevice{silent: true}, false)
		rec := fence(t, e, Request{Topology: topo})
		if rec.Outcome != fencing.OutcomeSuccess || rec.Attempts[len(rec.Attempts)-1].Start < 3*time.Second {
			t.Fatalf("%s %s: level 2 before level 1's timeout", rec.Outcome, summary(rec))
		}
	})
	t.Run("failed check", func(t *testing.T) {
		l := newCmdLab()
		d1 := &cmdDevice{}
		t1, t2 := l.add("bmc", d1), l.add("pdu", &cmdDevice{})
		e := l.engine()
		k, _ := e.Keep(t1)
		defer k.Close()
		d1.silent = true
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		k.Check(ctx, true)
		cancel()
		rec := fence(t, e, Request{Topology: Topology{{Devices: []Target{t1}}, {Devices: []Target{t2}}}})
		var l2 *fencing.Attempt
		for i := range rec.Attempts {
			if rec.Attempts[i].Level == 2 {
				l2 = &rec.Attempts[i]
			}
		}
		if rec.Outcome != fencing.OutcomeSuccess || l2 == nil || l2.Result != fencing.ResultSuccess || l2.Start > 100*time.Millisecond {
			t.Fatalf("%s %s: level 2 %+v", rec.Outcome, summary(rec), l2)
		}
	})
	t.Run("reboot is sequential", func(t *testing.T) {
		e, topo, d2 := setup(&cmdDevice{silent: true}, true)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		rec := e.Fence(ctx, Request{Target: "node2", Action: fencing.ActionReboot, Topology: topo})
		if rec.Outcome != fencing.OutcomeSuccess || time.Since(start) < 3*time.Second || d2.commands.Load() != 2 {
			t.Fatalf("%s %s after %v", rec.Outcome, summary(rec), time.Since(start))
		}
	})
}
