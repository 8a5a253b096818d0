package daemon

import (
	"slices"
	"strconv"
	"testing"

	"github.com/fenced/fenced/quorum"
)

// TestClusterVersionRule: the next cluster version waits for every
// configured voter (witness included) to be alive in gossip and to
// advertise it; the status names who holds it back.
func TestClusterVersionRule(t *testing.T) {
	voters := []string{"node1", "node2", "node3"}
	mb := func(name, state string, supports int) quorum.Member {
		return quorum.Member{Name: name, State: state, Meta: quorum.Meta{Supports: supports}}
	}
	for _, tc := range []struct {
		name      string
		committed int
		members   []quorum.Member
		next      int
		held      []string
		text      string
	}{
		{"all new", 1, []quorum.Member{mb("node1", "alive", 2), mb("node2", "alive", 2), mb("node3", "suspect", 2)}, 2, nil, "1"},
		{"one old", 1, []quorum.Member{mb("node1", "alive", 2), mb("node2", "alive", 2), mb("node3", "alive", 0)}, 1,
			[]string{"node3 runs an older fenced"}, "1 (node3 runs an older fenced; 2 once every voter advertises it)"},
		{"one down", 1, []quorum.Member{mb("node1", "alive", 2), mb("node2", "alive", 2), mb("node3", "dead", 2)}, 1,
			[]string{"node3 not seen in gossip"}, "1 (node3 not seen in gossip; 2 once every voter advertises it)"},
		{"one missing", 1, []quorum.Member{mb("node1", "alive", 2), mb("node2", "alive", 2)}, 1, []string{"node3 not seen in gossip"}, ""},
		{"two old", 1, []quorum.Member{mb("node1", "alive", 0), mb("node2", "alive", 1), mb("node3", "alive", 2)}, 1,
			[]string{"node1 runs an older fenced", "node2 runs an older fenced"}, ""},
		{"newer than this build", 1, []quorum.Member{mb("node1", "alive", 9), mb("node2", "alive", 9), mb("node3", "alive", 9)}, quorum.ClusterVersionMax, nil, ""},
		// Committed never goes down, whoever runs what now.
		{"committed, one old", quorum.ClusterVersionMax, []quorum.Member{mb("node1", "alive", quorum.ClusterVersionMax),
			mb("node2", "alive", quorum.ClusterVersionMax), mb("node3", "alive", 0)}, quorum.ClusterVersionMax, nil, strconv.Itoa(quorum.ClusterVersionMax)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := clusterVersionOf(tc.committed, voters, tc.members)
			if v.Committed != tc.committed || v.Next != tc.next || !slices.Equal(v.HeldBy, tc.held) {
				t.Fatalf("got %+v, want next %d held by %q", v, tc.next, tc.held)
			}
			if tc.text != "" && v.text() != tc.text {
				t.Fatalf("text %q, want %q", v.text(), tc.text)
			}
		})
	}
}
