package quorum

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"
)

// Resource groups (docs/groups.md). Each group has its own holder, epoch
// (its own fencing token, its own sequence) and lease; what belongs to a
// node rather than a group — standby, the history, the configuration,
// the cluster version — is the cluster's.
//
// The default group is the only one of a configuration without
// `groups:`, and the only one before cluster version GroupsVersion. Its
// state is State's own top-level fields, where it was before groups
// existed: an upgraded cluster keeps its epoch, and a node of an earlier
// version reads its snapshots and entries unchanged. Every other group is
// in State.Groups. A command's Group "" is the default group.

// DefaultGroup names the group of a configuration without `groups:`.
const DefaultGroup = "default"

// OpPlace commits the leader's placement of Group: Node is the only node
// it may be granted to from then on ("" lifts the placement: any node, as
// before one). Placement decides where a group runs, not whether two
// nodes may: that stays the grant's, the lease's and the fence's.
const OpPlace = "place"

// OpRenew renews the lease of Group's holder Node at Epoch, for a holder
// that is not the raft leader (docs/groups.md, "Renewal"): committed and
// not refused, it shows that a majority stored, after the renewal began,
// an entry that names the holder at its epoch. It is refused (ErrStale)
// unless Node holds Group at Epoch, has not released it, and the group is
// placed on Node (or not placed): so a renewal never commits after a
// successor's grant, which is what lets the successor wait from its
// grant. It changes nothing in the state and writes no record.
const OpRenew = "renew"

// GroupsVersion is the cluster version in which commands may name a group
// other than the default one, and OpPlace. A cluster runs it once every
// voter runs a build that supports it; a node of an earlier build sent
// one halts on it. A configuration without `groups:` never proposes one,
// so such a cluster writes what it wrote before (docs/groups.md).
const GroupsVersion = 3

// GroupState is what State holds for one group: see State's fields of
// the same names, which are the default group's.
type GroupState struct {
	Epoch       uint64                   `json:"epoch"`
	Holder      string                   `json:"holder"`
	HolderState string                   `json:"holderState"`
	Reason      string                   `json:"reason,omitempty"`
	Previous    string                   `json:"previous,omitempty"`
	LeaseOf     string                   `json:"leaseOf,omitempty"`
	Formers     map[string]uint64        `json:"formers,omitempty"`
	Unconfirmed map[string]uint64        `json:"unconfirmed"`
	Watchdogs   map[string]time.Duration `json:"watchdogs,omitempty"`
	Timings     map[string]HolderTiming  `json:"timings,omitempty"`
	Boots       map[string]string        `json:"boots,omitempty"`
	Unclean     map[string]string        `json:"unclean,omitempty"`
	GrantedAt   time.Time                `json:"grantedAt,omitempty"`
	// Placement is the node the leader placed the group on (OpPlace;
	// Place): only it is granted the group. "" before any placement,
	// as for the default group of a cluster without groups.
	Placement string `json:"placement,omitempty"`
}

// reGroup is what a group's name may be: what a Pacemaker resource ID
// may be, short enough for a metric label.
var reGroup = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,62}$`)

// CheckGroupName says what is wrong with a group's name, or nil.
func CheckGroupName(name string) error {
	if !reGroup.MatchString(name) {
		return fmt.Errorf("group name %.70q: want a letter, then up to 62 letters, digits, '_', '.' or '-'", name)
	}
	return nil
}

// groupOf is the group a command's Group field names ("" is the default).
func groupOf(name string) string {
	if name == "" {
		return DefaultGroup
	}
	return name
}

// namedGroup is the group a record or an answer names: "" for the
// default one (as before groups), else its name.
func namedGroup(name string) string {
	if groupOf(name) == DefaultGroup {
		return ""
	}
	return name
}

// Group returns a copy of the named group's state ("" is the default);
// a group never granted is the zero state, with nothing unconfirmed.
func (s *State) Group(name string) GroupState {
	g := s.group(name)
	return g.clone()
}

// GroupNames are the groups the state knows: the default first, then the
// others in order of name.
func (s *State) GroupNames() []string {
	return append([]string{DefaultGroup}, slices.Sorted(maps.Keys(s.Groups))...)
}

// MaxEpoch is the highest epoch of any group.
func (s *State) MaxEpoch() uint64 {
	e := s.Epoch
	for _, g := range s.Groups {
		e = max(e, g.Epoch)
	}
	return e
}

// group is the named group's state, sharing its maps with s: changes to
// them are s's; the rest is stored back by setGroup.
func (s *State) group(name string) GroupState {
	if name = groupOf(name); name != DefaultGroup {
		var g GroupState
		if p := s.Groups[name]; p != nil {
			g = *p
		}
		if g.Unconfirmed == nil {
			g.Unconfirmed = map[string]uint64{}
		}
		return g
	}
	return GroupState{Epoch: s.Epoch, Holder: s.Holder, HolderState: s.HolderState, Reason: s.Reason, Previous: s.Previous, LeaseOf: s.LeaseOf,
		Formers: s.Formers, Unconfirmed: s.Unconfirmed, Watchdogs: s.Watchdogs, Timings: s.Timings, Boots: s.Boots, Unclean: s.Unclean, GrantedAt: s.GrantedAt,
		Placement: s.Placement}
}

// setGroup stores g as the named group's state.
func (s *State) setGroup(name string, g GroupState) {
	if name = groupOf(name); name != DefaultGroup {
		if s.Groups[name] == nil && g.Epoch == 0 && len(g.Unconfirmed) == 0 && g.Placement == "" {
			// Never granted, nothing listed: a stale command about a
			// group that does not exist leaves none behind.
			return
		}
		if s.Groups == nil {
			s.Groups = map[string]*GroupState{}
		}
		s.Groups[name] = &g
		return
	}
	s.Epoch, s.Holder, s.HolderState, s.Reason, s.Previous, s.LeaseOf = g.Epoch, g.Holder, g.HolderState, g.Reason, g.Previous, g.LeaseOf
	s.Formers, s.Unconfirmed, s.Watchdogs, s.Timings, s.Boots, s.Unclean, s.GrantedAt = g.Formers, g.Unconfirmed, g.Watchdogs, g.Timings, g.Boots, g.Unclean, g.GrantedAt
	s.Placement = g.Placement
}

// applyRenew (OpRenew): nil while c.Node holds c.Group at c.Epoch, has
// not released it and is where the group is placed; else ErrStale.
func (f *FSM) applyRenew(c *Command) any {
	s := f.state.group(c.Group)
	switch {
	case c.Epoch != s.Epoch || c.Node != s.Holder:
		return fmt.Errorf("%w: renewal of %s at epoch %d (current: %s at %d)", ErrStale, c.Node, c.Epoch, s.Holder, s.Epoch)
	case s.HolderState == HolderReleased || s.HolderState == HolderReleasing:
		return fmt.Errorf("%w: renewal of %s at epoch %d: it is %s", ErrStale, c.Node, c.Epoch, s.HolderState)
	case s.Placement != "" && s.Placement != c.Node:
		return fmt.Errorf("%w: renewal of %s at epoch %d: the group is placed on %s", ErrStale, c.Node, c.Epoch, s.Placement)
	}
	return nil
}

// applyPlace (OpPlace): c.Node is where c.Group is placed; with c.From,
// only if it was placed on c.From (else ErrStale: the holder's view was
// stale, and the group stays where the leader placed it). It returns nil.
func (f *FSM) applyPlace(c *Command) any {
	s, done := f.edit(c.Group)
	defer done()
	if c.From != "" && s.Placement != c.From {
		return fmt.Errorf("%w: %s hands group %s on, but it is placed on %q", ErrStale, c.From, groupOf(c.Group), s.Placement)
	}
	s.Placement = c.Node
	return nil
}

// clone is a deep copy of g.
func (g GroupState) clone() GroupState {
	g.Formers, g.Unconfirmed, g.Watchdogs = maps.Clone(g.Formers), maps.Clone(g.Unconfirmed), maps.Clone(g.Watchdogs)
	g.Timings, g.Boots, g.Unclean = maps.Clone(g.Timings), maps.Clone(g.Boots), maps.Clone(g.Unclean)
	if g.Unconfirmed == nil {
		g.Unconfirmed = map[string]uint64{}
	}
	return g
}

// edit is the named group's state to change; done stores it back.
func (f *FSM) edit(name string) (g *GroupState, done func()) {
	v := f.state.group(name)
	return &v, func() { f.state.setGroup(name, v) }
}

// eachGroup runs fn on every group's state (the default first), storing
// each back.
func (f *FSM) eachGroup(fn func(name string, g *GroupState)) {
	for _, name := range f.state.GroupNames() {
		g, done := f.edit(name)
		fn(name, g)
		done()
	}
}
