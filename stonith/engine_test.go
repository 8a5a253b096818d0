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

// fakeDevice is a scripted power switch for one node.
type fakeDevice struct {
	mu    sync.Mutex
	state agents.State
	// offFails makes the next N Off calls fail with failErr (or unknown
	// when unknown is set) without changing the state.
	offFails int
	unknown  bool
	auth     bool
	// ackStaysOn makes Off succeed while the state stays on: the BMC
	// that acknowledges and does nothing (and an agent that lies).
	ackStaysOn bool
	// block makes Off wait for ctx and return its error unclassified.
	block bool
	// delay holds every Off/On for this long (honouring ctx).
	delay time.Duration
	// statusErr makes Status fail.
	statusErr error
	stderr    string

	offs, ons, statuses int
	closed              atomic.Int32
	inflight            *atomic.Int32 // shared per node: operations running
	maxInflight         *atomic.Int32
}

type fakeAgent struct {
	d   *fakeDevice
	tag string
}

func (a *fakeAgent) enter() func() {
	if a.d.inflight == nil {
		return func() {}
	}
	n := a.d.inflight.Add(1)
	for {
		m := a.d.maxInflight.Load()
		if n <= m || a.d.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { a.d.inflight.Add(-1) }
}

func (a *fakeAgent) wait(ctx context.Context) error {
	if a.d.delay == 0 {
		return nil
	}
	select {
	case <-time.After(a.d.delay):
		return nil
	case <-ctx.Done():
		return agents.Unknown("fake "+a.tag, ctx.Err())
	}
}

type stderrError struct{ error }

func (e stderrError) Stderr() string { return "plugin said: no route" }

func (a *fakeAgent) Off(ctx context.Context) error {
	defer a.enter()()
	if err := a.wait(ctx); err != nil {
		return err
	}
	a.d.mu.Lock()
	a.d.offs++
	block := a.d.block
	if a.d.offFails > 0 {
		a.d.offFails--
		a.d.mu.Unlock()
		switch {
		case a.d.auth:
			return agents.AuthFailed("fake "+a.tag+": login", errors.New("bad password"))
		case a.d.unknown:
			return agents.Unknown("fake "+a.tag+": off", errors.New("no reply"))
		case a.d.stderr != "":
			return agents.Failed("fake "+a.tag+": off", stderrError{errors.New("exit 1")})
		}
		return agents.Failed("fake "+a.tag+": off", errors.New("refused"))
	}
	if !a.d.ackStaysOn {
		a.d.state = agents.StateOff
	}
	a.d.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err() // unclassified: the engine must read it as unknown
	}
	return nil
}

func (a *fakeAgent) On(ctx context.Context) error {
	defer a.enter()()
	if err := a.wait(ctx); err != nil {
		return err
	}
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	a.d.ons++
	a.d.state = agents.StateOn
	return nil
}

func (a *fakeAgent) Reboot(ctx context.Context) error {
	return errors.New("the engine reboots through Off and On")
}

func (a *fakeAgent) Status(ctx context.Context) (agents.State, error) {
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	a.d.statuses++
	if a.d.statusErr != nil {
		return agents.StateUnknown, a.d.statusErr
	}
	return a.d.state, nil
}

func (a *fakeAgent) Close() error { a.d.closed.Add(1); return nil }

// fakeLab holds the devices a test registry's "fake" agent drives.
type fakeLab struct {
	mu      sync.Mutex
	devices map[string]*fakeDevice
	reg     *agents.Registry
}

func newLab(t *testing.T) *fakeLab {
	t.Helper()
	l := &fakeLab{devices: map[string]*fakeDevice{}, reg: agents.NewRegistry()}
	l.reg.Register(agents.Kind{Name: "fake", New: func(p agents.Params, _ *slog.Logger) (agents.Agent, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		key := p["dev"] + "/" + p["plug"]
		d, ok := l.devices[key]
		if !ok {
			return nil, fmt.Errorf("fake: parameter dev: no device %q", key)
		}
		return &fakeAgent{d: d, tag: key}, nil
	}})
	return l
}

// add creates a powered-on device and its target.
func (l *fakeLab) add(dev, plug string, d *fakeDevice) Target {
	if d == nil {
		d = &fakeDevice{}
	}
	if d.state == agents.StateUnknown {
		d.state = agents.StateOn
	}
	l.mu.Lock()
	l.devices[dev+"/"+plug] = d
	l.mu.Unlock()
	return Target{Device: dev, Agent: "fake", Plug: plug, Params: agents.Params{"dev": dev}, Timeout: 2 * time.Second}
}

func (l *fakeLab) dev(dev, plug string) *fakeDevice {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.devices[dev+"/"+plug]
}

func (l *fakeLab) engine() *Engine {
	e := NewEngine(l.reg, nil)
	e.RetryDelay = time.Millisecond
	return e
}

func fence(t *testing.T, e *Engine, req Request) fencing.Record {
	t.Helper()
	if req.Target == "" {
		req.Target = "node2"
	}
	if req.Action == "" {
		req.Action = fencing.ActionOff
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := e.Fence(ctx, req)
	if rec.Finished.IsZero() || rec.Started.IsZero() || rec.Finished.Before(rec.Started) {
		t.Errorf("times: started %v finished %v", rec.Started, rec.Finished)
	}
	return rec
}

// summary renders the attempts compactly: level/device/action/try=result(readback).
func summary(rec fencing.Record) string {
	var parts []string
	for _, a := range rec.Attempts {
		parts = append(parts, fmt.Sprintf("%d/%s/%s/%d=%s(%s)", a.Level, a.Device, a.Action, a.Try, a.Result, a.ReadBack))
	}
	return strings.Join(parts, " ")
}

func TestFirstLevelSuccess(t *testing.T) {
	l := newLab(t)
	rec := fence(t, l.engine(), Request{ID: 7, Epoch: 3, Reason: "takeover", RequestedBy: "node1", Executor: "node1",
		Topology: Topology{{Devices: []Target{l.add("bmc", "node2", nil)}}, {Devices: []Target{l.add("pdu", "4", nil)}}}})
	if rec.Outcome != fencing.OutcomeSuccess || rec.Error != "" {
		t.Fatalf("outcome %s (%s)", rec.Outcome, rec.Error)
	}
	if got, want := summary(rec), "1/bmc/off/1=success(off)"; got != want {
		t.Fatalf("attempts %q, want %q", got, want)
	}
	a := rec.Attempts[0]
	if a.Agent != "fake" || a.Plug != "node2" || a.Duration <= 0 {
		t.Fatalf("attempt %+v", a)
	}
	if rec.ID != 7 || rec.Epoch != 3 || rec.Kind != fencing.KindFence || rec.Target != "node2" || rec.Executor != "node1" {
		t.Fatalf("record %+v", rec)
	}
	if l.dev("pdu", "4").offs != 0 {
		t.Fatal("level 2 used although level 1 succeeded")
	}
	if l.dev("bmc", "node2").closed.Load() != 1 {
		t.Fatal("agent not closed")
	}
}

// Both PDUs of a dual-PSU server must go off; one failing fails the level.
func TestAllDevicesMustSucceedAndFallThrough(t *testing.T) {
	l := newLab(t)
	topo := Topology{
		{Devices: []Target{l.add("pduA", "3", nil), l.add("pduB", "3", &fakeDevice{offFails: 99})}},
		{Devices: []Target{l.add("bmc", "node2", nil)}},
	}
	rec := fence(t, l.engine(), Request{Topology: topo})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("outcome %s (%s)", rec.Outcome, rec.Error)
	}
	got := summary(rec)
	for _, want := range []string{"1/pduA/off/1=success(off)", "1/pduB/off/1=failed()", "2/bmc/off/1=success(off)"} {
		if !strings.Contains(got, want) {
			t.Errorf("attempts %q lack %q", got, want)
		}
	}
	if len(rec.Attempts) != 3 {
		t.Fatalf("attempts %q", got)
	}
	if rec.Attempts[2].Level != 2 {
		t.Fatalf("level 2 ran before level 1 finished: %q", got)
	}
}

func TestEveryLevelFailed(t *testing.T) {
	l := newLab(t)
	topo := Topology{
		{Devices: []Target{l.add("bmc", "n2", &fakeDevice{offFails: 99})}},
		{Devices: []Target{l.add("pduA", "1", nil), l.add("pduB", "1", &fakeDevice{offFails: 99})}},
	}
	rec := fence(t, l.engine(), Request{Topology: topo})
	if rec.Outcome != fencing.OutcomeFailed {
		t.Fatalf("outcome %s, want failed (%s)", rec.Outcome, summary(rec))
	}
	for _, want := range []string{"level 1: device bmc: try 1: failed", "level 2: device pduB: try 1: failed", "refused"} {
		if !strings.Contains(rec.Error, want) {
			t.Errorf("error %q lacks %q", rec.Error, want)
		}
	}
	if strings.Contains(rec.Error, "pduA") {
		t.Errorf("error blames the device that succeeded: %q", rec.Error)
	}
}

func TestRetries(t *testing.T) {
	l := newLab(t)
	tg := l.add("bmc", "n2", &fakeDevice{offFails: 2})
	tg.Retries = 2
	var progress []fencing.Record
	rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{tg}}},
		OnProgress: func(r fencing.Record) { progress = append(progress, r) }})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("outcome %s (%s)", rec.Outcome, summary(rec))
	}
	if got, want := summary(rec), "1/bmc/off/1=failed() 1/bmc/off/2=failed() 1/bmc/off/3=success(off)"; got != want {
		t.Fatalf("attempts %q, want %q", got, want)
	}
	if len(progress) != 3 || progress[0].Outcome != fencing.OutcomePending || len(progress[0].Attempts) != 1 || len(progress[2].Attempts) != 3 {
		t.Fatalf("progress %+v", progress)
	}

	// One retry fewer and the device is given up.
	l2 := newLab(t)
	tg = l2.add("bmc", "n2", &fakeDevice{offFails: 2})
	tg.Retries = 1
	rec = fence(t, l2.engine(), Request{Topology: Topology{{Devices: []Target{tg}}}})
	if rec.Outcome != fencing.OutcomeFailed || len(rec.Attempts) != 2 {
		t.Fatalf("outcome %s, attempts %q", rec.Outcome, summary(rec))
	}
}

// An authentication failure is not retried: the next level gets the time.
func TestAuthFailureNotRetried(t *testing.T) {
	l := newLab(t)
	tg := l.add("bmc", "n2", &fakeDevice{offFails: 99, auth: true})
	tg.Retries = 3
	rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{tg}}}})
	if rec.Outcome != fencing.OutcomeFailed || len(rec.Attempts) != 1 || !strings.Contains(rec.Error, "bad password") {
		t.Fatalf("outcome %s, attempts %q, error %q", rec.Outcome, summary(rec), rec.Error)
	}
}

func TestUnknownVersusFailed(t *testing.T) {
	l := newLab(t)
	topo := Topology{
		{Devices: []Target{l.add("bmc", "n2", &fakeDevice{offFails: 99, unknown: true})}},
		{Devices: []Target{l.add("pdu", "1", &fakeDevice{offFails: 99})}},
	}
	rec := fence(t, l.engine(), Request{Topology: topo})
	if rec.Outcome != fencing.OutcomeUnknown {
		t.Fatalf("outcome %s, want unknown (%s)", rec.Outcome, summary(rec))
	}
	if got, want := summary(rec), "1/bmc/off/1=unknown() 2/pdu/off/1=failed()"; got != want {
		t.Fatalf("attempts %q, want %q", got, want)
	}
	// An unknown first try that a retry confirms is a success.
	l2 := newLab(t)
	tg := l2.add("bmc", "n2", &fakeDevice{offFails: 1, unknown: true})
	tg.Retries = 1
	rec = fence(t, l2.engine(), Request{Topology: Topology{{Devices: []Target{tg}}}})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("outcome %s (%s)", rec.Outcome, summary(rec))
	}
}

// A device that acknowledges off but still reads on is a failure, even
// when the agent itself wrongly reported success.
func TestAcknowledgedButReadsOn(t *testing.T) {
	l := newLab(t)
	rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{l.add("bmc", "n2", &fakeDevice{ackStaysOn: true})}}}})
	if rec.Outcome != fencing.OutcomeFailed {
		t.Fatalf("outcome %s, want failed (%s)", rec.Outcome, summary(rec))
	}
	a := rec.Attempts[0]
	if a.Result != fencing.ResultFailed || a.ReadBack != "on" || !strings.Contains(a.Error, "acknowledged off but reads back on") {
		t.Fatalf("attempt %+v", a)
	}

	// A read-back that does not answer is unknown, not success.
	l2 := newLab(t)
	rec = fence(t, l2.engine(), Request{Topology: Topology{{Devices: []Target{l2.add("bmc", "n2", &fakeDevice{statusErr: errors.New("reset by peer")})}}}})
	if rec.Outcome != fencing.OutcomeUnknown || rec.Attempts[0].ReadBack != "unknown" {
		t.Fatalf("outcome %s (%s)", rec.Outcome, summary(rec))
	}
}

func TestTimeoutIsUnknown(t *testing.T) {
	l := newLab(t)
	tg := l.add("bmc", "n2", &fakeDevice{block: true})
	tg.Timeout = 50 * time.Millisecond
	rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{tg}}}})
	if rec.Outcome != fencing.OutcomeUnknown {
		t.Fatalf("outcome %s, want unknown (%s)", rec.Outcome, summary(rec))
	}
	a := rec.Attempts[0]
	if a.Result != fencing.ResultUnknown || !strings.Contains(a.Error, "timeout 50ms") || a.Duration < 50*time.Millisecond {
		t.Fatalf("attempt %+v", a)
	}
}

func TestStderrRecorded(t *testing.T) {
	l := newLab(t)
	rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{l.add("plugin", "n2", &fakeDevice{offFails: 1, stderr: "x"})}}}})
	if rec.Outcome != fencing.OutcomeFailed || rec.Attempts[0].Stderr != "plugin said: no route" {
		t.Fatalf("outcome %s, attempt %+v", rec.Outcome, rec.Attempts[0])
	}
}

func TestBadRequests(t *testing.T) {
	l := newLab(t)
	e := l.engine()
	for name, req := range map[string]Request{
		"no topology":   {Target: "n2", Action: fencing.ActionOff},
		"bad action":    {Target: "n2", Action: "cycle", Topology: Topology{{Devices: []Target{l.add("a", "1", nil)}}}},
		"empty level":   {Target: "n2", Action: fencing.ActionOff, Topology: Topology{{}}},
		"unknown agent": {Target: "n2", Action: fencing.ActionOff, Topology: Topology{{Devices: []Target{{Device: "x", Agent: "nope"}}}}},
		"agent refuses params": {Target: "n2", Action: fencing.ActionOff, Topology: Topology{{Devices: []Target{
			{Device: "x", Agent: "fake", Params: agents.Params{"dev": "missing"}}}}}},
	} {
		rec := e.Fence(context.Background(), req)
		if rec.Outcome != fencing.OutcomeFailed || rec.Error == "" {
			t.Errorf("%s: outcome %s error %q", name, rec.Outcome, rec.Error)
		}
	}
	rec := e.Fence(context.Background(), Request{Target: "n2", Action: fencing.ActionOff, Topology: Topology{{Devices: []Target{{Device: "x", Agent: "nope"}}}}})
	if !strings.Contains(rec.Error, `unknown agent "nope"`) || len(rec.Attempts) != 1 || rec.Attempts[0].Result != fencing.ResultFailed {
		t.Fatalf("unknown agent: %+v", rec)
	}
}

// The devices of one level run in parallel.
func TestLevelDevicesInParallel(t *testing.T) {
	l := newLab(t)
	var inflight, maxInflight atomic.Int32
	mk := func() *fakeDevice {
		return &fakeDevice{delay: 100 * time.Millisecond, inflight: &inflight, maxInflight: &maxInflight}
	}
	rec := fence(t, l.engine(), Request{Topology: Topology{{Devices: []Target{l.add("pduA", "1", mk()), l.add("pduB", "1", mk()), l.add("pduC", "1", mk())}}}})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("outcome %s (%s)", rec.Outcome, summary(rec))
	}
	if maxInflight.Load() != 3 {
		t.Fatalf("devices of a level ran %d at a time, want 3", maxInflight.Load())
	}
}

// One operation per target at a time; different targets in parallel.
func TestOneOperationPerTarget(t *testing.T) {
	l := newLab(t)
	var n2, n2max atomic.Int32
	e := l.engine()
	// node2's two devices share the node2 counter; node3 has its own.
	d2 := &fakeDevice{delay: 80 * time.Millisecond, inflight: &n2, maxInflight: &n2max}
	var n3, n3max atomic.Int32
	d3 := &fakeDevice{delay: 80 * time.Millisecond, inflight: &n3, maxInflight: &n3max}
	topo2 := Topology{{Devices: []Target{l.add("bmc", "node2", d2)}}}
	topo3 := Topology{{Devices: []Target{l.add("bmc", "node3", d3)}}}

	var wg sync.WaitGroup
	recs := make([]fencing.Record, 4)
	start := make(chan struct{})
	for i := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req := Request{Target: "node2", Action: fencing.ActionReboot, Topology: topo2, ID: uint64(i)}
			if i == 3 {
				req = Request{Target: "node3", Action: fencing.ActionReboot, Topology: topo3, ID: uint64(i)}
			}
			recs[i] = e.Fence(context.Background(), req)
		}()
	}
	close(start)
	wg.Wait()
	for i, r := range recs {
		if r.Outcome != fencing.OutcomeSuccess || r.ID != uint64(i) {
			t.Fatalf("record %d: %s (%s) %s", i, r.Outcome, r.Error, summary(r))
		}
	}
	if n2max.Load() != 1 {
		t.Fatalf("%d operations ran on node2 at once", n2max.Load())
	}
	if d2.offs != 3 || d2.ons != 3 {
		t.Fatalf("node2: %d offs, %d ons; want 3 each (each request runs on its own)", d2.offs, d2.ons)
	}
	// Records of node2 do not overlap in time.
	var spans [][2]time.Time
	for _, r := range recs[:3] {
		spans = append(spans, [2]time.Time{r.Started, r.Finished})
	}
	for i := range spans {
		for j := range spans {
			if i != j && spans[i][0].Before(spans[j][1]) && spans[j][0].Before(spans[i][1]) {
				t.Fatalf("node2 operations %d and %d overlap: %v %v", i, j, spans[i], spans[j])
			}
		}
	}
	// node3 ran alongside a node2 operation: its span overlaps one of them.
	overlap := false
	for _, s := range spans {
		if recs[3].Started.Before(s[1]) && s[0].Before(recs[3].Finished) {
			overlap = true
		}
	}
	if !overlap {
		t.Fatalf("node3's fence waited for node2's: %v vs %v", [2]time.Time{recs[3].Started, recs[3].Finished}, spans)
	}

	// A waiter whose context ends gives up without touching the device.
	l.dev("bmc", "node2").delay = 300 * time.Millisecond
	done := make(chan fencing.Record)
	go func() {
		done <- e.Fence(context.Background(), Request{Target: "node2", Action: fencing.ActionOff, Topology: topo2})
	}()
	for n2.Load() == 0 { // the first operation is inside the device
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	r := e.Fence(ctx, Request{Target: "node2", Action: fencing.ActionOff, Topology: topo2})
	if r.Outcome != fencing.OutcomeFailed || len(r.Attempts) != 0 || !strings.Contains(r.Error, "waiting for the running operation") {
		t.Fatalf("waiter: %s %q %s", r.Outcome, r.Error, summary(r))
	}
	if first := <-done; first.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("first: %s", first.Outcome)
	}
}

// Reboot: off through the topology, then on only through the level that
// confirmed the off.
func TestReboot(t *testing.T) {
	l := newLab(t)
	topo := Topology{
		{Devices: []Target{l.add("bmc", "n2", &fakeDevice{offFails: 99})}},
		{Devices: []Target{l.add("pduA", "1", nil), l.add("pduB", "1", nil)}},
	}
	rec := fence(t, l.engine(), Request{Action: fencing.ActionReboot, Topology: topo})
	if rec.Outcome != fencing.OutcomeSuccess || rec.Kind != fencing.KindFence || rec.Error != "" {
		t.Fatalf("outcome %s (%s)", rec.Outcome, rec.Error)
	}
	got := summary(rec)
	for _, want := range []string{"1/bmc/off/1=failed()", "2/pduA/off/1=success(off)", "2/pduB/off/1=success(off)", "2/pduA/on/1=success(on)", "2/pduB/on/1=success(on)"} {
		if !strings.Contains(got, want) {
			t.Errorf("attempts %q lack %q", got, want)
		}
	}
	// Every off precedes every on.
	seenOn := false
	for _, a := range rec.Attempts {
		if a.Action == fencing.ActionOn {
			seenOn = true
		} else if seenOn {
			t.Fatalf("off after on: %q", got)
		}
	}
	if l.dev("bmc", "n2").ons != 0 {
		t.Fatal("reboot powered on through a level that did not fence")
	}
}

func TestUnfence(t *testing.T) {
	l := newLab(t)
	bmc := l.add("bmc", "n2", &fakeDevice{state: agents.StateOff})
	san := l.add("san", "wwpn", &fakeDevice{state: agents.StateOff})
	topo := Topology{{Devices: []Target{bmc}}, {Devices: []Target{san}}}
	rec := fence(t, l.engine(), Request{Action: fencing.ActionOn, Topology: topo})
	if rec.Outcome != fencing.OutcomeSuccess || rec.Kind != fencing.KindUnfence {
		t.Fatalf("outcome %s kind %s (%s)", rec.Outcome, rec.Kind, rec.Error)
	}
	// The outer level (fabric) is restored before the BMC powers the node.
	if got, want := summary(rec), "2/san/on/1=success(on) 1/bmc/on/1=success(on)"; got != want {
		t.Fatalf("attempts %q, want %q", got, want)
	}
	// Restricted to the level that fenced.
	l.dev("san", "wwpn").state = agents.StateOff
	rec = fence(t, l.engine(), Request{Action: fencing.ActionOn, Topology: topo, Levels: []int{2}})
	if got, want := summary(rec), "2/san/on/1=success(on)"; rec.Outcome != fencing.OutcomeSuccess || got != want {
		t.Fatalf("attempts %q, want %q", got, want)
	}
	rec = fence(t, l.engine(), Request{Action: fencing.ActionOn, Topology: topo, Levels: []int{3}})
	if rec.Outcome != fencing.OutcomeFailed || !strings.Contains(rec.Error, "level 3: no such level") {
		t.Fatalf("bad level: %s %q", rec.Outcome, rec.Error)
	}
}

func TestDeviceStatusAndMonitor(t *testing.T) {
	l := newLab(t)
	e := l.engine()
	tg := l.add("bmc", "n2", nil)
	st, err := e.DeviceStatus(context.Background(), tg)
	if err != nil || st != agents.StateOn {
		t.Fatalf("status %v %v", st, err)
	}
	if err := e.Monitor(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	l.dev("bmc", "n2").statusErr = agents.Unknown("fake", errors.New("no reply"))
	if err := e.Monitor(context.Background(), tg); err == nil || !strings.Contains(err.Error(), "device bmc: monitor") {
		t.Fatalf("monitor error %v", err)
	}
	if _, err := e.DeviceStatus(context.Background(), Target{Device: "x", Agent: "nope"}); err == nil {
		t.Fatal("unknown agent accepted")
	}
}

// A level marked Storage confirms an off as ScopeStorage; a PowerOnly
// request does not try such a level, confirms through a power level, and
// fails when there is none.
func TestStorageLevelsAndPowerOnly(t *testing.T) {
	l := newLab(t)
	topo := Topology{
		{Devices: []Target{l.add("scsi", "node2", nil)}, Storage: true},
		{Devices: []Target{l.add("bmc", "node2", nil)}},
	}
	rec := fence(t, l.engine(), Request{Topology: topo, TargetBoot: "b-1"})
	if rec.Outcome != fencing.OutcomeSuccess || rec.Scope != fencing.ScopeStorage || rec.TargetBoot != "b-1" || summary(rec) != "1/scsi/off/1=success(off)" {
		t.Fatalf("storage level: %+v", rec)
	}
	l.dev("scsi", "node2").state = agents.StateOn
	rec = fence(t, l.engine(), Request{Topology: topo, PowerOnly: true})
	if rec.Outcome != fencing.OutcomeSuccess || rec.Scope != "" || summary(rec) != "2/bmc/off/1=success(off)" {
		t.Fatalf("power only: %+v", rec)
	}
	if l.dev("scsi", "node2").offs != 1 {
		t.Fatal("a power-only fence tried the storage level")
	}
	rec = fence(t, l.engine(), Request{Topology: topo[:1], PowerOnly: true})
	if rec.Outcome != fencing.OutcomeFailed || !strings.Contains(rec.Error, "cuts only the storage") {
		t.Fatalf("power only without a power level: %+v", rec)
	}
}
