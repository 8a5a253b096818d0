package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/api/timeline"
	"github.com/fenced/fenced/stonith/fencing"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{"10m", now.Add(-10 * time.Minute), ""},
		{"1h30m", now.Add(-90 * time.Minute), ""},
		{"1500ms", now.Add(-1500 * time.Millisecond), ""},
		{"3d", now.Add(-72 * time.Hour), ""},
		{"0s", now, ""},
		{"2026-12-01T22:00:00Z", time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC), ""},
		{"2026-12-02T03:00:00.250+01:00", time.Date(2026, 12, 2, 2, 0, 0, 250e6, time.UTC), ""},
		{"-5m", time.Time{}, "must not be negative"},
		{"yesterday", time.Time{}, `--since "yesterday": want a duration back from now`},
		{"2026-12-02", time.Time{}, "or an RFC 3339 time"},
		{"d", time.Time{}, "want a duration"},
		{"99999999d", time.Time{}, "want a duration"},
		{"", time.Time{}, "want a duration"},
	}
	for _, tc := range cases {
		got, err := parseSince(tc.in, now)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseSince(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || !got.Equal(tc.want)):
			t.Errorf("parseSince(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestHistoryFilter(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	ago := func(m int) time.Time { return now.Add(-time.Duration(m) * time.Minute) }
	recs := []fencing.Record{
		{ID: 1, Kind: fencing.KindFence, Target: "node1", Started: ago(60), Finished: ago(59), Outcome: "success"},
		{ID: 2, Kind: fencing.KindElection, Target: "node2", Started: ago(30), Finished: ago(30), Outcome: "success"},
		{ID: 3, Kind: fencing.KindPrimacy, Target: "node2", Started: ago(30), Finished: ago(29), Outcome: "success"},
		{ID: 4, Kind: fencing.KindFence, Target: "node3", Started: ago(20), Outcome: "pending", Runs: 4},
		{ID: 5, Kind: fencing.KindRelease, Target: "node2", Started: ago(5), Finished: ago(5), Outcome: "success"},
		{ID: 6, Kind: fencing.KindFence, Target: "node1", Started: ago(12), Finished: ago(8), Outcome: "failed"},
	}
	cases := []struct {
		since   string
		kinds   []string
		node    string
		want    string // IDs kept
		wantErr string
	}{
		{"", nil, "", "[1 2 3 4 5 6]", ""},
		{"10m", nil, "", "[4 5 6]", ""}, // 4 is still pending; 6 finished after
		{"25m", []string{"fence"}, "", "[4 6]", ""},
		{"", []string{"election,primacy"}, "", "[2 3]", ""},
		{"", []string{"Election", " release"}, "", "[2 5]", ""},
		{"", nil, "node2", "[2 3 5]", ""},
		{"1h", []string{"fence"}, "node1", "[1 6]", ""},
		{"", []string{"fence", "lease-expiry", "watchdog", "confirm", "unfence"}, "node9", "[]", ""},
		{"", []string{"fenc"}, "", "", `--kind "fenc": no such kind of record; want one of fence, unfence`},
		{"", []string{"fence,"}, "", "", `--kind "": no such kind`},
		{"soon", nil, "", "", `--since "soon"`},
	}
	for _, tc := range cases {
		f, err := newHistoryFilter(tc.since, tc.kinds, now)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("since %q kinds %q: error %v, want %q", tc.since, tc.kinds, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("since %q kinds %q: %v", tc.since, tc.kinds, err)
			continue
		}
		var ids []uint64
		for _, r := range f.apply(recs, tc.node) {
			ids = append(ids, r.ID)
		}
		if got := fmt.Sprint(ids); got != tc.want && !(tc.want == "[]" && ids == nil) {
			t.Errorf("since %q kinds %q node %q: kept %s, want %s", tc.since, tc.kinds, tc.node, got, tc.want)
		}
	}
}

func TestKeepFailover(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	fo := timeline.Failover{Epoch: 4, From: "node1", To: "node2", Start: now.Add(-time.Hour),
		Phases: []timeline.Phase{{Name: "fence", Node: "node3", Start: now.Add(-time.Hour), End: now.Add(-59 * time.Minute)}}}
	cases := []struct {
		since, node string
		want        bool
	}{
		{"", "", true},
		{"2h", "", true},
		{"30m", "", false}, // it ended before
		{"", "node1", true},
		{"", "node3", true}, // fenced in it
		{"", "node4", false},
	}
	for _, tc := range cases {
		f, err := newHistoryFilter(tc.since, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.keepFailover(fo, tc.node); got != tc.want {
			t.Errorf("since %q node %q: %v, want %v", tc.since, tc.node, got, tc.want)
		}
	}
}

// Bad flags are usage errors naming the flag, before the daemon is asked.
func TestHistoryUsageErrors(t *testing.T) {
	sock := t.TempDir() + "/none.sock"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"history", "--since", "tomorrow"}, `--since "tomorrow"`},
		{[]string{"history", "--kind", "fencing"}, `--kind "fencing"`},
		{[]string{"history", "--timeline", "--kind", "fence"}, "--kind: not with --timeline"},
		{[]string{"history", "--timeline", "--last", "0"}, "--last 0: must be at least 1"},
		{[]string{"history", "--last", "2"}, "--last: only with --timeline"},
	}
	for _, tc := range cases {
		code, _, stderr := ctl(append([]string{"--socket", sock}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

// The published schemas take the records of every kind and the timeline,
// as fencectl prints them (the cluster test checks real output too).
func TestHistorySchemas(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	at := func(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }
	recs := []fencing.Record{
		{ID: 1, Kind: fencing.KindElection, Target: "node2", Term: 9, Previous: "node1", LastContact: at(0), Started: at(1500), Finished: at(1520),
			Outcome: "success", Runs: 2, Epoch: 3, RequestedBy: "node2", Executor: "node2", Reason: "won term 9"},
		{ID: 2, Kind: fencing.KindPrimacy, Target: "node2", Epoch: 4, Previous: "node1", Started: at(1530), Finished: at(1700), Outcome: "success",
			Steps: []fencing.Step{{Phase: "fencing", At: at(1531)}, {Phase: "mounting", At: at(1600)}, {Phase: "serving", At: at(1700)},
				{Phase: "demoting", At: at(9000), Reason: "lease lost"}}},
		{ID: 3, Kind: fencing.KindFence, Target: "node1", Action: "off", Epoch: 4, RequestedBy: "node2 (takeover)", Executor: "node2", Started: at(1532),
			Finished: at(1590), Outcome: "success", Runs: 2, Attempts: []fencing.Attempt{{Level: 1, Device: "node1-bmc", Agent: "ipmi", Action: "off", Try: 1,
				Result: "success", ReadBack: "off", Duration: 45 * time.Millisecond}}},
		{ID: 4, Kind: fencing.KindExpiry, Target: "node3", Epoch: 4, Started: at(1600), Finished: at(1600), Outcome: "success"},
	}
	b, err := json.Marshal(api.History{SchemaVersion: api.SchemaVersion, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "history.json", string(b))
	b, err = json.Marshal(Timeline{SchemaVersion: api.SchemaVersion, Failovers: timeline.Build(recs, at(10000), 0)})
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "timeline.json", string(b))
	if !strings.Contains(string(b), `"name":"fence"`) {
		t.Errorf("the timeline has no fence phase: %s", b)
	}
}
