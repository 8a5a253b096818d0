package quorum

import (
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// inmemCluster opens n in-memory nodes on raft's in-memory transport, all
// connected.
func inmemCluster(t *testing.T, n int, lease time.Duration) (map[string]*Raft, map[string]*raft.InmemTransport) {
	t.Helper()
	var peers []Peer
	trans := map[string]*raft.InmemTransport{}
	for i := range n {
		name := string(rune('a' + i))
		peers = append(peers, Peer{Name: name})
		_, trans[name] = raft.NewInmemTransport(raft.ServerAddress(name))
	}
	for a, ta := range trans {
		for b, tb := range trans {
			if a != b {
				ta.Connect(raft.ServerAddress(b), tb)
			}
		}
	}
	nodes := map[string]*Raft{}
	for _, p := range peers {
		q, err := OpenRaft(RaftOptions{Self: p.Name, Peers: peers, HeartbeatTimeout: lease / 3, Transport: trans[p.Name], InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		nodes[p.Name] = q
		t.Cleanup(func() { q.Shutdown() })
	}
	return nodes, trans
}

// waitLeader waits until every node in among agrees on one leader other
// than the excluded one, and returns it.
func waitLeader(t *testing.T, nodes map[string]*Raft, among []string, exclude string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l := nodes[among[0]].Leader()
		agreed := l != "" && l != exclude
		for _, n := range among[1:] {
			agreed = agreed && nodes[n].Leader() == l
		}
		if agreed && nodes[l].IsLeader() {
			return l
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no leader agreed among %v", among)
	return ""
}

// TestContactAtLeaderChange: after the leader is cut off and another takes
// over, a follower still knows when it last heard from the old leader. That
// moment is recorded at the change itself, so it is neither lost (the old
// leader never speaks again) nor pushed later by the new leader's contacts
// (which would make a successor wait longer than it must).
func TestContactAtLeaderChange(t *testing.T) {
	const lease = 600 * time.Millisecond // raft heartbeat timeout 200ms
	nodes, trans := inmemCluster(t, 3, lease)
	all := []string{"a", "b", "c"}
	old := waitLeader(t, nodes, all, "")
	// A renewal makes every follower hear from the leader just now.
	if err := nodes[old].Confirm(lease); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, n := range all {
		if n != old {
			rest = append(rest, n)
		}
	}
	cutAt := Now()
	for _, n := range rest {
		trans[old].Disconnect(raft.ServerAddress(n))
		trans[n].Disconnect(raft.ServerAddress(old))
	}
	next := waitLeader(t, nodes, rest, old)
	// Let the new leader's contacts accumulate: they must not count for
	// the old one.
	time.Sleep(300 * time.Millisecond)
	for _, n := range rest {
		since, ok := nodes[n].SinceContact(old)
		if !ok {
			t.Fatalf("%s: no contact with former leader %s recorded", n, old)
		}
		// The last contact was at most one heartbeat interval (up to a
		// fifth of raft's heartbeat timeout, 40ms) before the cut, and
		// never after it.
		cut := Since(cutAt)
		t.Logf("%s (leader now %s): last heard from %s %s ago; cut %s ago", n, next, old, since.Round(time.Millisecond), cut.Round(time.Millisecond))
		if since < cut-20*time.Millisecond {
			t.Errorf("%s: contact with %s placed %s after the cut: a later leader's contact counted for it", n, old, (cut - since).Round(time.Millisecond))
		}
		if since > cut+100*time.Millisecond {
			t.Errorf("%s: contact with %s placed %s before the cut: earlier than the real last contact, an unsafe bound", n, old, (since - cut).Round(time.Millisecond))
		}
	}
	// The new leader knows the old one as the leader before it, gone
	// silent since the cut (what a witness that won checks before it hands
	// leadership on).
	if prev, since, ok := nodes[next].PreviousLeader(); prev != old || !ok || since < Since(cutAt)-20*time.Millisecond {
		t.Errorf("%s: previous leader %q, heard %s ago (%v); want %s, silent since the cut %s ago", next, prev, since.Round(time.Millisecond), ok, old, Since(cutAt).Round(time.Millisecond))
	}
	// The old leader's own view: it led until now.
	if since, ok := nodes[old].SinceContact(old); !ok || since != 0 {
		t.Errorf("%s about itself: %s %v", old, since, ok)
	}
}

// TestLeaderPace: the leader heartbeats at leaderPace × the timeout its
// followers use to detect it; a node that loses leadership goes back to
// the followers' timeout, so its own detection stays fast.
func TestLeaderPace(t *testing.T) {
	const lease = 600 * time.Millisecond
	hb := raftConfig("x", lease/3, slog.New(slog.DiscardHandler)).HeartbeatTimeout
	nodes, trans := inmemCluster(t, 3, lease)
	all := []string{"a", "b", "c"}
	want := func(name string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for nodes[name].r.ReloadableConfig().HeartbeatTimeout != d {
			if time.Now().After(deadline) {
				t.Fatalf("%s: heartbeat timeout %s, want %s", name, nodes[name].r.ReloadableConfig().HeartbeatTimeout, d)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	old := waitLeader(t, nodes, all, "")
	var rest []string
	for _, n := range all {
		if n != old {
			rest = append(rest, n)
			want(n, hb)
		}
	}
	want(old, leaderPace*hb)
	for _, n := range rest {
		trans[old].Disconnect(raft.ServerAddress(n))
		trans[n].Disconnect(raft.ServerAddress(old))
	}
	next := waitLeader(t, nodes, rest, old)
	want(next, leaderPace*hb)
	want(old, hb) // stepped down: no leader contact, so it follows nobody
}
