package resource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fenced/fenced/daemon/config"
)

// States of a resource in Status.
const (
	StateStopped  = "stopped"  // known stopped: never started, stopped, or a probe found it not running
	StateStarting = "starting" // start running
	StateRunning  = "running"  // started (and, if monitored since, healthy)
	StateStopping = "stopping" // stop running
	// StateFailed: the last start, monitor or stop failed; the resource may
	// still run, so Stop stops it again.
	StateFailed = "failed"
)

// ResultNotMonitored is the last result of a resource started and not
// monitored since.
const ResultNotMonitored = "started, not yet monitored"

// DefaultTimeout bounds an action when neither the configuration nor the
// agent's meta-data gives one (Pacemaker's default too).
const DefaultTimeout = 20 * time.Second

// member is one resource of the group, as the group drives it.
type member interface {
	start(ctx context.Context, tok token) error
	stop(ctx context.Context, tok token) error
	// check reports whether the resource runs here and is healthy:
	// (true, nil) running, (false, nil) cleanly stopped, an error when it
	// failed (and may be running). interval is the monitor's interval, 0
	// for a probe; a recurring monitor may report "not running" as an
	// error carrying the agent's reason.
	check(ctx context.Context, tok token, interval time.Duration) (bool, error)
}

// entry is a member with its settings and status.
type entry struct {
	name     string
	kind     string // "ocf:heartbeat:IPaddr2", "mount", "hooks", "storage"
	m        member
	interval time.Duration
	timeouts struct{ start, stop, monitor time.Duration }

	// Guarded by Group.smu.
	state       string
	lastMonitor time.Time
	lastResult  string
	lastTook    time.Duration
	failures    int
	lastErr     string
}

// Group is the ordered resource group the primary runs. It implements the
// daemon's Resource contract (Start, Stop, Monitor) and adds Probe for a
// node that is not primary, and Status for the API.
//
// Start, Stop and Probe take turns (each waits for the others within its
// context); Monitor and Status never block on them. Safe for concurrent
// use.
type Group struct {
	node    string
	log     *slog.Logger
	members []*entry

	// turn admits one Start, Stop or Probe at a time; taking it honours
	// the caller's context, so a Stop whose grace runs out while a Start
	// still winds down fails (and the node self-fences) instead of waiting.
	turn chan struct{}
	tok  token

	// Background monitors of the current tenure, owned by the group:
	// started by a successful Start, cancelled and waited for by Stop.
	monCancel context.CancelFunc
	monWG     sync.WaitGroup

	smu     sync.Mutex // status and the latched monitor failure
	failErr error
	failed  chan struct{}
}

// New builds the group configured for node: cfg.Resources, or the storage
// shorthand as a one-resource group named "storage". OCF agents' meta-data
// is read (and cached) here. It returns nil, nil when nothing is
// configured. It starts nothing.
func New(ctx context.Context, cfg *config.Config, node string, log *slog.Logger) (*Group, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Group{node: node, log: log.With("component", "resources"), failed: make(chan struct{}), turn: make(chan struct{}, 1)}
	if len(cfg.Resources) == 0 {
		if !cfg.Storage.StorageSet() {
			return nil, nil
		}
		b, err := newStorage(cfg.Storage, node, log)
		if err != nil {
			return nil, err
		}
		e := &entry{name: "storage", kind: "storage", m: b.m, interval: cfg.Storage.MonitorInterval.D(), state: StateStopped}
		// As before the group existed: start and stop bounded only by the
		// daemon's deadlines, a monitor by its interval.
		e.timeouts.monitor = cfg.Storage.MonitorInterval.D()
		g.members = append(g.members, e)
		return g, nil
	}
	var errs []error
	for i, r := range cfg.Resources {
		e, err := newEntry(ctx, cfg, r, node, g.log)
		if err != nil {
			errs = append(errs, fmt.Errorf("resources[%d] (%s): %w", i, r.Name, err))
			continue
		}
		g.members = append(g.members, e)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

func newEntry(ctx context.Context, cfg *config.Config, r config.Resource, node string, log *slog.Logger) (*entry, error) {
	k, ok := lookupKind(r.Kind())
	if !ok {
		return nil, errKind()
	}
	b, err := k.build(ctx, cfg, r, node, log.With("resource", r.Name))
	if err != nil {
		return nil, err
	}
	e := &entry{name: r.Name, kind: k.name, m: b.m, interval: r.MonitorInterval.D(), state: StateStopped}
	if b.label != "" {
		e.kind = b.label
	}
	pick := func(configured config.Duration, action string) time.Duration {
		if configured > 0 {
			return configured.D()
		}
		if b.advised != nil {
			if t, _ := b.advised(action); t > 0 {
				return t
			}
		}
		return DefaultTimeout
	}
	e.timeouts.start = pick(r.Timeouts.Start, "start")
	e.timeouts.stop = pick(r.Timeouts.Stop, "stop")
	e.timeouts.monitor = pick(r.Timeouts.Monitor, "monitor")
	if e.interval <= 0 {
		e.interval = k.defaultInterval
		if b.advised != nil {
			if _, iv := b.advised("monitor"); iv > 0 {
				e.interval = iv
			}
		}
	}
	return e, nil
}

// Len is the number of resources.
func (g *Group) Len() int { return len(g.members) }

// MonitorInterval is the shortest monitor interval of the group: how often
// a caller polling Monitor should do so.
func (g *Group) MonitorInterval() time.Duration {
	var iv time.Duration
	for _, e := range g.members {
		if iv == 0 || e.interval < iv {
			iv = e.interval
		}
	}
	return iv
}

// take waits for the group's turn; release gives it back.
func (g *Group) take(ctx context.Context, op string) error {
	select {
	case g.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("resources: %s: another start, stop or probe still runs: %w", op, context.Cause(ctx))
	}
}

func (g *Group) release() { <-g.turn }

// Start starts the resources in order with epoch as the fencing token and
// previous as the former holder. When resource k fails to start, k, k−1 …
// 1 are stopped in reverse order, each within its stop timeout, and the
// start error is returned. When ctx ends meanwhile (the node demotes),
// Start returns at once and leaves the stopping to Stop, which the caller
// runs within the grace period; so it does for a resource whose stop
// failed during the rollback (it stays "failed"). After a successful Start
// each resource is monitored on its own interval until Stop.
func (g *Group) Start(ctx context.Context, epoch uint64, previous string) error {
	if err := g.take(ctx, "start"); err != nil {
		return err
	}
	defer g.release()
	g.stopMonitors()
	g.tok = token{epoch: epoch, previous: previous}
	g.smu.Lock()
	g.failErr = nil
	select {
	case <-g.failed:
		g.failed = make(chan struct{})
	default:
	}
	g.smu.Unlock()
	log := g.log.With("epoch", epoch)
	begin := time.Now()
	for i, e := range g.members {
		if ctx.Err() != nil {
			return fmt.Errorf("resource %s: not started: %w", e.name, context.Cause(ctx))
		}
		g.setState(e, StateStarting, "")
		t0 := time.Now()
		sctx, cancel := withTimeout(ctx, e.timeouts.start)
		err := e.m.start(sctx, g.tok)
		cancel()
		if err != nil {
			g.fail(e, err)
			err = fmt.Errorf("resource %s (%d of %d) failed to start: %w", e.name, i+1, len(g.members), err)
			if ctx.Err() != nil {
				return err // cut short: Stop stops what runs, within the grace period
			}
			log.Error("resource start failed: stopping the ones started before it", "resource", e.name, "err", err)
			g.rollback(ctx, i, log)
			return err
		}
		g.smu.Lock()
		e.state = StateRunning
		// What the probe at start found ("probe: not running") is no
		// longer true of a running resource.
		e.lastMonitor, e.lastTook, e.lastResult = time.Time{}, 0, ResultNotMonitored
		g.smu.Unlock()
		log.Info("resource started", "resource", e.name, "kind", e.kind, "took", time.Since(t0).Round(time.Millisecond))
	}
	log.Info("resource group started", "resources", len(g.members), "took", time.Since(begin).Round(time.Millisecond))
	g.startMonitors()
	return nil
}

// rollback stops members last … 0 in reverse after a failed start, each
// within its stop timeout; it gives up at the first stop that fails (as
// Stop does) or when ctx ends, leaving the rest to Stop.
func (g *Group) rollback(ctx context.Context, last int, log *slog.Logger) {
	for j := last; j >= 0 && ctx.Err() == nil; j-- {
		e := g.members[j]
		if g.state(e) == StateStopped {
			continue
		}
		g.setState(e, StateStopping, "")
		sctx, cancel := withTimeout(ctx, e.timeouts.stop)
		err := e.m.stop(sctx, g.tok)
		cancel()
		if err != nil {
			g.fail(e, err)
			log.Error("resource stop after a failed start failed; it may still run", "resource", e.name, "err", err)
			return
		}
		g.setState(e, StateStopped, "")
		log.Info("resource stopped", "resource", e.name, "after", "failed start")
	}
}

// Stop stops every resource that is not known stopped, in reverse order,
// within ctx's deadline (the daemon gives it timing.grace). It returns an
// error if any stop failed or timed out: the resource may still run, and
// the daemon self-fences. It stops at the first failure, as stopping what
// lies beneath a resource that still runs (unmounting under a live
// service) could do harm and the node is about to be reset anyway.
func (g *Group) Stop(ctx context.Context) error {
	if err := g.take(ctx, "stop"); err != nil {
		return err
	}
	defer g.release()
	g.stopMonitors()
	log := g.log.With("epoch", g.tok.epoch)
	for i := len(g.members) - 1; i >= 0; i-- {
		e := g.members[i]
		if g.state(e) == StateStopped {
			continue
		}
		g.setState(e, StateStopping, "")
		t0 := time.Now()
		sctx, cancel := withTimeout(ctx, e.timeouts.stop)
		err := e.m.stop(sctx, g.tok)
		cancel()
		if err != nil {
			g.fail(e, err)
			log.Error("resource stop failed: it may still run, the resources beneath it are left as they are", "resource", e.name, "err", err)
			return fmt.Errorf("resource %s failed to stop: %w", e.name, err)
		}
		g.setState(e, StateStopped, "")
		log.Info("resource stopped", "resource", e.name, "took", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// Monitor returns the first monitor failure since the last Start (a
// resource found not running, or a monitor that failed or timed out), or
// nil while every resource is healthy. It never blocks: the monitors run
// in the background, each on its own interval.
func (g *Group) Monitor(ctx context.Context) error {
	g.smu.Lock()
	defer g.smu.Unlock()
	return g.failErr
}

// Failed is closed when a monitor fails after the current Start, for a
// caller that would rather wait than poll Monitor.
func (g *Group) Failed() <-chan struct{} {
	g.smu.Lock()
	defer g.smu.Unlock()
	return g.failed
}

func (g *Group) startMonitors() {
	ctx, cancel := context.WithCancel(context.Background())
	g.monCancel = cancel
	for _, e := range g.members {
		if e.interval <= 0 {
			continue
		}
		g.monWG.Add(1)
		go func() {
			defer g.monWG.Done()
			g.monitorLoop(ctx, e, g.tok)
		}()
	}
}

// stopMonitors cancels the background monitors (killing any agent still
// running) and waits for them. Called in the group's turn.
func (g *Group) stopMonitors() {
	if g.monCancel != nil {
		g.monCancel()
		g.monWG.Wait()
		g.monCancel = nil
	}
}

func (g *Group) monitorLoop(ctx context.Context, e *entry, tok token) {
	t := time.NewTimer(e.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mctx, cancel := withTimeout(ctx, e.timeouts.monitor)
		t0 := time.Now()
		running, err := e.m.check(mctx, tok, e.interval)
		cancel()
		if ctx.Err() != nil {
			return // stopped meanwhile: not a failure
		}
		took := time.Since(t0)
		if err == nil && !running {
			err = fmt.Errorf("resource %s is not running", e.name)
		}
		g.smu.Lock()
		e.lastMonitor, e.lastTook = t0, took
		if err == nil {
			e.lastResult = "ok"
			g.smu.Unlock()
			t.Reset(e.interval)
			continue
		}
		e.lastResult = err.Error()
		e.failures++
		e.state, e.lastErr = StateFailed, err.Error()
		if g.failErr == nil {
			g.failErr = fmt.Errorf("resource %s monitor: %w", e.name, err)
			close(g.failed)
		}
		g.smu.Unlock()
		g.log.Error("resource monitor failed", "resource", e.name, "epoch", tok.epoch, "err", err)
		return
	}
}

// ErrIneligible is wrapped by Probe's error: a resource runs on this node
// and could not be stopped, so the node must not become primary.
var ErrIneligible = errors.New("node ineligible")

// Probe checks, on a node that is not primary, that no resource of the
// group runs here (e.g. an address left configured on a node that
// restarted), last to first, and stops each one found running or in an
// unknown state. A nil error means none runs here; an error wrapping
// ErrIneligible means one could not be stopped and the node must stay
// ineligible for primacy. Call it before the node becomes eligible, never
// while it is primary.
func (g *Group) Probe(ctx context.Context) error {
	if err := g.take(ctx, "probe"); err != nil {
		return err
	}
	defer g.release()
	g.stopMonitors()
	tok := token{}
	var errs []error
	for i := len(g.members) - 1; i >= 0; i-- {
		e := g.members[i]
		mctx, cancel := withTimeout(ctx, e.timeouts.monitor)
		t0 := time.Now()
		running, err := e.m.check(mctx, tok, 0)
		cancel()
		g.smu.Lock()
		e.lastMonitor, e.lastTook = t0, time.Since(t0)
		switch {
		case err != nil:
			e.lastResult = "probe: " + err.Error()
		case running:
			e.lastResult = "probe: running"
		default:
			e.lastResult = "probe: not running"
		}
		g.smu.Unlock()
		if err == nil && !running {
			g.setState(e, StateStopped, "")
			continue
		}
		if err != nil {
			g.log.Warn("probe: resource state unknown on a node that is not primary: stopping it", "resource", e.name, "err", err)
		} else {
			g.log.Warn("probe: resource found running on a node that is not primary: stopping it", "resource", e.name)
		}
		g.setState(e, StateStopping, "")
		sctx, cancel := withTimeout(ctx, e.timeouts.stop)
		serr := e.m.stop(sctx, tok)
		cancel()
		if serr != nil {
			g.fail(e, serr)
			errs = append(errs, fmt.Errorf("resource %s runs here and could not be stopped: %w", e.name, serr))
			continue
		}
		g.setState(e, StateStopped, "")
		g.log.Info("probe: resource stopped", "resource", e.name)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrIneligible, err)
	}
	return nil
}

// withTimeout is context.WithTimeout, or no limit of its own for d ≤ 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

func (g *Group) state(e *entry) string {
	g.smu.Lock()
	defer g.smu.Unlock()
	return e.state
}

func (g *Group) setState(e *entry, state, errMsg string) {
	g.smu.Lock()
	defer g.smu.Unlock()
	e.state = state
	if errMsg != "" {
		e.lastErr = errMsg
	}
}

func (g *Group) fail(e *entry, err error) {
	g.smu.Lock()
	defer g.smu.Unlock()
	e.state, e.lastErr = StateFailed, err.Error()
	e.failures++
}

// Status is one resource's state for `fencectl resource list`, status and
// metrics.
type Status struct {
	Name  string
	Kind  string // "ocf:heartbeat:IPaddr2", "mount", "hooks", "storage"
	State string
	// MonitorInterval is how often it is checked on the primary.
	MonitorInterval time.Duration
	// LastMonitor is when the last monitor or probe began (zero: never,
	// or not since the start); LastResult is "ok", "probe: not running",
	// ResultNotMonitored or the error; LastTook its duration.
	LastMonitor time.Time
	LastResult  string
	LastTook    time.Duration
	// Failures counts failed starts, monitors and stops since the daemon
	// started; LastError is the latest of them.
	Failures  int
	LastError string
}

// Status returns a snapshot of every resource, in group order.
func (g *Group) Status() []Status {
	g.smu.Lock()
	defer g.smu.Unlock()
	out := make([]Status, len(g.members))
	for i, e := range g.members {
		out[i] = Status{Name: e.name, Kind: e.kind, State: e.state, MonitorInterval: e.interval,
			LastMonitor: e.lastMonitor, LastResult: e.lastResult, LastTook: e.lastTook,
			Failures: e.failures, LastError: e.lastErr}
	}
	return out
}
