package driver

import (
	"slices"
	"testing"

	"github.com/fenced/fenced/stonith/fencing"
)

func TestLastFenceLevels(t *testing.T) {
	h := []fencing.Record{
		{Kind: fencing.KindFence, Target: "a", Outcome: fencing.OutcomeSuccess, Attempts: []fencing.Attempt{{Level: 3, Action: "off", Result: "success"}}},
		// Newest: level 1 had one PDU feed go off and the other fail; level 2 (BMC) succeeded.
		{Kind: fencing.KindFence, Target: "a", Outcome: fencing.OutcomeSuccess, Attempts: []fencing.Attempt{
			{Level: 1, Device: "pdu-a", Action: "off", Result: "success"},
			{Level: 1, Device: "pdu-b", Action: "off", Result: "failed"},
			{Level: 2, Device: "bmc", Action: "off", Result: "success"},
		}},
		{Kind: fencing.KindFence, Target: "b", Outcome: fencing.OutcomeSuccess, Attempts: []fencing.Attempt{{Level: 2, Action: "off", Result: "success"}}},
		{Kind: fencing.KindFence, Target: "a", Outcome: fencing.OutcomeFailed},
		// Level 1 did not answer; level 2 ran alongside and confirmed, and
		// level 1 was stopped: its off may have happened.
		{Kind: fencing.KindFence, Target: "d", Outcome: fencing.OutcomeSuccess, Attempts: []fencing.Attempt{
			{Level: 2, Device: "pdu", Action: "off", Result: "success"},
			{Level: 1, Device: "bmc", Action: "off", Result: "unknown"},
		}},
	}
	if got := LastFenceLevels(h, "a"); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("levels %v, want [1 2]", got)
	}
	if got := LastFenceLevels(h, "d"); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("levels run side by side: %v, want [1 2]", got)
	}
	if got := LastFenceLevels(h, "c"); got != nil {
		t.Errorf("never fenced: %v", got)
	}
}
