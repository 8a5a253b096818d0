package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/resource"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// The quorum line says what this node reaches (issue 24): gossip listing
// every node is not quorum when no leader is heard, and a dead node that
// gossip has not yet given up is not a reachable vote once it is suspect
// or silent.
func TestQuorumOf(t *testing.T) {
	now := time.Now()
	fresh, old := now.Add(-500*time.Millisecond), now.Add(-time.Minute)
	m := func(name, state string, contact time.Time) quorum.Member {
		return quorum.Member{Name: name, State: state, Contact: contact}
	}
	const detect, window = 2 * time.Second, 6 * time.Second
	for _, tc := range []struct {
		name      string
		members   []quorum.Member
		leader    string
		leads     bool
		silence   time.Duration
		reachable int
		seen      int
		heard     bool
		have      bool
	}{
		{"healthy follower", []quorum.Member{m("n1", "alive", now), m("n2", "alive", fresh), m("n3", "alive", fresh)}, "n2", false, 100 * time.Millisecond, 3, 3, true, true},
		{"leader", []quorum.Member{m("n1", "alive", now), m("n2", "alive", fresh), m("n3", "suspect", fresh)}, "n1", true, 0, 2, 3, true, true},
		// The split seen: all three in gossip, no leader heard.
		{"split: seen, no leader heard", []quorum.Member{m("n1", "alive", now), m("n2", "alive", fresh), m("n3", "alive", fresh)}, "n2", false, 5 * time.Second, 3, 3, false, false},
		// 2 + witness, witness and primary killed: gossip has not given
		// them up yet (suspect, then silent).
		{"primary and witness dead", []quorum.Member{m("n1", "suspect", fresh), m("n2", "alive", now), m("n3", "alive", old)}, "n1", false, 3 * time.Second, 1, 3, false, false},
		{"no leader at all", []quorum.Member{m("n1", "dead", old), m("n2", "alive", now), m("n3", "dead", old)}, "", false, 0, 1, 1, false, false},
		// A follower that hears its leader reaches it, whatever gossip's
		// round-robin last probed.
		{"leader heard, gossip late", []quorum.Member{m("n1", "alive", old), m("n2", "alive", now), m("n3", "suspect", fresh)}, "n1", false, 200 * time.Millisecond, 2, 3, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := quorumOf(tc.members, "n2", 3, 2, tc.leader, tc.leads, tc.silence, detect, window, now)
			if q.Reachable != tc.reachable || q.Seen != tc.seen || q.LeaderHeard != tc.heard || q.Have != tc.have {
				t.Fatalf("quorum %+v; want reachable %d, seen %d, leader heard %v, have %v", q, tc.reachable, tc.seen, tc.heard, tc.have)
			}
			if !q.LeaderHeard && tc.leader != "" && q.LeaderSilentSec != tc.silence.Seconds() {
				t.Errorf("leader silent %vs, want %v", q.LeaderSilentSec, tc.silence)
			}
			if w := quorumWords(q); !strings.Contains(w, "votes reachable") {
				t.Errorf("words %q", w)
			}
		})
	}
}

func TestPrimacyChange(t *testing.T) {
	fence := fencing.Record{Kind: fencing.KindFence, Target: "n1", Action: fencing.ActionOff, Executor: "n2", Outcome: fencing.OutcomeSuccess}
	for _, tc := range []struct {
		name string
		st   quorum.State
		want string
	}{
		{"none", quorum.State{}, ""},
		{"first", quorum.State{Holder: "n1"}, "n1 was granted primacy (no holder before it)"},
		{"fenced", quorum.State{Holder: "n2", Previous: "n1", History: []fencing.Record{fence}}, "took over from n1, fenced by n2 (off, read back)"},
		{"released", quorum.State{Holder: "n2", Previous: "n1", History: []fencing.Record{fence, {Kind: fencing.KindRelease, Target: "n1", Outcome: fencing.OutcomeSuccess}}},
			"took over from n1, which released the group"},
		{"fencing", quorum.State{Holder: "n2", Previous: "n1", History: []fencing.Record{{Kind: fencing.KindFence, Target: "n1", Outcome: fencing.OutcomePending}}},
			"taking over from n1: fencing it"},
		{"unrecorded", quorum.State{Holder: "n2", Previous: "n1"}, "took over from n1"},
	} {
		if got := primacyChange(tc.st); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A pending fence shows how long it has run, its last attempt, and on the
// node that runs it the step each device is at.
func TestPendingFences(t *testing.T) {
	now := time.Now()
	st := quorum.State{History: []fencing.Record{
		{ID: 1, Kind: fencing.KindFence, Target: "n3", Action: "off", Outcome: fencing.OutcomeSuccess},
		{ID: 2, Kind: fencing.KindFence, Target: "n1", Action: "off", Executor: "n2", Epoch: 8, Outcome: fencing.OutcomePending, Started: now.Add(-4 * time.Second), Runs: 3,
			Attempts: []fencing.Attempt{{Level: 1, Device: "n1-bmc", Try: 1, Result: fencing.ResultFailed, ReadBack: "on", Error: "still reads back on"}}},
	}}
	steps := []stonith.Step{{Target: "n1", Action: "off", Level: 1, Device: "n1-bmc", Try: 2, Step: "read-back", Since: now.Add(-300 * time.Millisecond)},
		{Target: "n3", Action: "on", Level: 1, Device: "n3-bmc", Try: 1, Step: "session", Since: now}}
	ps := pendingFences(st, steps, now)
	if len(ps) != 1 {
		t.Fatalf("pending %+v; want the one running fence", ps)
	}
	p := ps[0]
	if p.ID != 2 || p.ElapsedSec < 3.9 || p.ElapsedSec > 4.1 || p.Runs != 3 || p.LastAttempt == nil || p.LastAttempt.Error != "still reads back on" {
		t.Errorf("pending fence %+v", p)
	}
	if len(p.Steps) != 1 || p.Steps[0].Step != "read-back" || p.Steps[0].Try != 2 || p.Steps[0].ForSec < 0.29 {
		t.Errorf("steps %+v; want n1-bmc at try 2, read-back", p.Steps)
	}
}

// Where each resource runs: this node from its group, the others from
// their gossip (stale marked), a gone node that may still run it as
// unknown, a fenced one not at all.
func TestResourcePlaces(t *testing.T) {
	group := []resource.Status{{Name: "ip", Kind: "ocf:heartbeat:IPaddr2", State: resource.StateStopped}, {Name: "db", Kind: "mount", State: resource.StateStopped}}
	nodes := []api.NodeStatus{
		{Name: "n1", Gossip: "alive", Stale: true},
		{Name: "n2", Gossip: "alive"},
		{Name: "n3", Gossip: "dead", Down: "unconfirmed"},
		{Name: "n4", Gossip: "dead", Down: "fenced"},
		{Name: "n5", Gossip: "alive"},
	}
	letters := map[string]string{"n1": resourceLetters([]resource.Status{{State: resource.StateRunning}, {State: resource.StateFailed}}), "n5": "rrr"}
	// n6 died running the group and was fenced since: its last gossip
	// (stale) is not shown.
	nodes = append(nodes, api.NodeStatus{Name: "n6", Gossip: "alive", Stale: true})
	letters["n6"] = "rr"
	got := resourcePlaces("n2", group, nodes, letters, fencedNodes(quorum.State{History: []fencing.Record{
		{Kind: fencing.KindFence, Target: "n6", Action: "off", Outcome: fencing.OutcomeSuccess},
		{Kind: fencing.KindFence, Target: "n1", Action: "off", Outcome: fencing.OutcomeSuccess},
		{Kind: fencing.KindUnfence, Target: "n1", Action: "on", Outcome: fencing.OutcomeSuccess}}}))
	if len(got) != 2 {
		t.Fatalf("places %+v", got)
	}
	want := [][]api.ResourceOn{
		{{Node: "n1", State: "running", Stale: true}, {Node: "n3", State: "unknown"}},
		{{Node: "n1", State: "failed", Stale: true}, {Node: "n3", State: "unknown"}},
	}
	for i, p := range got {
		if len(p.On) != len(want[i]) {
			t.Fatalf("%s on %+v, want %+v", p.Name, p.On, want[i])
		}
		for j := range p.On {
			if p.On[j] != want[i][j] {
				t.Errorf("%s on %+v, want %+v", p.Name, p.On, want[i])
			}
		}
	}
	if resourcePlaces("n2", nil, nodes, letters, nil) != nil {
		t.Error("places without a group")
	}
}
