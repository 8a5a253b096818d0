package quorum

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func placeNodes(names ...string) []PlaceNode {
	var out []PlaceNode
	for _, n := range names {
		out = append(out, PlaceNode{Name: n, Eligible: true, EligibleFor: time.Hour})
	}
	return out
}

// TestPlaceRules: each rule of placement on a small cluster.
func TestPlaceRules(t *testing.T) {
	a := GroupSpec{Name: "nfs-a", Prefer: []string{"node1"}}
	b := GroupSpec{Name: "nfs-b", Prefer: []string{"node2", "node1"}, Avoid: []string{"nfs-a"}}
	c := GroupSpec{Name: "db", Prefer: []string{"node3"}}
	all := placeNodes("node1", "node2", "node3")
	down := func(n string) []PlaceNode {
		out := placeNodes("node1", "node2", "node3")
		for i := range out {
			if out[i].Name == n {
				out[i].Eligible = false
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		groups  []GroupSpec
		nodes   []PlaceNode
		current map[string]string
		want    map[string]string
	}{
		{"spread by preference", []GroupSpec{a, b, c}, all, nil, map[string]string{"nfs-a": "node1", "nfs-b": "node2", "db": "node3"}},
		{"sticky: a group stays off its preferred node", []GroupSpec{a}, all, map[string]string{"nfs-a": "node2"}, map[string]string{"nfs-a": "node2"}},
		{"failback once the preferred node is eligible long enough", []GroupSpec{{Name: "nfs-a", Prefer: []string{"node1"}, Failback: true, FailbackAfter: 30 * time.Minute}}, all,
			map[string]string{"nfs-a": "node2"}, map[string]string{"nfs-a": "node1"}},
		{"no failback before failback_after", []GroupSpec{{Name: "nfs-a", Prefer: []string{"node1"}, Failback: true, FailbackAfter: 2 * time.Hour}}, all,
			map[string]string{"nfs-a": "node2"}, map[string]string{"nfs-a": "node2"}},
		{"a lost node's group moves; the others stay", []GroupSpec{a, b, c}, down("node2"),
			map[string]string{"nfs-a": "node1", "nfs-b": "node2", "db": "node3"}, map[string]string{"nfs-a": "node1", "nfs-b": "node3", "db": "node3"}},
		{"anti-affinity over preference while another node can take it", []GroupSpec{a, b}, down("node2"),
			map[string]string{"nfs-a": "node1"}, map[string]string{"nfs-a": "node1", "nfs-b": "node3"}},
		{"anti-affinity is best effort", []GroupSpec{a, b}, []PlaceNode{{Name: "node1", Eligible: true}},
			nil, map[string]string{"nfs-a": "node1", "nfs-b": "node1"}},
		{"anti-affinity never moves a running group", []GroupSpec{a, b}, all,
			map[string]string{"nfs-a": "node2", "nfs-b": "node2"}, map[string]string{"nfs-a": "node2", "nfs-b": "node2"}},
		{"nothing eligible", []GroupSpec{a}, down("node1")[:1], nil, map[string]string{"nfs-a": ""}},
		{"an unconfirmed node takes no other group", []GroupSpec{c}, []PlaceNode{{Name: "node1", Eligible: true}, {Name: "node3", Eligible: true, Unconfirmed: []string{"nfs-a"}}},
			map[string]string{"db": "node3"}, map[string]string{"db": "node1"}},
		{"a node listed for a group may keep it", []GroupSpec{c}, []PlaceNode{{Name: "node1", Eligible: true}, {Name: "node3", Eligible: true, Unconfirmed: []string{"db"}}},
			map[string]string{"db": "node3"}, map[string]string{"db": "node3"}},
		{"a node that handed a group on does not get it back", []GroupSpec{a}, []PlaceNode{{Name: "node1", Eligible: true, Refuses: []string{"nfs-a"}}, {Name: "node2", Eligible: true}},
			map[string]string{"nfs-a": ""}, map[string]string{"nfs-a": "node2"}},
		{"nor keeps it", []GroupSpec{a, c}, []PlaceNode{{Name: "node1", Eligible: true, Refuses: []string{"nfs-a"}}, {Name: "node3", Eligible: true}},
			map[string]string{"nfs-a": "node1", "db": "node1"}, map[string]string{"nfs-a": "node3", "db": "node1"}},
		{"load breaks a tie", []GroupSpec{{Name: "g1"}, {Name: "g2"}, {Name: "g3"}}, all, nil, map[string]string{"g1": "node1", "g2": "node2", "g3": "node3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Place(tc.groups, tc.nodes, tc.current); !maps.Equal(got, tc.want) {
				t.Fatalf("placed %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlaceHasNoLoops: over random clusters, placing again what Place
// returned changes nothing (no placement loop), every group is on a node
// that may take it or on none only when none may, and a group whose node
// may keep it moves only by failback to its first preferred node.
func TestPlaceHasNoLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		nn := 1 + rng.IntN(7)
		var nodes []PlaceNode
		for k := range nn {
			nodes = append(nodes, PlaceNode{Name: fmt.Sprintf("n%d", k), Eligible: rng.IntN(4) > 0, EligibleFor: time.Duration(rng.IntN(60)) * time.Minute})
		}
		ng := 1 + rng.IntN(6)
		var groups []GroupSpec
		current := map[string]string{}
		for k := range ng {
			g := GroupSpec{Name: fmt.Sprintf("g%d", k), Failback: rng.IntN(3) == 0, FailbackAfter: time.Duration(rng.IntN(60)) * time.Minute}
			for range rng.IntN(3) {
				g.Prefer = append(g.Prefer, nodes[rng.IntN(nn)].Name)
			}
			for range rng.IntN(2) {
				g.Avoid = append(g.Avoid, fmt.Sprintf("g%d", rng.IntN(ng)))
			}
			if rng.IntN(2) == 0 {
				current[g.Name] = nodes[rng.IntN(nn)].Name
			}
			if rng.IntN(5) == 0 {
				n := &nodes[rng.IntN(nn)]
				n.Unconfirmed = append(n.Unconfirmed, g.Name)
			}
			groups = append(groups, g)
		}
		got := Place(groups, nodes, current)
		if again := Place(groups, nodes, got); !maps.Equal(again, got) {
			t.Fatalf("case %d: placing %v again gives %v", i, got, again)
		}
		for _, g := range groups {
			at := got[g.Name]
			if at == "" {
				for _, n := range nodes {
					if mayTake(n, g.Name) {
						t.Fatalf("case %d: %s placed nowhere, but %s may take it", i, g.Name, n.Name)
					}
				}
				continue
			}
			n := nodes[slices.IndexFunc(nodes, func(n PlaceNode) bool { return n.Name == at })]
			if !mayTake(n, g.Name) {
				t.Fatalf("case %d: %s placed on %s, which may not take it (%+v)", i, g.Name, at, n)
			}
			if was := current[g.Name]; was != "" && was != at {
				w := nodes[slices.IndexFunc(nodes, func(n PlaceNode) bool { return n.Name == was })]
				if mayTake(w, g.Name) && !(g.Failback && len(g.Prefer) > 0 && at == g.Prefer[0]) {
					t.Fatalf("case %d: %s moved from %s, which may keep it, to %s", i, g.Name, was, at)
				}
			}
		}
	}
}

func mayTake(n PlaceNode, g string) bool {
	if !n.Eligible {
		return false
	}
	for _, u := range n.Unconfirmed {
		if u != g {
			return false
		}
	}
	return true
}
