// Package health watches the fence devices before they are needed: a node
// checks, every devices.NAME.monitor_interval, each configured device that
// could fence some other node — the agent's monitor, or a status query;
// never a power action — and keeps the last result of each: when it ran,
// how long it took, ok or the error and its kind (authentication,
// unreachable, other). The API's status and device list, the metrics and
// the log read it; from those results Path says whether a node can be
// fenced at all (every device of at least one of its levels healthy).
//
// Which node checks what: every node checks the devices that fence the
// other nodes, because any of them may be the leader that has to fence,
// and a device must answer from there. A node does not check the devices
// that only fence itself: it is never the one to fence itself, and its own
// view of its own BMC says nothing about whether a peer reaches it (the
// peers check those).
//
// The checker runs on goroutines of its own, one per device, owned by Run.
// The control loop never waits for it and never reads it: a device that
// hangs holds only its own check, bounded by the device's timeout. Checks
// are spread over time (each device starts at its own offset, derived from
// the node and device names, and keeps that phase), and at most MaxChecks
// run at once, so many devices do not burst.
//
// Warm sessions. With Options.Keep set, each device's goroutine owns one
// long-lived agent for the device (a stonith.Kept: the fencing engine
// borrows it for fences of a target built from the same parameters) and
// checks through it. While Options.Warm says so for the device, the agent
// holds an authenticated session for the next fence: every check logs in
// anew (so a changed password is seen at the next check, while the held
// session would still work) and keeps that session in place of the old
// one, and between checks a keep-alive on the held session, every
// KeepAliveInterval, keeps the device from expiring it. A keep-alive that
// fails drops the session and runs a check at once (recorded like any
// other), which opens a new one. Warm is asked again at once when the
// caller says its answer may have changed (Rewarm: the daemon calls it at
// a change of leader, holder or former holders) and every few seconds
// besides, so a session is opened as soon as a device starts to matter and
// logged out as soon as it stops mattering (a node that dies holding one
// leaves it taking one of the BMC's few slots until the BMC expires it).
// A check that finds no free slot on the BMC checks on the held session
// instead and keeps it. A check that opens a session to keep may take
// up to WarmTimeout (a slow BMC's login is long, and nothing waits for
// it); the agent's own request timeouts still give a dead device up
// fast. A fence never waits behind a check: checks do not hold the kept
// session (they log in on a new one), and a keep-alive yields to a fence.
// A Rewarm that arrives while a device's check runs is not lost: the
// device asks Warm as soon as the check is done.
//
// Each device's Health says whether its session is held (Session), and
// whether a check has tried to open one to keep since the checker started
// (WarmTried): the daemon holds a node that just joined back from primacy
// until every session it should hold is open or was tried. A check that
// passed on the held session because the BMC had no free slot for a new
// one says so (Note).
package health

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith"
)

// States of a device.
const (
	StateOK      = "ok"      // its last check succeeded
	StateFailing = "failing" // its last check failed
	StatePending = "pending" // not checked yet
)

// Kinds of a failed check.
const (
	KindAuth        = "auth"        // the device refused our credentials
	KindUnreachable = "unreachable" // no answer (or no answer in time)
	KindOther       = "other"       // it answered and refused, or the device is misconfigured
)

// Classify says what kind of failure err is. timedOut reports that the
// check ran into its deadline.
func Classify(err error, timedOut bool) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, agents.ErrAuth):
		return KindAuth
	case timedOut, errors.Is(err, agents.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded):
		return KindUnreachable
	}
	// Unclassified errors are configuration problems (an agent that cannot
	// be built); classified failures are refusals.
	return KindOther
}

// Health is what the last checks of one device found.
type Health struct {
	Device string
	State  string // StateOK, StateFailing, StatePending
	Kind   string // of a failing device
	Error  string // of a failing device; agents keep secrets out of it
	// LastCheck is when the last finished check started (wall clock), and
	// Latency how long it took.
	LastCheck time.Time
	Latency   time.Duration
	// Since is when the current state began: the first failure of the
	// current run of failures, or the first success after one.
	Since time.Time
	// Failures counts the consecutive failed checks.
	Failures int
	Interval time.Duration
	// Checking is when the running check started; zero when none runs.
	Checking time.Time
	// Session is SessionHeld while the device's kept agent holds a session
	// for the next fence, SessionOpening while a check opens one to keep,
	// "" otherwise.
	Session string
	// Started: the device's watch has begun (its kept agent is built);
	// KeepsSession: that agent can hold a session; WarmTried: a check
	// asked to keep its session has finished (opened it or failed) since
	// the checker started.
	Started, KeepsSession, WarmTried bool
	// Note is what the last check found that is not a failure but should
	// be known (NoteNoFreeSlot).
	Note string
}

// Session states of a device (Health.Session).
const (
	SessionHeld    = "held"
	SessionOpening = "opening"
)

// NoteNoFreeSlot: the check passed on the held session, because the BMC
// had no free session slot for a new one (every slot taken: by other
// clients, or by sessions a crashed process left open until the BMC
// expires them); a changed password is not noticed meanwhile, and nothing
// else can log in.
const NoteNoFreeSlot = "BMC has no free session slot: checked on the held session"

// Device is one device to watch.
type Device struct {
	Name string
	// Target is what a check uses: the device's parameters with one of its
	// mappings (the plug of a node it fences), and its timeout.
	Target   stonith.Target
	Interval time.Duration
}

// CheckFunc checks one device; nil means healthy. It must return when ctx
// ends. The stonith engine's Monitor is one.
type CheckFunc func(ctx context.Context, t stonith.Target) error

// Keeper is one device's long-lived agent (stonith.Kept): see "Warm
// sessions" above.
type Keeper interface {
	// Check checks the device; keep holds the session it opened.
	Check(ctx context.Context, keep bool) error
	// KeepAlive keeps the held session from expiring.
	KeepAlive(ctx context.Context) error
	// KeepAliveInterval is how often KeepAlive is needed; 0 when the agent
	// never holds a session.
	KeepAliveInterval() time.Duration
	Holds() bool
	// Drop logs out the held session.
	Drop()
	Close() error
}

// SlotReporter is a Keeper that says whether its last check found no free
// session slot on the device (agents.SlotReporter).
type SlotReporter interface {
	NoFreeSlot() bool
}

// Options configure a Checker.
type Options struct {
	// Self names this node, for the phase of each device's checks (two
	// nodes checking the same device do not check it at the same moment).
	Self    string
	Devices []Device
	Check   CheckFunc
	// Keep, when set, builds each device's kept agent; checks then go
	// through it instead of Check. Warm says whether the device's agent
	// should hold a session now (nil: never).
	Keep func(Device) (Keeper, error)
	Warm func(device string) bool
	// WarmTimeout bounds a check that opens a session to keep, when the
	// device's timeout is shorter (default 60s).
	WarmTimeout time.Duration
	// WarmPoll is how often Warm is asked and keep-alives fall due
	// (default 5s, at most the device's interval).
	WarmPoll time.Duration
	Logger   *slog.Logger
	// FirstWithin bounds the delay of each device's first check (default
	// 10s, at most the device's interval): soon after start every device
	// has been checked once, still spread.
	FirstWithin time.Duration
	// MaxChecks bounds the checks running at once (default 8).
	MaxChecks int
	// DefaultTimeout bounds a check whose Target has no timeout (default 20s).
	DefaultTimeout time.Duration
	// Observe, when set, is told of every finished check (metrics).
	Observe func(h Health)
	// Now is the wall clock for the times shown (default time.Now).
	Now func() time.Time
	// SessionChanged, when set, is told when a kept device's Session or
	// WarmTried changes.
	SessionChanged func(device string)
	// LeftOpen, when set, runs once for each kept device as its watch
	// starts, with its kept agent: the daemon closes there the sessions a
	// crashed process left open on the device. When the device's session
	// is wanted then, it runs right after the check that opened it (the
	// agent closes them on that session: no login of its own, and the
	// fence the session is for is not kept waiting); else before anything.
	LeftOpen func(ctx context.Context, device string, k Keeper)
}

// Checker checks devices on their intervals and keeps the results. Its
// methods are safe for concurrent use.
type Checker struct {
	o    Options
	log  *slog.Logger
	sem  chan struct{}
	devs map[string]Device

	mu     sync.Mutex
	health map[string]*Health
	// reconf hands Run a new device list (Reconfigure).
	reconf chan []Device
	// rewarm is closed (and replaced) by Rewarm: kept devices ask Warm
	// again at once; rewarms counts them, so that a device busy with a
	// check when one came asks once it is done.
	rewarm  chan struct{}
	rewarms uint64
}

// New returns a monitor of o.Devices; Run starts the checks.
func New(o Options) *Checker {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FirstWithin <= 0 {
		o.FirstWithin = 10 * time.Second
	}
	if o.MaxChecks <= 0 {
		o.MaxChecks = 8
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 20 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.WarmTimeout <= 0 {
		o.WarmTimeout = time.Minute
	}
	if o.WarmPoll <= 0 {
		o.WarmPoll = 5 * time.Second
	}
	m := &Checker{o: o, log: o.Logger, sem: make(chan struct{}, o.MaxChecks), devs: map[string]Device{}, health: map[string]*Health{},
		reconf: make(chan []Device), rewarm: make(chan struct{})}
	for _, d := range o.Devices {
		m.devs[d.Name] = d
		m.health[d.Name] = &Health{Device: d.Name, State: StatePending, Interval: d.Interval}
	}
	return m
}

// Rewarm has every kept device ask Options.Warm again now rather than at
// its next poll: the caller knows that the answer may have changed (a new
// holder or leader), so a session that stopped mattering is logged out at
// once (a node that dies holding it would leave it taking one of the BMC's
// few slots until the BMC expires it) and one that started to matter is
// opened.
func (m *Checker) Rewarm() {
	m.mu.Lock()
	close(m.rewarm)
	m.rewarm = make(chan struct{})
	m.rewarms++
	m.mu.Unlock()
}

// rewarmed returns the channel the next Rewarm closes, and how many came
// before.
func (m *Checker) rewarmed() (<-chan struct{}, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rewarm, m.rewarms
}

// Run checks every device on its interval until ctx ends, and returns once
// every check it started has returned.
func (m *Checker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	type watcher struct {
		dev    Device
		cancel context.CancelFunc
	}
	running := map[string]watcher{}
	start := func(d Device) {
		if d.Interval <= 0 {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		running[d.Name] = watcher{dev: d, cancel: cancel}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.o.Keep != nil {
				m.watchKept(wctx, d)
				return
			}
			m.watch(wctx, d)
		}()
	}
	m.mu.Lock()
	devs := make([]Device, 0, len(m.devs))
	for _, name := range slices.Sorted(maps.Keys(m.devs)) {
		devs = append(devs, m.devs[name])
	}
	m.mu.Unlock()
	for _, d := range devs {
		start(d)
	}
	for {
		var next []Device
		select {
		case <-ctx.Done():
			return
		case next = <-m.reconf:
		}
		// A device whose check changed (parameters, plug, interval) gets
		// a watcher of its own anew; its last result stays until its next
		// check.
		want := map[string]Device{}
		for _, d := range next {
			want[d.Name] = d
		}
		for name, w := range running {
			if d, ok := want[name]; !ok || !sameDevice(d, w.dev) {
				w.cancel()
				delete(running, name)
			}
		}
		for _, d := range next {
			if _, ok := running[d.Name]; !ok {
				start(d)
			}
		}
	}
}

// Reconfigure replaces the devices to watch (a live reload): new devices
// are checked from now on (pending until their first check), removed ones
// are forgotten, and a device whose parameters or interval changed is
// checked with the new ones. It waits until Run took the list, or ctx
// ended (Run not running).
func (m *Checker) Reconfigure(ctx context.Context, devs []Device) {
	m.mu.Lock()
	want := map[string]bool{}
	for _, d := range devs {
		want[d.Name] = true
		if old, ok := m.devs[d.Name]; !ok || !sameDevice(old, d) {
			h, ok := m.health[d.Name]
			if !ok {
				h = &Health{Device: d.Name, State: StatePending}
				m.health[d.Name] = h
			}
			h.Interval = d.Interval
		}
		m.devs[d.Name] = d
	}
	for name := range m.devs {
		if !want[name] {
			delete(m.devs, name)
			delete(m.health, name)
		}
	}
	m.mu.Unlock()
	select {
	case m.reconf <- devs:
	case <-ctx.Done():
	}
}

// sameDevice reports whether two plans of a device's checks are the same.
func sameDevice(a, b Device) bool {
	return a.Name == b.Name && a.Interval == b.Interval && a.Target.Device == b.Target.Device &&
		a.Target.Agent == b.Target.Agent && a.Target.Plug == b.Target.Plug && a.Target.Timeout == b.Target.Timeout &&
		maps.Equal(a.Target.Params, b.Target.Params)
}

// phase is the device's offset within [0, span): stable for a node and a
// device, different between nodes and devices.
func phase(self, device string, span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(self + "\x00" + device))
	return time.Duration(h.Sum64() % uint64(span))
}

// watch checks one device at first+k·interval, skipping the times a slow
// check overran.
func (m *Checker) watch(ctx context.Context, d Device) {
	next := time.Now().Add(phase(m.o.Self, d.Name, min(m.o.FirstWithin, d.Interval)))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.check(ctx, d)
		next = next.Add(d.Interval)
		if late := time.Since(next); late > 0 {
			next = next.Add((late/d.Interval + 1) * d.Interval)
		}
		t.Reset(time.Until(next))
	}
}

// check runs one check of d and records it.
func (m *Checker) check(ctx context.Context, d Device) {
	m.run(ctx, d, 0, func(cctx context.Context) error { return m.o.Check(cctx, d.Target) })
}

// run runs check as one check of d, within d's timeout (at least
// atLeast), and records it.
func (m *Checker) run(ctx context.Context, d Device, atLeast time.Duration, check func(context.Context) error) {
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-m.sem }()
	timeout := d.Target.Timeout
	if timeout <= 0 {
		timeout = m.o.DefaultTimeout
	}
	timeout = max(timeout, atLeast)
	started := m.o.Now()
	m.setChecking(d.Name, started)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	t0 := time.Now()
	err := check(cctx)
	took := time.Since(t0)
	timedOut := cctx.Err() != nil
	cancel()
	if ctx.Err() != nil {
		// Stopping (or reconfigured): the check was cut short, its
		// result means nothing.
		m.setChecking(d.Name, time.Time{})
		return
	}
	m.Record(d.Name, started, took, err, timedOut)
}

// setChecking marks the start (or, zero, the end) of a running check.
func (m *Checker) setChecking(device string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.health[device]; ok {
		h.Checking = at
	}
}

// watchKept is watch for a device checked through its kept agent, which
// it owns: it builds it first and closes it last.
func (m *Checker) watchKept(ctx context.Context, d Device) {
	k, err := m.o.Keep(d)
	m.mu.Lock()
	if h, ok := m.health[d.Name]; ok {
		h.Started, h.KeepsSession = true, err == nil && k.KeepAliveInterval() > 0
	}
	m.mu.Unlock()
	if err != nil {
		// A configuration error (the agent cannot be built): every check
		// reports it, as a check through the engine would.
		m.log.Debug("fence device agent not kept", "device", d.Name, "err", err)
		m.watch(ctx, d)
		return
	}
	defer k.Close()
	warm := func() bool { return m.o.Warm != nil && m.o.Warm(d.Name) }
	// kept: the last check was asked to keep its session and succeeded.
	kept := false
	checkNow := func() {
		keep := warm()
		atLeast := time.Duration(0)
		if keep {
			atLeast = m.o.WarmTimeout
		}
		var err error
		held := k.Holds()
		if keep && !held {
			m.setSession(d.Name, SessionOpening, false)
		}
		m.run(ctx, d, atLeast, func(cctx context.Context) error { err = k.Check(cctx, keep); return err })
		if ctx.Err() != nil {
			return
		}
		kept = keep && err == nil
		if kept && !held && k.Holds() {
			m.log.Info("fence device session held for the next fence", "device", d.Name)
		}
		note := ""
		if r, ok := k.(SlotReporter); ok && err == nil && r.NoFreeSlot() {
			note = NoteNoFreeSlot
		}
		m.setNote(d.Name, note)
		m.setSession(d.Name, sessionOf(k), keep)
	}
	next := time.Now().Add(phase(m.o.Self, d.Name, min(m.o.FirstWithin, d.Interval)))
	poll := min(m.o.WarmPoll, d.Interval)
	lastUse := time.Time{}
	wanted := false // Warm's answer at the last poll
	if m.o.LeftOpen != nil {
		if k.KeepAliveInterval() > 0 && warm() {
			checkNow()
			lastUse, wanted = time.Now(), true
		}
		m.o.LeftOpen(ctx, d.Name, k)
	}
	t := time.NewTimer(min(time.Until(next), poll))
	defer t.Stop()
	_, seen := m.rewarmed()
	for {
		rewarm, n := m.rewarmed()
		// A Rewarm during the last round (a check can be long) is
		// answered now, without waiting.
		asked := n != seen
		if !asked {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-rewarm:
				asked = true
			}
		}
		_, seen = m.rewarmed()
		now := time.Now()
		if !asked && !now.Before(next) {
			checkNow()
			lastUse = time.Now()
			next = next.Add(d.Interval)
			if late := time.Since(next); late > 0 {
				next = next.Add((late/d.Interval + 1) * d.Interval)
			}
		} else if ka := k.KeepAliveInterval(); ka > 0 {
			want, holds := warm(), k.Holds()
			was := wanted
			wanted = want
			switch {
			case want && !holds && (lastUse.IsZero() || kept || !was):
				// The device matters now, or the session the last check
				// kept was lost (a fence found it dead): open one with a
				// check rather than at the next interval. A device whose
				// last check failed waits for its interval.
				if kept {
					m.log.Info("fence device session logged out: it failed an operation; checking at once", "device", d.Name)
				}
				checkNow()
				lastUse = time.Now()
			case !want && holds:
				kept = false
				k.Drop()
				m.setSession(d.Name, "", false)
				m.log.Info("fence device session logged out: no longer needed here", "device", d.Name)
			case want && holds && !asked && now.Sub(lastUse) >= ka:
				if err := k.KeepAlive(ctx); err != nil && ctx.Err() == nil {
					m.log.Info("fence device session lost; checking at once", "device", d.Name, "err", err)
					checkNow()
				}
				lastUse = time.Now()
			}
			if ctx.Err() == nil {
				// A fence may have replaced or lost the session meanwhile.
				m.setSession(d.Name, sessionOf(k), false)
			}
		}
		t.Reset(max(min(time.Until(next), poll), 0))
	}
}

// sessionOf is Health.Session for what k holds now.
func sessionOf(k Keeper) string {
	if k.Holds() {
		return SessionHeld
	}
	return ""
}

// setSession records device's session state; tried records that a check
// asked to keep its session has finished.
func (m *Checker) setSession(device, session string, tried bool) {
	m.mu.Lock()
	h, ok := m.health[device]
	changed := ok && (h.Session != session || (tried && !h.WarmTried))
	if ok {
		h.Session = session
		h.WarmTried = h.WarmTried || tried
	}
	m.mu.Unlock()
	if changed && m.o.SessionChanged != nil {
		m.o.SessionChanged(device)
	}
}

func (m *Checker) setNote(device, note string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.health[device]; ok {
		if note != "" && h.Note == "" {
			m.log.Warn("fence device check passed on the held session: the BMC has no free session slot", "device", device)
		}
		h.Note = note
	}
}

// Record stores the result of a check of device that started at started
// and took took: one of the checker's own, or one made elsewhere (an
// admin's `fencectl device status`). Unknown devices are ignored.
func (m *Checker) Record(device string, started time.Time, took time.Duration, err error, timedOut bool) {
	m.mu.Lock()
	h, ok := m.health[device]
	if !ok {
		m.mu.Unlock()
		return
	}
	before := *h
	h.Checking = time.Time{}
	h.LastCheck, h.Latency = started, took
	if err == nil {
		if h.State != StateOK {
			h.Since = started
		}
		h.State, h.Kind, h.Error, h.Failures = StateOK, "", "", 0
	} else {
		if h.State != StateFailing {
			h.Since = started
		}
		// The device is named by whoever shows the health: not twice
		// ("device node2-bmc: device node2-bmc: ...").
		h.State, h.Kind, h.Error = StateFailing, Classify(err, timedOut), strings.TrimPrefix(err.Error(), "device "+device+": ")
		h.Failures++
	}
	after := *h
	m.mu.Unlock()

	log := m.log.With("device", device, "latency", took.Round(time.Millisecond))
	switch {
	case after.State == StateFailing && (before.State != StateFailing || before.Kind != after.Kind):
		log.Warn("fence device check failed", "kind", after.Kind, "err", after.Error)
	case after.State == StateOK && before.State == StateFailing:
		log.Info("fence device healthy again", "failed_for", started.Sub(before.Since).Round(time.Second), "failed_checks", before.Failures)
	case after.State == StateOK && before.State == StatePending:
		log.Info("fence device ok")
	}
	if m.o.Observe != nil {
		m.o.Observe(after)
	}
}

// Get returns the health of device; false if this monitor does not watch it.
func (m *Checker) Get(device string) (Health, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.health[device]
	if !ok {
		return Health{}, false
	}
	return *h, true
}

// All returns the health of every watched device, by name.
func (m *Checker) All() []Health {
	m.mu.Lock()
	out := make([]Health, 0, len(m.health))
	for _, h := range m.health {
		out = append(out, *h)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// Watches reports whether the checker checks device.
func (m *Checker) Watches(device string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.devs[device]
	return ok
}

// Path states: whether a node can be fenced, as the checks see it.
const (
	PathWorking = "working" // every device of at least one level is healthy
	PathFailing = "failing" // every level has a device whose last check failed
	PathUnknown = "unknown" // no level is known to work, and not every level is known to fail
	PathNone    = "none"    // the node has no fence topology
)

// Path says whether a node whose fence topology is levels (device names
// per level) can be fenced, given each device's health (ok false: not
// watched here).
func Path(levels [][]string, get func(device string) (Health, bool)) string {
	if len(levels) == 0 {
		return PathNone
	}
	allFail := true
	for _, lvl := range levels {
		works, fails := len(lvl) > 0, false
		for _, dev := range lvl {
			h, ok := get(dev)
			if !ok || h.State != StateOK {
				works = false
			}
			if ok && h.State == StateFailing {
				fails = true
			}
		}
		if works {
			return PathWorking
		}
		allFail = allFail && (fails || len(lvl) == 0)
	}
	if allFail {
		return PathFailing
	}
	return PathUnknown
}

// Devices lists the distinct devices of levels in level order.
func Devices(levels [][]string) []string {
	var out []string
	for _, lvl := range levels {
		for _, d := range lvl {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}
