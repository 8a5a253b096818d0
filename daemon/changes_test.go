package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// An election is a record of its own, unless its leader is re-elected
// with no other leader between: then it takes the leader's newest election
// record again (one run more, the newest term and win, the first
// campaign's start and contact).
func TestElectionRecord(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	first := fencing.Record{ID: 7, Kind: fencing.KindElection, Target: "b", Term: 5, Previous: "a", LastContact: t0, Started: t0.Add(time.Second),
		Finished: t0.Add(1100 * time.Millisecond), Outcome: fencing.OutcomeSuccess}
	other := fencing.Record{ID: 8, Kind: fencing.KindElection, Target: "c", Term: 6, Previous: "b", Outcome: fencing.OutcomeSuccess}
	fence := fencing.Record{ID: 9, Kind: fencing.KindFence, Target: "a", Outcome: fencing.OutcomeSuccess}
	won := t0.Add(time.Minute)
	cases := []struct {
		name    string
		e       quorum.Election
		history []fencing.Record
		wantID  uint64
		want    string // in the reason
		runs    int
	}{
		{"after another leader", quorum.Election{Term: 9, Leader: "b", Previous: "a", LastContact: won.Add(-2 * time.Second), Started: won.Add(-time.Second), Won: won},
			[]fencing.Record{first, fence}, 0, "a last heard 1s before the campaign", 0},
		{"re-elected, its record newest", quorum.Election{Term: 9, Leader: "b", Previous: "b", Started: won.Add(-time.Second), Won: won},
			[]fencing.Record{first, fence}, 7, "re-elected in term 9 (2 elections since the first)", 2},
		{"re-elected, another's record newer", quorum.Election{Term: 9, Leader: "b", Previous: "b", Won: won},
			[]fencing.Record{first, other}, 0, "re-elected in term 9", 0},
		{"first since start", quorum.Election{Term: 2, Leader: "b", Won: won}, nil, 0, "no leader known before", 0},
		{"several rounds", quorum.Election{Term: 12, Leader: "b", Previous: "a", Won: won, Rounds: 3}, []fencing.Record{first}, 0, "after 3 rounds", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := electionRecord(tc.e, quorum.State{Epoch: 4, History: tc.history}, "b")
			if r.ID != tc.wantID || r.Kind != fencing.KindElection || r.Target != "b" || r.Term != tc.e.Term || !r.Finished.Equal(won) ||
				r.Runs != tc.runs || !strings.Contains(r.Reason, tc.want) || r.Epoch != 4 {
				t.Fatalf("record %+v; want id %d, term %d, runs %d, reason with %q", r, tc.wantID, tc.e.Term, tc.runs, tc.want)
			}
			if tc.wantID != 0 && (!r.Started.Equal(first.Started) || !r.LastContact.Equal(first.LastContact) || r.Previous != "a") {
				t.Errorf("folded record lost its first campaign: %+v", r)
			}
			if tc.wantID == 0 && r.Started.IsZero() {
				t.Errorf("no start: %+v", r)
			}
		})
	}
}

func TestGrantReason(t *testing.T) {
	cases := []struct {
		prev, state string
		want        string
	}{
		{"", "", "first grant"},
		{"b", quorum.HolderMounted, "granted again"},
		{"a", quorum.HolderReleased, "a had released epoch 3"},
		{"a", quorum.HolderMounted, "a held epoch 3 (mounted) and had not released"},
	}
	for _, tc := range cases {
		if got := grantReason(tc.prev, tc.state, 3, "b"); !strings.Contains(got, tc.want) {
			t.Errorf("grantReason(%q, %q) = %q, want %q", tc.prev, tc.state, got, tc.want)
		}
	}
}
