package quorum

import (
	"reflect"
	"testing"
)

func TestRankOrder(t *testing.T) {
	none := func(string) bool { return false }
	witness := func(n string) bool { return n == "w" }
	cases := []struct {
		voters   []string
		leader   string
		majority int
		inel     func(string) bool
		want     []string
	}{
		// 3 nodes, the leader gone: the first to act is turned away by the
		// second, which wins with the first's vote.
		{[]string{"a", "b", "c"}, "a", 2, none, []string{"b", "c"}},
		// 2 data + witness: the witness acts first and grants its vote to
		// the data node, which wins.
		{[]string{"a", "b", "w"}, "a", 2, witness, []string{"w", "b"}},
		// 5 nodes, two ineligible: they take the first majority−1 = 2
		// places, then the data nodes: the third to act (a data node) wins.
		{[]string{"a", "b", "c", "x", "y"}, "a", 3, func(n string) bool { return n == "x" || n == "y" }, []string{"x", "y", "b", "c"}},
		// More ineligible nodes than majority−1: the rest go last.
		{[]string{"a", "b", "w1", "w2", "w3"}, "a", 3, func(n string) bool { return n[0] == 'w' }, []string{"w1", "w2", "b", "w3"}},
	}
	for _, c := range cases {
		if got := RankOrder(c.voters, c.leader, c.majority, c.inel); !reflect.DeepEqual(got, c.want) {
			t.Errorf("RankOrder(%v, %s, %d) = %v, want %v", c.voters, c.leader, c.majority, got, c.want)
		}
	}
}
