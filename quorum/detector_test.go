package quorum

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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

// A follower asked by a later-ranked one whether the leader is silent,
// when it finds it silent too, agrees and says it will stand itself (the
// asker then holds back); asked by an earlier-ranked one, it agrees and
// holds back its own candidacy instead.
func TestSilenceAnswerDefersToEarlierRank(t *testing.T) {
	const lease = 6 * time.Second // raft's own timeout (2s) stays out of the way
	nodes, trans := inmemCluster(t, 3, lease)
	all := []string{"a", "b", "c"}
	leader := waitLeader(t, nodes, all, "")
	var first, second string
	for _, n := range all {
		switch {
		case n == leader:
		case first == "":
			first = n
		default:
			second = n
		}
	}
	order := func(string) []string { return []string{first, second} }
	det := func(n string) *Detector {
		return &Detector{r: nodes[n], log: slog.New(slog.DiscardHandler), beacon: map[string]time.Time{},
			opts: DetectorOptions{Detect: 100 * time.Millisecond, Stagger: 10 * time.Millisecond, Order: order, Majority: 2}}
	}
	df, ds := det(first), det(second)
	ask := func(d *Detector, rank int) silenceResp {
		t.Helper()
		body, _ := json.Marshal(silenceReq{Leader: leader, Rank: rank})
		out, err := d.answer("asker", body)
		if err != nil {
			t.Fatal(err)
		}
		var r silenceResp
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// While the leader speaks: not silent, nobody defers or holds.
	if r := ask(df, 1); r.Defer || time.Duration(r.SilentNs) >= df.agreeAt() {
		t.Fatalf("leader alive: answer %+v", r)
	}
	for _, n := range all {
		if n != leader {
			trans[leader].Disconnect(raft.ServerAddress(n))
			trans[n].Disconnect(raft.ServerAddress(leader))
		}
	}
	time.Sleep(150 * time.Millisecond)
	if r := ask(df, 1); !r.Defer || time.Duration(r.SilentNs) < df.agreeAt() {
		t.Fatalf("rank 0 asked by rank 1 about a silent leader: answer %+v, want agreement and Defer", r)
	}
	if r := ask(ds, 0); r.Defer || time.Duration(r.SilentNs) < ds.agreeAt() {
		t.Fatalf("rank 1 asked by rank 0 about a silent leader: answer %+v, want agreement without Defer", r)
	}
	if !time.Now().Before(ds.holdUntil()) {
		t.Fatal("rank 1 asked by rank 0 does not hold back its own candidacy")
	}
}
