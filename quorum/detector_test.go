package quorum

import (
	"reflect"
	"testing"
)

func TestRankOrder(t *testing.T) {
	none := func(string) bool { return false }
	witness := func(n string) bool { return n == "w" }
	cases := []struct {
		voters []string
		leader string
		inel   func(string) bool
		want   []string
	}{
		{[]string{"a", "b", "c"}, "a", none, []string{"b", "c"}},
		// The first to act wins: a data node before the witness.
		{[]string{"w", "a", "b"}, "a", witness, []string{"b", "w"}},
		{[]string{"a", "b", "c", "x", "y"}, "c", func(n string) bool { return n == "x" || n == "b" }, []string{"a", "y", "b", "x"}},
	}
	for _, c := range cases {
		if got := RankOrder(c.voters, c.leader, c.inel); !reflect.DeepEqual(got, c.want) {
			t.Errorf("RankOrder(%v, %s) = %v, want %v", c.voters, c.leader, got, c.want)
		}
	}
}
