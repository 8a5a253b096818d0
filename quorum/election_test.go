package quorum

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestLastElection: the node that wins after the leader is cut off knows
// the term, the leader before it, when it last heard from it (before the
// cut, not after) and when it began standing (after the cut): the detect
// and elect phases of a failover's timeline.
func TestLastElection(t *testing.T) {
	const lease = 600 * time.Millisecond
	nodes, trans := inmemCluster(t, 3, lease)
	all := []string{"a", "b", "c"}
	old := waitLeader(t, nodes, all, "")
	if e, ok := nodes[old].LastElection(); !ok || e.Leader != old || e.Term != nodes[old].Term() || e.Won.IsZero() {
		t.Fatalf("first leader %s: election %+v %v", old, e, ok)
	}
	if err := nodes[old].Confirm(lease); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, n := range all {
		if n != old {
			rest = append(rest, n)
		}
	}
	cut := time.Now()
	for _, n := range rest {
		trans[old].Disconnect(raft.ServerAddress(n))
		trans[n].Disconnect(raft.ServerAddress(old))
	}
	next := waitLeader(t, nodes, rest, old)
	e, ok := nodes[next].LastElection()
	if !ok || e.Leader != next || e.Previous != old || e.Term != nodes[next].Term() || e.Rounds < 1 {
		t.Fatalf("%s: election %+v %v; want won from %s in term %d", next, e, ok, old, nodes[next].Term())
	}
	// A heartbeat already in flight at the cut may still arrive.
	if e.LastContact.IsZero() || e.LastContact.After(cut.Add(50*time.Millisecond)) || cut.Sub(e.LastContact) > lease {
		t.Errorf("last contact with %s at %s, the cut at %s", old, e.LastContact.Format(time.StampMicro), cut.Format(time.StampMicro))
	}
	if e.Started.Before(cut) || e.Won.Before(e.Started) {
		t.Errorf("stood at %s, won at %s, the cut at %s", e.Started.Format(time.StampMicro), e.Won.Format(time.StampMicro), cut.Format(time.StampMicro))
	}
	t.Logf("%s: silent %s, campaign %s, %d round(s), term %d", next, e.Started.Sub(e.LastContact).Round(time.Millisecond),
		e.Won.Sub(e.Started).Round(time.Microsecond), e.Rounds, e.Term)
	// A follower never won: it has no election of its own.
	for _, n := range rest {
		if n != next {
			if e, ok := nodes[n].LastElection(); ok {
				t.Errorf("follower %s has an election %+v", n, e)
			}
		}
	}
}
