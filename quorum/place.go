package quorum

import (
	"slices"
	"time"
)

// Placement (docs/groups.md): which node each resource group runs on. The
// leader alone places and commits its choice (OpPlace); Place is the rule,
// written once here for the daemon and the simulator alike (neither runs
// several groups yet: docs/groups.md, step 2).
//
// It is sticky, so that it cannot loop: a group stays on the node it is
// placed on while that node may take it, whatever a preference or an
// anti-affinity says, and moves back to its first preferred node only
// with failback, after that node has been able to take it for
// FailbackAfter. Anti-affinity is best effort: it decides only where a
// group that has to be placed goes, and only while some node without a
// conflict can take it.

// GroupSpec is what placement reads of a group's configuration.
type GroupSpec struct {
	Name string
	// Prefer are the nodes the group should run on, best first; any other
	// node that may take it comes after them.
	Prefer []string
	// Avoid are the groups it should not share a node with (either
	// group's avoid keeps them apart).
	Avoid []string
	// Failback moves the group back to Prefer[0] once that node has been
	// able to take it for FailbackAfter.
	Failback      bool
	FailbackAfter time.Duration
}

// PlaceNode is what placement knows of a node.
type PlaceNode struct {
	Name string
	// Eligible: the node may hold a group at all — a data node (not a
	// witness), not standby, not ineligible, not fenced in its boot.
	Eligible bool
	// EligibleFor is how long it has been eligible without a break (for
	// failback).
	EligibleFor time.Duration
	// Unconfirmed are the groups that list the node as maybe running them
	// while another node holds them (a holder's own mount intent lists
	// it too; that one does not count). It takes no other group while it
	// is listed: it may be fenced for them at any moment.
	Unconfirmed []string
	// Refuses are the groups it may not take back yet: it handed them on
	// (its start failed, it may not hold them now) a moment ago. Without
	// this two nodes that each cannot hold a group for a while would hand
	// it to each other.
	Refuses []string
}

// Place returns the node each group is to run on ("": no node may take
// it), given where each runs or was placed now (current, by group name).
func Place(groups []GroupSpec, nodes []PlaceNode, current map[string]string) map[string]string {
	byName := make(map[string]*PlaceNode, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	// takes says whether node n may take group g.
	takes := func(n, g string) bool {
		p := byName[n]
		if p == nil || !p.Eligible || slices.Contains(p.Refuses, g) {
			return false
		}
		for _, u := range p.Unconfirmed {
			if u != g {
				return false
			}
		}
		return true
	}
	out := make(map[string]string, len(groups))
	var homeless []GroupSpec
	for _, g := range groups {
		at := current[g.Name]
		if at == "" || !takes(at, g.Name) {
			homeless = append(homeless, g)
			continue
		}
		out[g.Name] = at
	}
	avoids := func(a, b GroupSpec) bool { return slices.Contains(a.Avoid, b.Name) || slices.Contains(b.Avoid, a.Name) }
	spec := make(map[string]GroupSpec, len(groups))
	for _, g := range groups {
		spec[g.Name] = g
	}
	// on counts the groups other than g placed on node n, and how many of
	// them g is to be kept apart from.
	on := func(g GroupSpec, n string) (load, conflicts int) {
		for other, at := range out {
			if at == n && other != g.Name {
				load++
				if avoids(g, spec[other]) {
					conflicts++
				}
			}
		}
		return load, conflicts
	}
	for _, g := range homeless {
		best, bestKey := "", []int(nil)
		for _, n := range nodes {
			if !takes(n.Name, g.Name) {
				continue
			}
			load, conflicts := on(g, n.Name)
			rank := slices.Index(g.Prefer, n.Name)
			if rank < 0 {
				rank = len(g.Prefer)
			}
			// Fewest conflicts, then preference, then the fewest groups;
			// nodes in their given order break a tie.
			key := []int{min(conflicts, 1), rank, load}
			if best == "" || slices.Compare(key, bestKey) < 0 {
				best, bestKey = n.Name, key
			}
		}
		out[g.Name] = best
	}
	// Failback: a group that runs elsewhere goes back to its first
	// preferred node once that node has been able to take it for
	// FailbackAfter, unless a group it is kept apart from runs there. A
	// move can free a node for another's failback, so until none moves;
	// each group moves at most once, to its first preferred node.
	for moved := true; moved; {
		moved = false
		for _, g := range groups {
			if !g.Failback || len(g.Prefer) == 0 || out[g.Name] == "" {
				continue
			}
			home := g.Prefer[0]
			if _, conflicts := on(g, home); home != out[g.Name] && takes(home, g.Name) && byName[home].EligibleFor >= g.FailbackAfter && conflicts == 0 {
				out[g.Name], moved = home, true
			}
		}
	}
	return out
}
