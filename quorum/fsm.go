package quorum

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
	"github.com/hashicorp/raft"
)

// Holder states, in the order a takeover moves through them.
const (
	HolderAcquiring = "acquiring" // epoch granted; previous holder not yet confirmed stopped
	HolderFencing   = "fencing"   // fencing the previous holder
	HolderBlocked   = "blocked"   // every fence path failed; waiting for a retry or `fencectl confirm`
	HolderMounting  = "mounting"  // intent to start the storage committed; starting it
	HolderMounted   = "mounted"   // storage running under this epoch
	HolderReleasing = "releasing" // stopping the storage
	HolderReleased  = "released"  // stopped cleanly; nothing to fence
)

// State is the replicated cluster state. Every node holds the same State
// for the same applied index.
type State struct {
	// Epoch is the fencing token of the current grant of primacy. It only
	// ever grows: each grant commits Epoch+1 through the log.
	Epoch       uint64 `json:"epoch"`
	Holder      string `json:"holder"`
	HolderState string `json:"holderState"`
	// Reason explains a blocked or failing takeover.
	Reason string `json:"reason,omitempty"`
	// Previous is the holder before the current grant.
	Previous string `json:"previous,omitempty"`
	// LeaseOf names a former primary whose lease may still be running: the
	// current holder must wait lease+margin from its grant, or see that
	// node released or fenced, before it acts.
	LeaseOf string `json:"leaseOf,omitempty"`
	// Formers are every former holder (with the epoch it held) whose lease
	// may still run: it neither released nor was confirmed stopped, and no
	// holder since has passed its takeover gate (which waits them all out).
	// LeaseOf is the newest of them. Two grants can follow each other
	// within one lease (a holder granted and lost before it passed its
	// gate): the one before it is still a former then.
	Formers map[string]uint64 `json:"formers,omitempty"`
	// Unconfirmed are the nodes that may still have the storage running:
	// they committed a mount intent, and neither their release nor a
	// confirmed fence (or manual confirmation) has been committed since.
	// No node mounts while another node is in this set.
	Unconfirmed map[string]uint64 `json:"unconfirmed"`
	// Standby nodes are never granted primacy.
	Standby map[string]bool `json:"standby,omitempty"`
	// Watchdogs are the watchdog timeouts the nodes in Unconfirmed
	// advertised with their mount intent: each armed its watchdog and
	// feeds it only while its lease is valid.
	Watchdogs map[string]time.Duration `json:"watchdogs,omitempty"`
	// Timings are the lease timings the nodes that may still hold the
	// storage (the holder, Formers, Unconfirmed) advertised with their
	// grant and mount intent: a successor waits out the longer of each and
	// its own, so a change of timing rolling through the cluster cannot
	// shorten a running lease.
	Timings map[string]HolderTiming `json:"timings,omitempty"`
	// Boots are the boot IDs the nodes in Unconfirmed committed their
	// mount intent in: a fence records the boot its target may run the
	// storage in.
	Boots map[string]string `json:"boots,omitempty"`
	// Unclean are nodes in Unconfirmed that said something of the group
	// may still run on them and that they could not stop it nor reset
	// themselves (a failed stop without a reset, a probe that could not
	// stop a leftover), with why. Only a fence that removes their power,
	// their own release, or an admin's confirmation clears them; a fence
	// that cuts only their storage does not.
	Unclean map[string]string `json:"unclean,omitempty"`
	// History is the fence history, oldest first, bounded; it also holds
	// the elections and grants of primacy, which the leader records like
	// any record (OpRecord), so that every version assigns the same IDs.
	History []fencing.Record `json:"history"`
	// NextID numbers history records.
	NextID uint64 `json:"nextID"`
	// GrantedAt is when (wall clock, informational) the epoch was granted.
	GrantedAt time.Time `json:"grantedAt,omitempty"`
	// Config is the cluster's configuration fingerprint: what every node's
	// cluster-wide configuration must hash to for it to be granted
	// primacy. Nil until the leader first commits one.
	Config *ConfigFingerprint `json:"config,omitempty"`
	// Incarnation names the voting set since the last recovery (OpRecover;
	// "" before any).
	Incarnation string `json:"incarnation,omitempty"`
	// ClusterVersion is the committed cluster version (OpClusterVersion;
	// 0 before any, which is version 1; see version.go).
	ClusterVersion int `json:"clusterVersion,omitempty"`
	// Placement is the default group's (OpPlace; "" in a cluster without
	// groups).
	Placement string `json:"placement,omitempty"`
	// Groups are the resource groups other than the default one, whose
	// state is the fields above from Epoch to Unclean, GrantedAt and
	// Placement (group.go). None before cluster version GroupsVersion.
	Groups map[string]*GroupState `json:"groups,omitempty"`
}

// HolderTiming is the part of a holder's timing a successor must wait out.
type HolderTiming struct {
	Lease  time.Duration `json:"lease"`
	Margin time.Duration `json:"margin"`
	Grace  time.Duration `json:"grace"`
}

// ConfigFingerprint is a configuration's cluster-wide part as hashes: one
// per key (Keys, key → 16 hex digits) and one of them all (Hash, see
// FingerprintOf). The values themselves never enter the log.
type ConfigFingerprint struct {
	Hash string            `json:"hash"`
	Keys map[string]string `json:"keys"`
	// Node is the node whose configuration it is; By who had it committed
	// ("leader" for the leader's own, else user@node of `config accept`).
	Node string    `json:"node"`
	By   string    `json:"by,omitempty"`
	Time time.Time `json:"time,omitempty"`
}

// Clone returns a deep copy (nil for nil).
func (c *ConfigFingerprint) Clone() *ConfigFingerprint {
	if c == nil {
		return nil
	}
	out := *c
	out.Keys = maps.Clone(c.Keys)
	return &out
}

// FingerprintOf is the fingerprint of a configuration given its per-key
// hashes: 16 hex digits of SHA-256 over the sorted key=hash lines.
func FingerprintOf(keys map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		h.Write([]byte(k + "=" + keys[k] + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Clone returns a deep copy.
func (s *State) Clone() State {
	c := *s
	c.Unconfirmed = maps.Clone(s.Unconfirmed)
	c.Standby = maps.Clone(s.Standby)
	c.Watchdogs = maps.Clone(s.Watchdogs)
	c.Timings = maps.Clone(s.Timings)
	c.Boots = maps.Clone(s.Boots)
	c.Unclean = maps.Clone(s.Unclean)
	c.Formers = maps.Clone(s.Formers)
	c.History = slices.Clone(s.History)
	c.Config = s.Config.Clone()
	for i := range c.History {
		c.History[i].Attempts = slices.Clone(c.History[i].Attempts)
		c.History[i].Steps = slices.Clone(c.History[i].Steps)
	}
	if s.Groups != nil {
		c.Groups = make(map[string]*GroupState, len(s.Groups))
		for name, g := range s.Groups {
			gc := g.clone()
			c.Groups[name] = &gc
		}
	}
	return c
}

// Command is one replicated change. Op selects the fields used.
type Command struct {
	Op string `json:"op"`
	// Group is the resource group an op about a holder, an epoch or the
	// storage is of ("": the default group; group.go).
	Group  string          `json:"group,omitempty"`
	Node   string          `json:"node,omitempty"`
	Epoch  uint64          `json:"epoch,omitempty"`
	State  string          `json:"state,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Flag   bool            `json:"flag,omitempty"`
	Record *fencing.Record `json:"record,omitempty"`
	Time   time.Time       `json:"time,omitempty"`
	// Watchdog is the armed watchdog timeout a holder advertises with
	// its mount intent (OpState mounting); 0 = none.
	Watchdog time.Duration `json:"watchdog,omitempty"`
	// Timing is the lease timing a holder runs, advertised with its
	// acquire and its mount intent (nil from an older version).
	Timing *HolderTiming `json:"timing,omitempty"`
	// Boot is the boot ID of the node's machine, with its mount intent.
	Boot string `json:"boot,omitempty"`
	// Config is the fingerprint an OpConfig commits.
	Config *ConfigFingerprint `json:"config,omitempty"`
	// Gone and Incarnation are an OpRecover's (see recover.go).
	Gone        []string `json:"gone,omitempty"`
	Incarnation string   `json:"incarnation,omitempty"`
	// ClusterVersion is the version an OpClusterVersion raises to.
	ClusterVersion int `json:"clusterVersion,omitempty"`
	// From, on an OpPlace, makes it conditional: the group moves only if
	// it is placed on From (a holder handing its group on; "" = the
	// leader's own placement, unconditional).
	From string `json:"from,omitempty"`
	// Version is the cluster version the command needs when above 1
	// (Needs; set at proposal): a node that supports less halts on it
	// rather than misapply it, whatever the op.
	Version int `json:"version,omitempty"`
}

// Command ops.
const (
	OpAcquire = "acquire" // grant Epoch+1 to Node
	OpState   = "state"   // Node at Epoch moves to State (stale epochs refused)
	OpRelease = "release" // Node released the storage it held at Epoch
	OpRecord  = "record"  // add or update a history record (by ID)
	OpStandby = "standby" // set Node's standby flag
	OpConfig  = "config"  // Config becomes the cluster's configuration fingerprint
	// OpUnclean: Node may still run something of the group and can
	// neither stop it nor reset itself (Reason); it is listed in
	// Unconfirmed (at Epoch if it is not yet) and Unclean.
	OpUnclean = "unclean"
)

// ErrStale is returned by Apply for a command carrying an epoch that is no
// longer current: a deposed holder cannot move the state any more.
var ErrStale = errors.New("stale epoch")

// Grant is the result of an acquire.
type Grant struct {
	Epoch    uint64
	Previous string
	// LeaseOf is the newest former primary whose lease may still run;
	// Formers all of them.
	LeaseOf string
	Formers map[string]uint64
	// Unconfirmed are the nodes to fence (or see release) before mounting.
	Unconfirmed map[string]uint64
}

// FSM applies commands to State. It is the raft.FSM of fenced.
type FSM struct {
	limit int

	mu    sync.RWMutex
	state State
	// halt is why it stopped applying the log (see HaltError).
	halt *HaltError
	// watchers are woken on every apply.
	watch chan struct{}
}

// NewFSM returns an empty state machine keeping at most limit history records.
func NewFSM(limit int) *FSM {
	if limit < 1 {
		limit = 1
	}
	return &FSM{limit: limit, state: State{Unconfirmed: map[string]uint64{}, NextID: 1}, watch: make(chan struct{})}
}

// State returns a copy of the current state.
func (f *FSM) State() State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Clone()
}

// Holders is the part of State the tenure rules read: who holds which epoch,
// whose lease may still run, who may still run the storage, who is in
// standby. It is cheap to take (no history).
type Holders struct {
	Epoch       uint64
	Holder      string
	HolderState string
	Previous    string
	LeaseOf     string
	Formers     map[string]uint64
	// Unconfirmed, Standby, Watchdogs and Timings are copies; the caller
	// may keep them.
	Unconfirmed map[string]uint64
	Standby     map[string]bool
	Watchdogs   map[string]time.Duration
	Timings     map[string]HolderTiming
	Boots       map[string]string
	Unclean     map[string]string
	// Placement is the node the group is placed on ("": not placed).
	Placement string
}

// Lists reports whether the group's state lists node as maybe running the
// group: unconfirmed, or a former holder whose lease may still run. A node
// listed for a group it does not hold may be fenced for it at any moment.
func (h Holders) Lists(node string) bool {
	_, unconfirmed := h.Unconfirmed[node]
	_, former := h.Formers[node]
	return unconfirmed || former
}

// Holders returns the default group's current Holders.
func (f *FSM) Holders() Holders { return f.HoldersOf(DefaultGroup) }

// HoldersOf returns the named group's current Holders.
func (f *FSM) HoldersOf(group string) Holders {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.state.group(group)
	return Holders{Epoch: s.Epoch, Holder: s.Holder, HolderState: s.HolderState, Previous: s.Previous, LeaseOf: s.LeaseOf, Formers: maps.Clone(s.Formers),
		Unconfirmed: maps.Clone(s.Unconfirmed), Standby: maps.Clone(f.state.Standby), Watchdogs: maps.Clone(s.Watchdogs), Timings: maps.Clone(s.Timings),
		Boots: maps.Clone(s.Boots), Unclean: maps.Clone(s.Unclean), Placement: s.Placement}
}

// Config returns a copy of the committed configuration fingerprint (nil
// when none is).
func (f *FSM) Config() *ConfigFingerprint {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Config.Clone()
}

// Changed returns a channel closed at the next apply.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.watch
}

// Apply implements raft.FSM. An entry this build cannot apply (written
// by a newer fenced: undecodable, an unknown op, or needing a higher
// cluster version) halts it: it applies nothing more (see Halted).
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer func() {
		close(f.watch)
		f.watch = make(chan struct{})
		f.mu.Unlock()
	}()
	if f.halt != nil {
		return f.halt
	}
	var c Command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		f.halt = &HaltError{Index: l.Index, Err: err}
		return f.halt
	}
	if n := c.Needs(); n > ClusterVersionMax {
		f.halt = &HaltError{Index: l.Index, Op: c.Op, Needs: n}
		return f.halt
	}
	if err := c.check(&f.state); err != nil {
		return fmt.Errorf("fsm: index %d: %w", l.Index, err)
	}
	return f.apply(&c)
}

// appliers are the command handlers, one per op: what each command means and
// what it changes lives in its handler alone.
var appliers = map[string]func(*FSM, *Command) any{
	OpAcquire: (*FSM).applyAcquire,
	OpState:   (*FSM).applyState,
	OpRelease: (*FSM).applyRelease,
	OpRecord:  (*FSM).applyRecord,
	OpStandby: (*FSM).applyStandby,
	OpConfig:  (*FSM).applyConfig,
	OpUnclean: (*FSM).applyUnclean,
	OpRecover: (*FSM).applyRecover,
	OpPlace:   (*FSM).applyPlace,
	OpRenew:   (*FSM).applyRenew,
	// OpClusterVersion: version.go.
	OpClusterVersion: (*FSM).applyClusterVersion,
}

// apply applies c (which passed Command.check) with its op's handler and
// returns what the handler returns; an unknown op is an error. Whatever
// the op, and whether or not the handler refused c, the timings no node
// needs any more are dropped afterwards (pruneTimings).
func (f *FSM) apply(c *Command) any {
	defer f.eachGroup(func(_ string, g *GroupState) { g.pruneTimings() })
	h := appliers[c.Op]
	if h == nil {
		return fmt.Errorf("fsm: unknown op %q", c.Op)
	}
	return h(f, c)
}

// applyAcquire (OpAcquire) grants primacy to c.Node at the next epoch,
// unless it is in standby or the group is placed on another node. A previous holder that neither released nor
// was confirmed stopped becomes a former whose lease may still run (the
// newest: LeaseOf); c.Node itself is no former any more (it ended its
// earlier tenure before it could acquire again). It sets Previous (when
// the holder changes), Epoch, Holder, c.Node's advertised timing, the
// state (acquiring, no reason) and GrantedAt, and returns the Grant.
func (f *FSM) applyAcquire(c *Command) any {
	if f.state.Standby[c.Node] {
		return fmt.Errorf("acquire: %s is in standby", c.Node)
	}
	s, done := f.edit(c.Group)
	defer done()
	if s.Placement != "" && s.Placement != c.Node {
		return fmt.Errorf("acquire: group %s is placed on %s, not %s", groupOf(c.Group), s.Placement, c.Node)
	}
	if s.Holder != "" && s.Holder != c.Node && s.HolderState != HolderReleased {
		// The old primary neither released nor was fenced: its lease
		// may still run, as may those of the formers before it (no
		// holder has waited them out since).
		s.addFormer(s.Holder, s.Epoch)
	}
	s.formerEnded(c.Node, anyEpoch)
	if s.Holder != c.Node {
		s.Previous = s.Holder
	}
	s.Epoch++
	s.Holder = c.Node
	s.setTiming(c)
	s.HolderState = HolderAcquiring
	s.Reason = ""
	s.GrantedAt = c.Time
	return Grant{Epoch: s.Epoch, Previous: s.Previous, LeaseOf: s.LeaseOf, Formers: maps.Clone(s.Formers), Unconfirmed: maps.Clone(s.Unconfirmed)}
}

// applyState (OpState) moves the holder at the current epoch to c.State
// with c.Reason; from any other node or epoch it is stale (ErrStale). A
// mount intent (mounting) is refused while another node may still run
// the storage; committed, it lists c.Node in Unconfirmed at its epoch
// with the timing, boot ID and watchdog it advertised. Mounting or
// mounted, the holder has passed its takeover gate: no former's lease
// runs any more.
func (f *FSM) applyState(c *Command) any {
	s, done := f.edit(c.Group)
	defer done()
	if c.Epoch != s.Epoch || c.Node != s.Holder {
		return fmt.Errorf("%w: %s at epoch %d (current: %s at %d)", ErrStale, c.Node, c.Epoch, s.Holder, s.Epoch)
	}
	if c.State == HolderMounting {
		// Safety: the mount intent is refused while another node may
		// still run the storage.
		for n := range s.Unconfirmed {
			if n != c.Node {
				return fmt.Errorf("mount intent refused: %s is not confirmed stopped", n)
			}
		}
		s.Unconfirmed[c.Node] = c.Epoch
		s.setTiming(c)
		setOrDelete(&s.Boots, c.Node, c.Boot)
		if c.Watchdog > 0 {
			put(&s.Watchdogs, c.Node, c.Watchdog)
		} else {
			delete(s.Watchdogs, c.Node)
		}
	}
	if c.State == HolderMounting || c.State == HolderMounted {
		s.gatePassed()
	}
	s.HolderState = c.State
	s.Reason = c.Reason
	return nil
}

// applyRelease (OpRelease): c.Node stopped the storage it held at
// c.Epoch. It no longer may run the storage (if its mount intent was at
// c.Epoch or before), nor is its lease of a tenure at c.Epoch or before
// running; if it holds c.Epoch, its state is released with c.Reason. A
// release record is added to the history. It returns nil.
func (f *FSM) applyRelease(c *Command) any {
	s, done := f.edit(c.Group)
	defer done()
	if e, ok := s.Unconfirmed[c.Node]; ok && e <= c.Epoch {
		s.cleared(c.Node)
	}
	s.formerEnded(c.Node, c.Epoch)
	if s.Holder == c.Node && s.Epoch == c.Epoch {
		s.HolderState = HolderReleased
		s.Reason = c.Reason
	}
	f.addRecord(fencing.Record{Kind: fencing.KindRelease, Group: namedGroup(c.Group), Target: c.Node, Epoch: c.Epoch, Reason: c.Reason,
		Started: c.Time, Finished: c.Time, Outcome: fencing.OutcomeSuccess, RequestedBy: c.Node, Executor: c.Node})
	return nil
}

// applyRecord (OpRecord) adds c.Record to the history, or updates the
// record with its ID, and returns the record's ID. A lease expiry or
// watchdog confirmation is refused unless the current holder records it
// at the current epoch (and, for the watchdog, the target advertised
// one); both are of c.Group. A record that confirms its target stopped
// (confirmsStopped) clears it: it no longer may run the storage, its
// lease no longer runs, and if it held the current epoch (fenced by
// another node) its state is released — in every group for a power fence
// or an admin's confirmation (nothing runs on the machine), in c.Group
// alone for a lease expiry, a watchdog, or a fence of the storage only.
func (f *FSM) applyRecord(c *Command) any {
	if c.Record == nil {
		return errors.New("record: missing record")
	}
	r := *c.Record
	if r.Group == "" {
		r.Group = namedGroup(c.Group)
	}
	s := f.state.group(c.Group)
	if r.Kind == fencing.KindExpiry || r.Kind == fencing.KindWatchdog {
		// Only the current holder, which waited the lease out itself,
		// records that a former holder's lease (and watchdog) ended;
		// the watchdog only for a node that advertised one.
		if r.Executor != s.Holder || r.Epoch != s.Epoch {
			return fmt.Errorf("record: %s of %s by %s at epoch %d refused: only the holder at the current epoch (%s at %d) may record it",
				r.Kind, r.Target, r.Executor, r.Epoch, s.Holder, s.Epoch)
		}
		if r.Kind == fencing.KindWatchdog && s.Watchdogs[r.Target] <= 0 {
			return fmt.Errorf("record: watchdog confirmation of %s refused: it advertised no armed watchdog", r.Target)
		}
	}
	id := f.addRecord(r)
	machine := r.Kind == fencing.KindConfirm || r.Kind == fencing.KindFence && r.Scope != fencing.ScopeStorage
	f.eachGroup(func(name string, g *GroupState) {
		if !g.confirmsStopped(r) || !machine && name != groupOf(c.Group) {
			return
		}
		g.cleared(r.Target)
		g.formerEnded(r.Target, anyEpoch)
		if g.Holder == r.Target && r.Target != r.Executor {
			// The fenced node held the current epoch: it is stopped now.
			g.HolderState = HolderReleased
		}
	})
	return id
}

// confirmsStopped reports whether r confirms its target stopped: a
// successful power-off, manual confirmation, or lease (and watchdog)
// certainly over. A fence that cut only the storage of an unclean node
// does not (its stop failed: what of the group does not use the storage
// still runs there).
func (g *GroupState) confirmsStopped(r fencing.Record) bool {
	_, unclean := g.Unclean[r.Target]
	storageOnly := r.Kind == fencing.KindFence && r.Scope == fencing.ScopeStorage && unclean
	return r.Outcome == fencing.OutcomeSuccess && !storageOnly && (r.Kind == fencing.KindFence && r.Action != "on" || r.Kind == fencing.KindConfirm ||
		r.Kind == fencing.KindExpiry || r.Kind == fencing.KindWatchdog)
}

// applyStandby (OpStandby) puts c.Node in standby (c.Flag), where it is
// never granted primacy, or takes it out. It returns nil.
func (f *FSM) applyStandby(c *Command) any {
	s := &f.state
	if s.Standby == nil {
		s.Standby = map[string]bool{}
	}
	if c.Flag {
		s.Standby[c.Node] = true
	} else {
		delete(s.Standby, c.Node)
	}
	return nil
}

// applyConfig (OpConfig): c.Config becomes the cluster's configuration
// fingerprint. It returns nil.
func (f *FSM) applyConfig(c *Command) any {
	f.state.Config = c.Config.Clone()
	return nil
}

// applyUnclean (OpUnclean): c.Node may still run something of the group
// and can neither stop it nor reset itself. It is listed in Unconfirmed
// (at the older of c.Epoch and the current epoch, unless it is already)
// and in Unclean with c.Reason. It returns nil.
func (f *FSM) applyUnclean(c *Command) any {
	s, done := f.edit(c.Group)
	defer done()
	if _, ok := s.Unconfirmed[c.Node]; !ok {
		s.Unconfirmed[c.Node] = min(c.Epoch, s.Epoch)
	}
	put(&s.Unclean, c.Node, c.Reason)
	return nil
}

// anyEpoch, to formerEnded: whatever epoch the former held.
const anyEpoch = math.MaxUint64

// addFormer records that n, holder at epoch e, lost primacy without
// releasing or being confirmed stopped: its lease may still run, and it
// is the newest former (LeaseOf).
func (s *GroupState) addFormer(n string, e uint64) {
	s.LeaseOf = n
	put(&s.Formers, n, e)
}

// formerEnded records that n's lease no longer runs: n is no longer
// LeaseOf, and no longer a former if the epoch it held as one is at most
// through (anyEpoch: whatever it was).
func (s *GroupState) formerEnded(n string, through uint64) {
	if s.LeaseOf == n {
		s.LeaseOf = ""
	}
	if e, ok := s.Formers[n]; ok && e <= through {
		delete(s.Formers, n)
	}
}

// gatePassed records that the holder passed its takeover gate: every
// former's lease has been waited out, or the former is confirmed stopped.
func (s *GroupState) gatePassed() {
	s.LeaseOf = ""
	s.Formers = nil
}

// cleared drops n from what may still run the storage.
func (s *GroupState) cleared(n string) {
	delete(s.Unconfirmed, n)
	delete(s.Watchdogs, n)
	delete(s.Boots, n)
	delete(s.Unclean, n)
}

// put sets (*m)[k] = v, making the map if there is none.
func put[V any](m *map[string]V, k string, v V) {
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// setOrDelete sets m[k] = v, or deletes k for "".
func setOrDelete(m *map[string]string, k, v string) {
	if v == "" {
		delete(*m, k)
		return
	}
	put(m, k, v)
}

// setTiming records the timing c's node advertised (none: an older
// version's; a successor then waits out its own).
func (s *GroupState) setTiming(c *Command) {
	if c.Timing == nil {
		delete(s.Timings, c.Node)
		return
	}
	put(&s.Timings, c.Node, *c.Timing)
}

// pruneTimings drops the timings of nodes that may no longer hold the
// storage.
func (s *GroupState) pruneTimings() {
	for n := range s.Timings {
		_, former := s.Formers[n]
		_, unconfirmed := s.Unconfirmed[n]
		if n != s.Holder && !former && !unconfirmed && n != s.LeaseOf {
			delete(s.Timings, n)
		}
	}
}

// addRecord inserts r, or replaces the record with r's ID, and returns the ID.
func (f *FSM) addRecord(r fencing.Record) uint64 {
	s := &f.state
	if r.ID != 0 {
		for i := range s.History {
			if old := s.History[i]; old.ID == r.ID {
				// The result of a request: a retried fence keeps its count
				// and its first run's start.
				r.Runs = max(r.Runs, old.Runs)
				if old.Started.Before(r.Started) {
					r.Started = old.Started
				}
				s.History[i] = r
				return r.ID
			}
		}
	} else if i := f.lastOf(r.Target); i >= 0 && fencing.Retries(s.History[i], r) {
		// A blocked takeover's retries are one record with a count, not
		// one each (a fence a second would push real history out).
		prev := s.History[i]
		prev.Outcome, prev.Runs = fencing.OutcomePending, max(prev.Runs, 1)+1
		s.History[i] = prev
		return prev.ID
	} else {
		r.ID = s.NextID
		s.NextID++
	}
	if r.ID >= s.NextID {
		s.NextID = r.ID + 1
	}
	s.History = append(s.History, r)
	if over := len(s.History) - f.limit; over > 0 {
		s.History = slices.Delete(s.History, 0, over)
	}
	return r.ID
}

// lastOf is the index of target's newest history record, or -1.
func (f *FSM) lastOf(target string) int {
	h := f.state.History
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Target == target {
			return i
		}
	}
	return -1
}

// Snapshot implements raft.FSM. A halted FSM takes none: raft would label
// it with the entries it did not apply, and a restart from it would skip
// them for good.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if h := f.Halted(); h != nil {
		return nil, h
	}
	s := f.State()
	data, err := json.Marshal(&s)
	if err != nil {
		return nil, err
	}
	return snapshot(data), nil
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var s State
	if err := json.NewDecoder(rc).Decode(&s); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	if s.Unconfirmed == nil {
		s.Unconfirmed = map[string]uint64{}
	}
	f.mu.Lock()
	if v := s.Version(); v > ClusterVersionMax {
		// A newer fenced's state: halt rather than run on it.
		f.halt = &HaltError{Op: OpClusterVersion, Needs: v}
		close(f.watch)
		f.watch = make(chan struct{})
		f.mu.Unlock()
		return f.halt
	}
	f.state = s
	close(f.watch)
	f.watch = make(chan struct{})
	f.mu.Unlock()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}
