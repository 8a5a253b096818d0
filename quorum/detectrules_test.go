package quorum

import (
	"testing"
	"time"
)

var dt = DetectTiming{Detect: 800 * time.Millisecond, Stagger: 40 * time.Millisecond}

const ms = time.Millisecond

func TestDue(t *testing.T) {
	never := forever
	for _, c := range []struct {
		name string
		w    Watch
		ask  bool
		wait time.Duration
	}{
		{"not a voter that acts", Watch{Rank: -1, Silent: time.Hour, SinceAsked: never}, false, forever},
		{"heard recently", Watch{Rank: 0, Silent: 300 * ms, SinceAsked: never}, false, 500 * ms},
		{"silent for Detect, rank 0", Watch{Rank: 0, Silent: 800 * ms, SinceAsked: never}, true, 0},
		{"rank 2 waits two staggers more", Watch{Rank: 2, Silent: 800 * ms, SinceAsked: never}, false, 80 * ms},
		{"rank 2, silent long enough", Watch{Rank: 2, Silent: 880 * ms, SinceAsked: never}, true, 0},
		{"leaderless: another Detect for the candidate", Watch{Rank: 0, Silent: 900 * ms, Leaderless: true, SinceAsked: never}, false, 700 * ms},
		{"leaderless, past it", Watch{Rank: 0, Silent: 1600 * ms, Leaderless: true, SinceAsked: never}, true, 0},
		{"held back", Watch{Rank: 0, Silent: time.Second, Held: 150 * ms, SinceAsked: never}, false, 150 * ms},
		{"urged: a beacon interval short of Detect, hold ignored", Watch{Rank: 3, Silent: 700 * ms, Held: time.Second, Urged: true, SinceAsked: never}, true, 0},
		{"urged, not yet", Watch{Rank: 0, Silent: 600 * ms, Urged: true, SinceAsked: never}, false, 100 * ms},
		{"asked a moment ago", Watch{Rank: 0, Silent: time.Second, SinceAsked: 100 * ms}, false, 300 * ms},
		{"asked Detect/2 ago", Watch{Rank: 0, Silent: time.Second, SinceAsked: 400 * ms}, true, 0},
	} {
		ask, wait := dt.Due(c.w)
		if ask != c.ask || wait != c.wait {
			t.Errorf("%s: Due = %v, %v; want %v, %v", c.name, ask, wait, c.ask, c.wait)
		}
	}
}

func TestAnswer(t *testing.T) {
	silent := Asked{Leader: "a", Current: "a", Silent: time.Second, Mine: 1, AskerRank: 1, Follower: true}
	with := func(f func(*Asked)) Asked { a := silent; f(&a); return a }
	for _, c := range []struct {
		name string
		a    Asked
		want Reply
	}{
		{"heard the leader lately", with(func(a *Asked) { a.Silent = 100 * ms }), Reply{Silent: 100 * ms}},
		{"silent here too, logs and ranks alike", silent, Reply{Silent: time.Second, Agrees: true}},
		{"follows another leader", with(func(a *Asked) { a.Current = "b" }), Reply{}},
		{"knows no leader", with(func(a *Asked) { a.Current = ""; a.Silent = 0 }), Reply{Silent: dt.Detect, Agrees: true}},
		{"agrees at a beacon interval short of Detect", with(func(a *Asked) { a.Silent = AgreeAt(dt.Detect) }), Reply{Silent: AgreeAt(dt.Detect), Agrees: true}},
		{"does not act on that leader", with(func(a *Asked) { a.Mine = -1; a.Newer = 1 }), Reply{Silent: time.Second, Agrees: true}},
		{"its log is newer: it stands at once", with(func(a *Asked) { a.Newer = 1; a.Mine = 5 }), Reply{Silent: time.Second, Agrees: true, Defers: true, Urge: true}},
		{"its log is newer and it is a candidate: the asker holds back", with(func(a *Asked) { a.Newer = 1; a.Follower, a.Candidate = false, true }), Reply{Silent: time.Second, Agrees: true, Defers: true, Standing: true}},
		{"a candidate ranked after the asker, logs alike: the asker holds back", with(func(a *Asked) { a.Mine = 2; a.Follower, a.Candidate = false, true }), Reply{Silent: time.Second, Agrees: true, Defers: true, Standing: true}},
		{"a candidate whose log is older: it holds back", with(func(a *Asked) { a.Newer = -1; a.Follower, a.Candidate = false, true }), Reply{Silent: time.Second, Agrees: true, Hold: true}},
		{"a candidate that does not act on that leader", with(func(a *Asked) { a.Mine = -1; a.Follower, a.Candidate = false, true }), Reply{Silent: time.Second, Agrees: true}},
		{"its log is older: it holds back", with(func(a *Asked) { a.Newer = -1; a.Mine = 0 }), Reply{Silent: time.Second, Agrees: true, Hold: true}},
		{"logs alike, it ranks after the asker", with(func(a *Asked) { a.Mine = 2 }), Reply{Silent: time.Second, Agrees: true, Hold: true}},
		{"logs alike, it ranks first: it stands", with(func(a *Asked) { a.Mine = 0 }), Reply{Silent: time.Second, Agrees: true, Defers: true}},
		{"ranks first but already holds back", with(func(a *Asked) { a.Mine = 0; a.Holding = true }), Reply{Silent: time.Second, Agrees: true}},
		{"ranks first but is no follower nor candidate", with(func(a *Asked) { a.Mine = 0; a.Follower = false }), Reply{Silent: time.Second, Agrees: true}},
	} {
		if got := dt.Answer(c.a); got != c.want {
			t.Errorf("%s: Answer = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name              string
		agree             int
		deferTo, standing bool
		sinceHeld         time.Duration
		heldFor           time.Duration
		want              Verdict
	}{
		{"no majority", 1, false, false, forever, 0, NoElection},
		{"no majority, an earlier one stands", 1, true, false, forever, 0, NoElection},
		{"no majority, a candidate stands", 1, true, true, forever, 0, NoElection},
		{"a majority", 2, false, false, forever, 0, Stand},
		{"a majority, an earlier-ranked node stands", 2, true, false, forever, 0, HoldBack},
		{"held back a moment ago: stands after all", 2, true, false, time.Second, time.Second, Stand},
		{"held back more than 2 × Detect ago", 3, true, false, 2*dt.Detect + 1, 0, HoldBack},
		{"a candidate stands: holds back again", 2, true, true, dt.Detect / 2, dt.Detect, HoldBack},
		{"a candidate stands, held back CandidateHold in a row: stands after all", 2, true, true, dt.Detect / 2, dt.CandidateHold(), Stand},
	} {
		if got := dt.Decide(c.agree, 2, c.deferTo, c.standing, c.sinceHeld, c.heldFor); got != c.want {
			t.Errorf("%s: Decide = %d, want %d", c.name, got, c.want)
		}
	}
}
