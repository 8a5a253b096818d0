package driver

import (
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
)

// Placer is the raft leader's placement of the groups other than the
// default one (docs/groups.md, "Placement"): where a group must move (its
// node unreached, standby, ineligible, listed as maybe running another
// group, or it handed the group on), it commits the new place with
// quorum.Place's rule, one group at a time. Placement says where a group
// runs, never whether two nodes may run it: that stays the grant's, the
// lease's and the fence's. The daemon and the simulator run this one.
//
// Like a Driver, a Placer belongs to one loop.
type Placer struct {
	groups  []quorum.GroupSpec
	log     Log
	clock   Clock
	timing  tenure.Timing
	kick    func()
	placed  func(group, to, was string)
	placing bool        // a placement is being committed
	retryAt tenure.Time // none before: the last commit failed
	// handed: until when a node that handed a group on is not given it
	// again (PlaceNode.Refuses), on this node's clock from when it applied
	// the handover; every node keeps it, so that a new leader keeps to it.
	handed map[handoff]tenure.Time
}

type handoff struct{ group, node string }

// Candidate is one configured node as this leader sees it.
type Candidate struct {
	Name string
	// Eligible: reached lately, a data node (not a witness), running and
	// not ineligible. Standby is read from the replicated state.
	Eligible bool
}

// PlacerConfig configures a Placer.
type PlacerConfig struct {
	// Groups are the placed groups' specs (every group but the default).
	Groups []quorum.GroupSpec
	Log    Log
	Clock  Clock
	Timing tenure.Timing
	// Kick wakes the loop: a placement was committed or refused.
	Kick func()
	// Placed, if set, hears of each placement before it is committed.
	Placed func(group, to, was string)
}

// NewPlacer returns the placement of cfg's groups.
func NewPlacer(cfg PlacerConfig) *Placer {
	kick := cfg.Kick
	if kick == nil {
		kick = func() {}
	}
	return &Placer{groups: cfg.Groups, log: cfg.Log, clock: cfg.Clock, timing: cfg.Timing, kick: kick, placed: cfg.Placed}
}

// HandedOn notes a committed handover (an OpPlace with From, as this node
// applied it at now): group is not placed on its From again for a lease.
func (p *Placer) HandedOn(c quorum.Command, now tenure.Time) {
	if c.Op != quorum.OpPlace || c.From == "" {
		return
	}
	if p.handed == nil {
		p.handed = map[handoff]tenure.Time{}
	}
	p.handed[handoff{c.Group, c.From}] = now.Add(p.timing.Lease)
}

// Step places what must move, when this node leads raft at a cluster
// version that has groups; nodes are every configured node as it sees
// them now.
func (p *Placer) Step(leader bool, version int, nodes []Candidate) {
	if !leader || len(p.groups) == 0 || p.placing || version < quorum.GroupsVersion {
		return
	}
	now := p.clock.Now()
	if now < p.retryAt {
		return
	}
	names := []string{quorum.DefaultGroup}
	for _, g := range p.groups {
		names = append(names, g.Name)
	}
	holders := make([]quorum.Holders, len(names))
	for i, name := range names {
		holders[i] = p.log.Holders(name)
	}
	standby := holders[0].Standby
	var in []quorum.PlaceNode
	for _, c := range nodes {
		pn := quorum.PlaceNode{Name: c.Name, Eligible: c.Eligible && !standby[c.Name]}
		for _, g := range p.groups {
			if until, ok := p.handed[handoff{g.Name, c.Name}]; ok && now < until {
				pn.Refuses = append(pn.Refuses, g.Name)
			}
		}
		for i, v := range holders {
			// Listed while another node holds the group: it may be fenced
			// for it at any moment (listedElsewhere). (Its own mount
			// intent lists the holder too.)
			if v.Lists(c.Name) && v.Holder != c.Name {
				pn.Unconfirmed = append(pn.Unconfirmed, names[i])
			}
		}
		in = append(in, pn)
	}
	current := map[string]string{}
	for i, g := range p.groups {
		current[g.Name] = holders[i+1].Placement
	}
	want := quorum.Place(p.groups, in, current)
	for _, g := range p.groups {
		to := want[g.Name]
		if to == "" || to == current[g.Name] {
			continue
		}
		p.placing = true
		if p.placed != nil {
			p.placed(g.Name, to, current[g.Name])
		}
		p.log.Apply(quorum.Command{Op: quorum.OpPlace, Group: g.Name, Node: to}, func(_ any, err error) {
			p.placing = false
			if err != nil {
				// Not leading any more, a transfer under way: again in a
				// heartbeat.
				p.retryAt = p.clock.Now().Add(p.timing.Heartbeat)
			}
			p.kick()
		})
		return
	}
}
