package stonith

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith/fencing"
)

// Topology is a node's fence topology: levels tried in order.
type Topology []Level

// Level is one fence level: every device must succeed for the level to
// succeed (e.g. both PDUs feeding a dual-PSU server).
type Level struct {
	Devices []Target
	// Storage: the level cuts only the node's access to the shared
	// storage (SCSI-3 reservations, fabric zoning), not its power. What of
	// the group does not use the storage keeps running there.
	Storage bool
}

// Target is one device of a level with the fenced node's mapping on it.
type Target struct {
	Device string // device name from the configuration, for records and logs
	Agent  string // registered agent kind
	Plug   string // the node on that device: outlet, system id, WWPNs
	// Params are the device's parameters merged with the node's overrides;
	// Plug is added as "plug" when set.
	Params agents.Params
	// Timeout bounds one try (the action and the engine's read-back);
	// 0 means Engine.DefaultTimeout.
	Timeout time.Duration
	// Retries of a failed or unknown try before the device is given up.
	Retries int
}

// Request asks the engine to fence (or unfence) one node.
type Request struct {
	Target   string // node name
	Topology Topology
	// Action is ActionOff; ActionReboot (off through the topology, then on
	// through every device of the level that confirmed the off); or
	// ActionOn, the unfence: on through every level (or Levels), last
	// level first.
	Action      string
	Reason      string
	RequestedBy string
	Executor    string
	Epoch       uint64
	ID          uint64
	// Levels restricts an unfence (ActionOn) to these 1-based levels, e.g.
	// the level that fenced the node according to the history. Empty means
	// every level. Ignored for off and reboot.
	Levels []int
	// OnProgress, when set, receives a copy of the record after every
	// attempt (Outcome pending). Calls are serialised.
	OnProgress func(fencing.Record)
	// PowerOnly: only levels that remove the node's power may confirm
	// this off (the node's stop failed and it could not reset itself:
	// cutting its storage would leave the rest of the group running).
	// Storage levels are not tried.
	PowerOnly bool
	// TargetBoot is the target's boot ID, for the record.
	TargetBoot string
}

// Engine runs fence requests. It is safe for concurrent use: requests for
// different nodes run in parallel; a request for a node that is already
// being fenced waits until that operation has finished, then runs on its
// own and produces its own record (no joining: each request is recorded
// with its own id, and a second off of a node already off is a cheap
// confirmed no-op).
type Engine struct {
	reg *agents.Registry
	log *slog.Logger

	// DefaultTimeout bounds one try of a device whose Target.Timeout is 0.
	DefaultTimeout time.Duration
	// RetryDelay is the pause before the second try of a device; it doubles
	// with each further try, up to 8 times its value.
	RetryDelay time.Duration
	// Now is the wall clock for Record.Started/Finished (tests may fix it).
	// Durations always use the monotonic clock.
	Now func() time.Time
	// Hedge lets a level that is not answering start the next level
	// alongside it, for off (see the package documentation, "Levels in
	// parallel"). On by default.
	Hedge bool
	// Sessions, when set, is told of the sessions the agents open and
	// close (agents.SessionRecorder; see sessions.go).
	Sessions agents.SessionLedger
	// Confirmed, when set, is told of every try whose action the engine
	// read back (an off read back off, an on read back on): the device
	// answered and took our credentials, as good as a check of it. It
	// must not block.
	Confirmed func(device string, started time.Time, took time.Duration)

	mu      sync.Mutex
	running map[string]chan struct{} // node → closed when its operation ends
	kept    map[string]*Kept         // device → its kept agent
	steps   map[stepKey]Step         // what each device of a running operation does now
}

// Step is what one device of a running operation does now (Engine.Steps).
type Step struct {
	Target string
	Action string
	Level  int
	Device string
	Try    int
	// Step is agents.StepSession, StepCommand, StepReadBack, or StepRetry
	// (waiting before the next try).
	Step  string
	Since time.Time // when it entered Step
}

// StepRetry: a device waits before its next try.
const StepRetry = "waiting to retry"

type stepKey struct{ target, device string }

// Steps returns what every device of the running operations does now,
// by target and device.
func (e *Engine) Steps() []Step {
	e.mu.Lock()
	out := make([]Step, 0, len(e.steps))
	for _, s := range e.steps {
		out = append(out, s)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Target != out[j].Target {
			return out[i].Target < out[j].Target
		}
		return out[i].Level < out[j].Level || out[i].Level == out[j].Level && out[i].Device < out[j].Device
	})
	return out
}

// setStep records what device of o does now; step "" forgets it.
func (o *operation) setStep(level int, device string, try int, step string) {
	e := o.e
	k := stepKey{o.req.Target, device}
	e.mu.Lock()
	defer e.mu.Unlock()
	if step == "" {
		delete(e.steps, k)
		return
	}
	if e.steps == nil {
		e.steps = map[stepKey]Step{}
	}
	e.steps[k] = Step{Target: o.req.Target, Action: o.req.Action, Level: level, Device: device, Try: try, Step: step, Since: time.Now()}
}

// NewEngine returns an engine building agents from reg.
func NewEngine(reg *agents.Registry, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{
		reg:            reg,
		log:            log,
		DefaultTimeout: 20 * time.Second,
		RetryDelay:     250 * time.Millisecond,
		Now:            time.Now,
		Hedge:          true,
		running:        map[string]chan struct{}{},
		kept:           map[string]*Kept{},
	}
}

// lockTarget waits until no other operation runs for node, then claims it.
func (e *Engine) lockTarget(ctx context.Context, node string) (release func(), err error) {
	for {
		e.mu.Lock()
		busy, ok := e.running[node]
		if !ok {
			done := make(chan struct{})
			e.running[node] = done
			e.mu.Unlock()
			return func() {
				e.mu.Lock()
				delete(e.running, node)
				e.mu.Unlock()
				close(done)
			}, nil
		}
		e.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Fence runs req and returns its record; Outcome is success only when the
// node was read back off on every device of one level (for on: read back on
// on every device asked). It never returns a pending record.
func (e *Engine) Fence(ctx context.Context, req Request) fencing.Record {
	rec := fencing.Record{
		ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action,
		Reason: req.Reason, RequestedBy: req.RequestedBy, Executor: req.Executor,
		Epoch: req.Epoch, Started: e.Now(), Outcome: fencing.OutcomePending, TargetBoot: req.TargetBoot,
	}
	if req.Action == fencing.ActionOn {
		rec.Kind = fencing.KindUnfence
	}
	log := e.log.With("target", req.Target, "fence_id", req.ID, "action", req.Action, "epoch", req.Epoch)
	finish := func(outcome, msg string) fencing.Record {
		rec.Outcome, rec.Error, rec.Finished = outcome, msg, e.Now()
		if outcome == fencing.OutcomeSuccess {
			log.Info("fence finished", "outcome", outcome, "attempts", len(rec.Attempts), "error", msg)
		} else {
			log.Error("fence finished", "outcome", outcome, "attempts", len(rec.Attempts), "error", msg)
		}
		return rec
	}
	if req.Target == "" {
		return finish(fencing.OutcomeFailed, "request names no target node")
	}
	switch req.Action {
	case fencing.ActionOff, fencing.ActionReboot, fencing.ActionOn:
	default:
		return finish(fencing.OutcomeFailed, fmt.Sprintf("action %q: want off, reboot or on", req.Action))
	}
	if len(req.Topology) == 0 {
		return finish(fencing.OutcomeFailed, "node "+req.Target+" has no fence topology")
	}
	release, err := e.lockTarget(ctx, req.Target)
	if err != nil {
		// Nothing was sent: the wait for the running operation was cut short.
		return finish(fencing.OutcomeFailed, "waiting for the running operation on "+req.Target+": "+err.Error())
	}
	defer release()
	rec.Started = e.Now()
	log.Info("fence started", "levels", len(req.Topology), "reason", req.Reason, "requested_by", req.RequestedBy)

	run := &operation{e: e, req: req, rec: &rec, log: log, start: time.Now()}
	if req.Action == fencing.ActionOn {
		outcome, msg := run.unfence(ctx)
		return finish(outcome, msg)
	}
	outcome, level, msg := run.off(ctx)
	if outcome == fencing.OutcomeSuccess && req.Topology[level-1].Storage {
		rec.Scope = fencing.ScopeStorage
	}
	if outcome != fencing.OutcomeSuccess || req.Action == fencing.ActionOff {
		return finish(outcome, msg)
	}
	// Reboot: the node is confirmed off through every device of one level;
	// power comes back through those same devices only, all of them, after
	// all are off (a dual-PSU server stays off until both feeds are cut).
	res := run.level(ctx, level, fencing.ActionOn)
	if res.ok {
		return finish(fencing.OutcomeSuccess, "")
	}
	// The fence itself is confirmed; what failed is the restart. The record
	// stays a success (the node is safely off) and says what is left to do.
	return finish(fencing.OutcomeSuccess, "confirmed off at level "+fmt.Sprint(level)+"; power on failed: "+res.err)
}

// operation is one running request.
type operation struct {
	e     *Engine
	req   Request
	rec   *fencing.Record
	log   *slog.Logger
	start time.Time // monotonic, for fencing.Attempt.Started

	mu sync.Mutex // guards rec.Attempts and serialises OnProgress
}

// off walks the levels in order until one succeeds. It returns the outcome,
// the 1-based level that succeeded, and a summary of the failures.
func (o *operation) off(ctx context.Context) (outcome string, level int, msg string) {
	if o.e.Hedge && o.req.Action == fencing.ActionOff && len(o.req.Topology) > 1 {
		return o.offHedged(ctx)
	}
	var problems []string
	unknown := false
	for i := range o.req.Topology {
		n := i + 1
		if err := ctx.Err(); err != nil {
			problems = append(problems, fmt.Sprintf("level %d: not tried: %v", n, err))
			break
		}
		res := o.level(ctx, n, fencing.ActionOff)
		if res.ok {
			return fencing.OutcomeSuccess, n, ""
		}
		unknown = unknown || res.unknown
		problems = append(problems, fmt.Sprintf("level %d: %s", n, res.err))
		o.log.Warn("fence level failed, trying the next", "level", n, "error", res.err)
	}
	if unknown {
		return fencing.OutcomeUnknown, 0, strings.Join(problems, "; ")
	}
	return fencing.OutcomeFailed, 0, strings.Join(problems, "; ")
}

// unfence powers the node back on (or restores its zoning) through every
// level asked for, last level first: the outer, more physical levels (PDU
// feeds, fabric) are restored before the inner ones (the BMC's power on),
// which may need them. A device already on reads back on and costs one
// status query, so levels that did not cut the node are harmless.
func (o *operation) unfence(ctx context.Context) (string, string) {
	levels := o.req.Levels
	if len(levels) == 0 {
		for i := range o.req.Topology {
			levels = append(levels, i+1)
		}
	}
	var problems []string
	failed, unknown := false, false
	for i := len(levels) - 1; i >= 0; i-- {
		n := levels[i]
		if n < 1 || n > len(o.req.Topology) {
			problems = append(problems, fmt.Sprintf("level %d: no such level (topology has %d)", n, len(o.req.Topology)))
			failed = true
			continue
		}
		res := o.level(ctx, n, fencing.ActionOn)
		if !res.ok {
			failed = true
			unknown = unknown || res.unknown
			problems = append(problems, fmt.Sprintf("level %d: %s", n, res.err))
		}
	}
	switch {
	case !failed:
		return fencing.OutcomeSuccess, ""
	case unknown:
		return fencing.OutcomeUnknown, strings.Join(problems, "; ")
	}
	return fencing.OutcomeFailed, strings.Join(problems, "; ")
}

type levelResult struct {
	ok      bool
	unknown bool   // some attempt's outcome was unknown
	err     string // why the level failed
}

// level runs action on every device of level n in parallel.
func (o *operation) level(ctx context.Context, n int, action string) levelResult {
	return o.levelWatched(ctx, n, action, nil)
}

// levelWatched is level; answered[i], when given, is called whenever
// device i answers.
func (o *operation) levelWatched(ctx context.Context, n int, action string, answered []func()) levelResult {
	devs := o.req.Topology[n-1].Devices
	if len(devs) == 0 {
		return levelResult{err: "no devices"}
	}
	if o.req.PowerOnly && o.req.Topology[n-1].Storage && action != fencing.ActionOn {
		return levelResult{err: "not tried: it cuts only the storage, and " + o.req.Target + " must lose its power (its stop failed and it could not reset itself)"}
	}
	// Devices that did go off stay off when a sibling fails: powering them
	// back on would undo part of a fence for nothing.
	results := make([]deviceResult, len(devs))
	var wg sync.WaitGroup
	for i, t := range devs {
		wg.Add(1)
		var hook func()
		if answered != nil {
			hook = answered[i]
		}
		go func() {
			defer wg.Done()
			results[i] = o.device(ctx, n, t, action, hook)
		}()
	}
	wg.Wait()
	res := levelResult{ok: true}
	var problems []string
	for i, r := range results {
		res.unknown = res.unknown || r.unknown
		if !r.ok {
			res.ok = false
			problems = append(problems, "device "+devs[i].Device+": "+strings.TrimPrefix(r.err, "device "+devs[i].Device+": "))
		}
	}
	res.err = strings.Join(problems, ", ")
	return res
}

type deviceResult struct {
	ok      bool
	unknown bool // some attempt's outcome was unknown
	err     string
}

// device runs action on one device, with retries, and records every try.
func (o *operation) device(ctx context.Context, level int, t Target, action string, answered func()) deviceResult {
	log := o.log.With("level", level, "device", t.Device, "agent", t.Agent)
	base := fencing.Attempt{Level: level, Device: t.Device, Agent: t.Agent, Plug: t.Plug, Action: action, Start: time.Since(o.start)}
	a, closeAgent, err := o.e.agentFor(t, log)
	if err != nil {
		// A configuration error: nothing was sent, retrying cannot help.
		at := base
		at.Try, at.Result, at.Error = 1, fencing.ResultFailed, err.Error()
		o.record(at)
		return deviceResult{err: err.Error()}
	}
	defer closeAgent()
	defer o.setStep(level, t.Device, 0, "")

	tries := 1 + max(t.Retries, 0)
	res := deviceResult{}
	delay := o.e.RetryDelay
	for try := 1; try <= tries; try++ {
		stepCtx := agents.WithStepHook(ctx, func(step string) { o.setStep(level, t.Device, try, step) })
		if try > 1 {
			o.setStep(level, t.Device, try, StepRetry)
			select {
			case <-ctx.Done():
				res.err += fmt.Sprintf("; try %d not made: %v", try, ctx.Err())
				return res
			case <-time.After(delay):
			}
			delay = min(delay*2, 8*o.e.RetryDelay)
		}
		started := time.Since(o.start)
		wall := time.Now()
		o.setStep(level, t.Device, try, agents.StepCommand)
		at := o.e.try(stepCtx, a, t, action, answered)
		if at.Result == fencing.ResultSuccess && o.e.Confirmed != nil {
			o.e.Confirmed(t.Device, wall, at.Duration)
		}
		at.Level, at.Device, at.Agent, at.Plug, at.Action, at.Try, at.Start = level, t.Device, t.Agent, t.Plug, action, try, started
		o.record(at.Attempt)
		switch at.Result {
		case fencing.ResultSuccess:
			log.Info("device "+action+" confirmed", "try", try, "read_back", at.ReadBack, "took", at.Duration)
			res.ok, res.err = true, ""
			return res
		case fencing.ResultUnknown:
			res.unknown = true
		}
		log.Warn("device "+action+" "+at.Result, "try", try, "of", tries, "error", at.Error)
		res.err = fmt.Sprintf("try %d: %s: %s", try, at.Result, at.Error)
		if at.auth {
			// Credentials do not fix themselves: give the next level the time.
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	return res
}

// tryResult is an Attempt plus what the engine needs to decide on retries.
type tryResult struct {
	fencing.Attempt
	auth bool
}

// try makes one try: the agent's action (which reads back itself), then the
// engine's own status query, which must agree. An agent that can send its
// command on its own (agents.Commander) is sent the command, and the
// engine's status queries are then the read-back. Success is never
// reported without the engine's read-back.
func (e *Engine) try(ctx context.Context, a agents.Agent, t Target, action string, answered func()) tryResult {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = e.DefaultTimeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if answered != nil {
		tctx = agents.WithAnswerHook(tctx, answered)
	}
	start := time.Now()
	var res tryResult
	want := agents.StateOff
	if action == fencing.ActionOn {
		want = agents.StateOn
	}
	var err error
	if c, ok := a.(agents.Commander); ok {
		err = e.command(tctx, c, a, want, &res)
	} else {
		if want == agents.StateOn {
			err = a.On(tctx)
		} else {
			err = a.Off(tctx)
		}
		if err == nil {
			var st agents.State
			agents.NoteStep(tctx, agents.StepReadBack)
			rb := time.Now()
			st, err = a.Status(tctx)
			res.ReadBackDuration = time.Since(rb)
			switch {
			case err != nil:
				// The action reported success, our own read-back did not
				// answer: we cannot tell, so this is not a confirmation.
				err = agents.Unknown("read-back status", err)
				res.ReadBack = agents.StateUnknown.String()
			case st != want:
				res.ReadBack = st.String()
				if st == agents.StateUnknown {
					err = agents.Unknown("read-back status", fmt.Errorf("device acknowledged %s but its state reads unknown", action))
				} else {
					err = agents.Failed("read-back status", fmt.Errorf("device acknowledged %s but reads back %s", action, st))
				}
			default:
				res.ReadBack = st.String()
			}
		}
	}
	res.Duration = time.Since(start)
	res.Stderr = stderrOf(err, a)
	switch {
	case err == nil:
		res.Result = fencing.ResultSuccess
	case agents.IsUnknown(err):
		res.Result = fencing.ResultUnknown
		res.Error = err.Error()
	default:
		res.Result = fencing.ResultFailed
		res.Error = err.Error()
		res.auth = errors.Is(err, agents.ErrAuth)
	}
	if err != nil && tctx.Err() != nil && ctx.Err() == nil && !strings.Contains(res.Error, "timeout") {
		res.Error = fmt.Sprintf("device timeout %v: %s", timeout, res.Error)
	}
	if err != nil && ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
			res.Error = fmt.Sprintf("stopped (%v): %s", cause, res.Error)
		}
	}
	return res
}

// Read-back polling after a command: at once, then every readBackPoll,
// every readBackSlowPoll after readBackSlowAfter (a chassis that takes its
// time is not flooded).
const (
	readBackPoll      = 100 * time.Millisecond
	readBackSlowPoll  = 500 * time.Millisecond
	readBackSlowAfter = 5 * time.Second
)

// command sends want's command through c and reads the state back until
// it is want, within the command's window and ctx. A refused command is
// still read back once (a BMC may refuse power-off because the chassis is
// already off): success needs the state read back as want, whatever the
// command said; an error reply never counts as success by itself.
func (e *Engine) command(ctx context.Context, c agents.Commander, a agents.Agent, want agents.State, res *tryResult) error {
	window, cerr := c.Command(ctx, want)
	agents.NoteStep(ctx, agents.StepReadBack)
	rb := time.Now()
	defer func() { res.ReadBackDuration = time.Since(rb) }()
	if errors.Is(cerr, agents.ErrAuth) || (cerr != nil && ctx.Err() != nil) {
		return cerr
	}
	deadline := rb.Add(window)
	if cerr != nil || window <= 0 {
		deadline = rb // one read only
	}
	var st agents.State
	var serr error
	// read: the state of the last read that answered, if one did.
	read, answered := agents.StateUnknown, false
	for polls := 0; ; polls++ {
		st, serr = a.Status(ctx)
		if serr == nil {
			read, answered = st, true
		}
		res.ReadBack = st.String()
		if serr == nil && st == want {
			if cerr != nil {
				e.log.Info("device refused or did not acknowledge the command, but reads back "+want.String(), "err", cerr)
			}
			return nil
		}
		if serr != nil {
			res.ReadBack = agents.StateUnknown.String()
		}
		wait := readBackPoll
		if time.Since(rb) > readBackSlowAfter {
			wait = readBackSlowPoll
		}
		if ctx.Err() != nil || time.Until(deadline) < wait {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	switch {
	case cerr != nil:
		// Refused (the state is not want: the refusal stands) or not
		// acknowledged (it may still happen: unknown).
		return cerr
	case serr != nil && ctx.Err() != nil && answered && read != want && read != agents.StateUnknown:
		// The try's time ran out during a read, after reads that answered
		// and still said otherwise: that is what the device says.
		res.ReadBack = read.String()
		return agents.Failed("read-back status", fmt.Errorf("device acknowledged %s but still read back %s when the device timeout ended, after %v", want, read, time.Since(rb).Round(time.Millisecond)))
	case serr != nil:
		return agents.Unknown("read-back status", fmt.Errorf("command acknowledged; reading the state back: %w", serr))
	case st == agents.StateUnknown:
		return agents.Unknown("read-back status", fmt.Errorf("device acknowledged %s but its state reads unknown", want))
	}
	return agents.Failed("read-back status", fmt.Errorf("device acknowledged %s but still reads back %s after %v", want, st, time.Since(rb).Round(time.Millisecond)))
}

// maxStderr bounds the plugin output kept in a record.
const maxStderr = 4 << 10

// stderrOf returns the (already scrubbed) standard error a plugin agent
// reported, from the error chain or the agent's last run.
func stderrOf(err error, a agents.Agent) string {
	var s string
	var withStderr interface{ Stderr() string }
	if errors.As(err, &withStderr) {
		s = withStderr.Stderr()
	} else if l, ok := a.(interface{ LastStderr() string }); ok {
		s = l.LastStderr()
	}
	s = strings.TrimSpace(s)
	if len(s) > maxStderr {
		s = s[len(s)-maxStderr:]
	}
	return s
}

// record appends at to the record and reports progress.
func (o *operation) record(at fencing.Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rec.Attempts = append(o.rec.Attempts, at)
	if o.req.OnProgress != nil {
		cp := *o.rec
		cp.Attempts = append([]fencing.Attempt(nil), o.rec.Attempts...)
		o.req.OnProgress(cp)
	}
}

// agentFor returns the agent for t: the device's kept agent when one is
// kept for exactly t's parameters (so its session is used), else one
// built for this operation and closed after it.
func (e *Engine) agentFor(t Target, log *slog.Logger) (agents.Agent, func(), error) {
	if k := e.keptFor(t); k != nil {
		return k.a, func() {}, nil
	}
	return e.build(t, log)
}

// build makes the agent for t. Agents are built per operation and closed
// after it, unless the device is kept (Keep).
func (e *Engine) build(t Target, log *slog.Logger) (agents.Agent, func(), error) {
	a, err := e.newAgent(t, log)
	if err != nil {
		return nil, nil, err
	}
	return a, func() {
		if c, ok := a.(agents.Closer); ok {
			if err := c.Close(); err != nil {
				log.Debug("close agent", "err", err)
			}
		}
	}, nil
}

func (e *Engine) newAgent(t Target, log *slog.Logger) (agents.Agent, error) {
	k, ok := e.reg.Lookup(t.Agent)
	if !ok {
		return nil, fmt.Errorf("device %s: unknown agent %q", t.Device, t.Agent)
	}
	p := make(agents.Params, len(t.Params)+1)
	for n, v := range t.Params {
		p[n] = v
	}
	if t.Plug != "" {
		p["plug"] = t.Plug
	}
	a, err := k.New(p, log)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", t.Device, err)
	}
	e.recordSessions(a, t)
	return a, nil
}

// targetKey identifies what an agent is built from: kind, plug and
// parameters (not the timeout, which the engine applies).
func targetKey(t Target) string {
	names := make([]string, 0, len(t.Params))
	for n := range t.Params {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(t.Agent + "\x00" + t.Plug)
	for _, n := range names {
		b.WriteString("\x00" + n + "=" + t.Params[n])
	}
	return b.String()
}

// DeviceStatus reads the state of t's target without changing it, within
// t's timeout (for `fencectl device status`).
func (e *Engine) DeviceStatus(ctx context.Context, t Target) (agents.State, error) {
	a, closeAgent, err := e.build(t, e.log.With("device", t.Device))
	if err != nil {
		return agents.StateUnknown, err
	}
	defer closeAgent()
	ctx, cancel := e.deviceContext(ctx, t)
	defer cancel()
	st, err := a.Status(ctx)
	if err != nil {
		return agents.StateUnknown, fmt.Errorf("device %s: status: %w", t.Device, err)
	}
	return st, nil
}

// Monitor checks t's device answers and accepts our credentials: the
// agent's Monitor when it has one, else a status query.
func (e *Engine) Monitor(ctx context.Context, t Target) error {
	a, closeAgent, err := e.build(t, e.log.With("device", t.Device))
	if err != nil {
		return err
	}
	defer closeAgent()
	ctx, cancel := e.deviceContext(ctx, t)
	defer cancel()
	if m, ok := a.(agents.Monitor); ok {
		err = m.Monitor(ctx)
	} else {
		_, err = a.Status(ctx)
	}
	if err != nil {
		return fmt.Errorf("device %s: monitor: %w", t.Device, err)
	}
	return nil
}

func (e *Engine) deviceContext(ctx context.Context, t Target) (context.Context, context.CancelFunc) {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = e.DefaultTimeout
	}
	return context.WithTimeout(ctx, timeout)
}
