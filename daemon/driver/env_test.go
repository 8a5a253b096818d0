package driver

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// world is a driver's environment on virtual time, for unit tests: every
// interface answers through a timer of its own, and run fires the timers
// in order. The replicated state is a real quorum.FSM that the commands
// the driver applies or forwards are applied to.
type world struct {
	t     *testing.T
	now   tenure.Time
	seq   int
	queue []wtimer
	drv   *Driver

	leader   string // the raft leader this node knows
	isLeader bool
	behind   bool // the node has not caught up with the leader's log (Joined false)
	fsm      *quorum.FSM
	index    uint64
	applied  []quorum.Command
	forwards []quorum.Command
	// forwardErr fails forwards while it returns an error.
	forwardErr func(quorum.Command) error

	probes  []error // answers of the probe, in turn (then nil)
	probed  int
	unfence func() (fencing.Record, bool)
	tries   int

	inel     map[string]string
	reasons  []string // every eligibility change, "source: reason"
	resets   []string
	canReset bool
	exits    []string
	kicks    int
	boots    map[string]string // what each node advertised
	fences   []FenceRequest    // what the engine was asked
	// localFence, when set, is the local engine's record of a fence.
	localFence func(FenceRequest) fencing.Record
	// paths is what each node's checks find of a target's fence path
	// ("node/target"; this node's own too); asked counts the peers' answers.
	paths map[string]string
	asked []string
	// peerFence answers a fence handed to a peer (nil: the peer's engine
	// confirms it); handed are the requests handed on.
	peerFence func(FenceRequest) (fencing.Record, error)
	handed    []FenceRequest
	// moves are the groups handed on (Log.Move: "group→to"); each is
	// placed on c.
	moves []string
}

type wtimer struct {
	at      tenure.Time
	seq     int
	f       func()
	stopped *bool
}

func newWorld(t *testing.T, cfg Config) *world {
	w := &world{t: t, now: tenure.Time(time.Hour), fsm: quorum.NewFSM(100), inel: map[string]string{}, boots: map[string]string{}, paths: map[string]string{}}
	if cfg.Machine.Self == "" {
		cfg.Machine.Self = "a"
	}
	if cfg.Machine.Timing == (tenure.Timing{}) {
		cfg.Machine.Timing = tenure.Timing{Heartbeat: time.Second, Lease: 3 * time.Second, Margin: 500 * time.Millisecond,
			Grace: 2 * time.Second, FenceTimeout: 20 * time.Second}
	}
	if cfg.Nodes == nil {
		cfg.Nodes, cfg.Majority = []string{"a", "b", "c"}, 2
	}
	w.drv = New(cfg, Env{Log: wlog{w}, Peers: wpeers{w}, Clock: wclock{w}, Effects: weffects{w}, Observer: wobs{w},
		Kick: func() { w.kicks++ }, Ineligible: w.ineligible})
	return w
}

// after queues f at now+d; the timer's stop is returned.
func (w *world) after(d time.Duration, f func()) func() {
	w.seq++
	stopped := new(bool)
	w.queue = append(w.queue, wtimer{at: w.now.Add(d), seq: w.seq, f: f, stopped: stopped})
	return func() { *stopped = true }
}

// run fires every timer due within d, in order, stepping the driver after
// each as the daemon's loop does.
func (w *world) run(d time.Duration) {
	end := w.now.Add(d)
	for {
		slices.SortFunc(w.queue, func(a, b wtimer) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.seq - b.seq
		})
		if len(w.queue) == 0 || w.queue[0].at > end {
			break
		}
		tm := w.queue[0]
		w.queue = w.queue[1:]
		w.now = max(w.now, tm.at)
		if !*tm.stopped {
			tm.f()
			w.drv.Step()
		}
	}
	w.now = end
}

func (w *world) ineligible() string {
	var why []string
	for _, k := range slices.Sorted(maps.Keys(w.inel)) {
		why = append(why, k+": "+w.inel[k])
	}
	return strings.Join(why, "; ")
}

// commit applies c to the replicated state as the leader would.
func (w *world) commit(c quorum.Command) (any, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	w.index++
	res := w.fsm.Apply(&raft.Log{Index: w.index, Type: raft.LogCommand, Data: data})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

type wlog struct{ w *world }

func (l wlog) IsLeader() bool { return l.w.isLeader }
func (l wlog) Leader() string { return l.w.leader }
func (l wlog) Joined() bool   { return l.w.leader != "" && !l.w.behind }
func (l wlog) Holders(group string) quorum.Holders {
	return l.w.fsm.HoldersOf(group)
}
func (l wlog) History() []fencing.Record { return l.w.fsm.State().History }
func (l wlog) SinceContact(string) (time.Duration, bool) {
	return 0, false
}
func (l wlog) Apply(c quorum.Command, done func(any, error)) {
	l.w.applied = append(l.w.applied, c)
	l.w.after(time.Millisecond, func() { done(l.w.commit(c)) })
}
func (l wlog) Acquire(c quorum.Command, _ tenure.Time, done func(any, error)) { l.Apply(c, done) }
func (l wlog) Confirm(_ string, _ uint64, _ tenure.Time, done func(error)) {
	l.w.after(time.Millisecond, func() { done(nil) })
}
func (l wlog) Transfer(string, func(error)) {}
func (l wlog) Propose(c quorum.Command, _ tenure.Time, done func(any, error)) {
	l.Apply(c, done)
}
func (l wlog) Move(group, to string, done func(error)) {
	l.w.moves = append(l.w.moves, group+"→"+to)
	l.w.after(time.Millisecond, func() {
		// The leader places the group elsewhere.
		_, err := l.w.commit(quorum.Command{Op: quorum.OpPlace, Group: group, Node: "c", From: l.w.drv.cfg.Machine.Self})
		done(err)
	})
}

type wpeers struct{ w *world }

func (p wpeers) Forward(c quorum.Command, done func(error)) {
	w := p.w
	w.forwards = append(w.forwards, c)
	w.after(time.Millisecond, func() {
		if w.forwardErr != nil {
			if err := w.forwardErr(c); err != nil {
				done(err)
				return
			}
		}
		_, err := w.commit(c)
		done(err)
	})
}

func (p wpeers) Contact(context.Context, string, string, func(time.Duration, bool, bool)) {}
func (p wpeers) Boot(node string) string                                                  { return p.w.boots[node] }
func (p wpeers) Rank() []string {
	return slices.DeleteFunc(slices.Clone(p.w.drv.cfg.Nodes), func(n string) bool { return n == p.w.drv.cfg.Machine.Self })
}

func (p wpeers) FencePath(ctx context.Context, node, target string, done func(string, bool)) {
	w := p.w
	w.asked = append(w.asked, node)
	w.after(2*time.Millisecond, func() {
		path, ok := w.paths[node+"/"+target]
		if ctx.Err() != nil {
			return
		}
		done(path, ok)
	})
}

func (p wpeers) Fence(_ *Scope, req FenceRequest, done func(fencing.Record, error)) {
	w := p.w
	w.handed = append(w.handed, req)
	w.after(10*time.Millisecond, func() {
		if w.peerFence != nil {
			done(w.peerFence(req))
			return
		}
		done(fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Epoch: req.Epoch,
			Executor: req.Executor, Outcome: fencing.OutcomeSuccess,
			Attempts: []fencing.Attempt{{Level: 1, Device: "bmc", Result: fencing.ResultSuccess, ReadBack: "off"}}}, nil)
	})
}

type wclock struct{ w *world }

func (c wclock) Now() tenure.Time                              { return c.w.now }
func (c wclock) Wall() time.Time                               { return time.Unix(0, int64(c.w.now)) }
func (c wclock) After(d time.Duration, f func()) (stop func()) { return c.w.after(d, f) }

type weffects struct{ w *world }

func (e weffects) Fence(_ *Scope, req FenceRequest, done func(fencing.Record)) {
	e.w.fences = append(e.w.fences, req)
	e.w.after(10*time.Millisecond, func() {
		if e.w.localFence != nil {
			done(e.w.localFence(req))
			return
		}
		done(fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Epoch: req.Epoch,
			Executor: req.Executor, Outcome: fencing.OutcomeSuccess})
	})
}
func (e weffects) FencePath(target string) string {
	return e.w.paths[e.w.drv.cfg.Machine.Self+"/"+target]
}
func (e weffects) Start(_ *Scope, _ uint64, _ string, done func(error)) {
	e.w.after(time.Millisecond, func() { done(nil) })
}
func (e weffects) Monitor(_ *Scope, done func(error)) {
	e.w.after(time.Millisecond, func() { done(nil) })
}
func (e weffects) Stop(_ tenure.Time, done func(error)) {
	e.w.after(time.Millisecond, func() { done(nil) })
}
func (e weffects) ArmWatchdog() time.Duration { return 0 }
func (e weffects) DisarmWatchdog()            {}
func (e weffects) SelfFence(reason string) bool {
	e.w.resets = append(e.w.resets, reason)
	return e.w.canReset
}
func (e weffects) Exit(reason string) { e.w.exits = append(e.w.exits, reason) }
func (e weffects) Probe(_ *Scope, done func(error)) {
	w := e.w
	w.after(time.Millisecond, func() {
		var err error
		if w.probed < len(w.probes) {
			err = w.probes[w.probed]
		}
		w.probed++
		done(err)
	})
}
func (e weffects) Unfence(_ *Scope, done func(fencing.Record, bool)) {
	w := e.w
	w.tries++
	w.after(5*time.Millisecond, func() {
		if w.unfence == nil {
			done(fencing.Record{Kind: fencing.KindUnfence, Target: "a", Action: fencing.ActionOn, Executor: "a", Outcome: fencing.OutcomeSuccess}, true)
			return
		}
		done(w.unfence())
	})
}

type wobs struct{ w *world }

func (o wobs) Stepped(tenure.Phase, tenure.Event, []tenure.Action, *tenure.Machine) {}
func (o wobs) FenceStarted(FenceRequest)                                            {}
func (o wobs) FenceDone(fencing.Record)                                             {}
func (o wobs) Ineligible(source, reason string) {
	if reason == "" {
		delete(o.w.inel, source)
	} else {
		o.w.inel[source] = reason
	}
	o.w.reasons = append(o.w.reasons, source+": "+reason)
}
