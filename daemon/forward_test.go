package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// Another node may have the leader commit only what it says about itself:
// its release, and a new record of its own unfencing at start.
func TestForwardable(t *testing.T) {
	own := func() *fencing.Record {
		return &fencing.Record{Kind: fencing.KindUnfence, Action: fencing.ActionOn, Target: "node2", Executor: "node2",
			Outcome: fencing.OutcomeSuccess, RequestedBy: "root@node1", Reason: "unfence\x1b[2J at start",
			Attempts: []fencing.Attempt{{Level: 1, Device: "scsi", Action: "on", Result: "success", Stderr: strings.Repeat("x", 10000)}}}
	}
	cases := []struct {
		name string
		mod  func(c *quorum.Command)
		ok   bool
	}{
		{"own release", func(c *quorum.Command) { *c = quorum.Command{Op: quorum.OpRelease, Node: "node2"} }, true},
		{"another's release", func(c *quorum.Command) { *c = quorum.Command{Op: quorum.OpRelease, Node: "node3"} }, false},
		{"own unclean mark", func(c *quorum.Command) {
			*c = quorum.Command{Op: quorum.OpUnclean, Node: "node2", Reason: "stop failed"}
		}, true},
		{"another's unclean mark", func(c *quorum.Command) { *c = quorum.Command{Op: quorum.OpUnclean, Node: "node3"} }, false},
		{"own unfence", func(c *quorum.Command) {}, true},
		{"own failed unfence", func(c *quorum.Command) { c.Record.Outcome = fencing.OutcomeFailed }, true},
		{"pending record", func(c *quorum.Command) { c.Record.Outcome = fencing.OutcomePending }, false},
		{"unfence of another node", func(c *quorum.Command) { c.Record.Target = "node3" }, false},
		{"run by another node", func(c *quorum.Command) { c.Record.Executor = "node1" }, false},
		{"a fence", func(c *quorum.Command) { c.Record.Kind, c.Record.Action = fencing.KindFence, fencing.ActionOff }, false},
		{"a fence of itself", func(c *quorum.Command) { c.Record.Kind = fencing.KindFence }, false},
		{"a confirmation", func(c *quorum.Command) { c.Record.Kind = fencing.KindConfirm }, false},
		{"an off", func(c *quorum.Command) { c.Record.Action = fencing.ActionOff }, false},
		{"overwriting a record", func(c *quorum.Command) { c.Record.ID = 3 }, false},
		{"no record", func(c *quorum.Command) { c.Record = nil }, false},
		{"too many attempts", func(c *quorum.Command) { c.Record.Attempts = make([]fencing.Attempt, 65) }, false},
		{"acquire", func(c *quorum.Command) { *c = quorum.Command{Op: quorum.OpAcquire, Node: "node2"} }, false},
		{"state", func(c *quorum.Command) {
			*c = quorum.Command{Op: quorum.OpState, Node: "node2", State: quorum.HolderMounted}
		}, false},
		{"standby", func(c *quorum.Command) { *c = quorum.Command{Op: quorum.OpStandby, Node: "node2"} }, false},
	}
	for _, tc := range cases {
		c := quorum.Command{Op: quorum.OpRecord, Record: own()}
		tc.mod(&c)
		if got := acceptForwarded(&c, "node2"); got != tc.ok {
			t.Errorf("%s: acceptForwarded = %v, want %v", tc.name, got, tc.ok)
		}
	}
	// What is accepted is cleaned and bounded, and says who asked.
	c := quorum.Command{Op: quorum.OpRecord, Record: own()}
	acceptForwarded(&c, "node2")
	if r := c.Record; r.RequestedBy != "node2 (start)" || strings.ContainsRune(r.Reason, '\x1b') || len(r.Attempts[0].Stderr) > maxForwardedText {
		t.Errorf("accepted record not cleaned: %+v", r)
	}
}

// A node's record of its own unfencing changes nothing the takeover gate
// reads: the node stays among those that may still run the storage.
func TestUnfenceRecordClearsNothing(t *testing.T) {
	f := quorum.NewFSM(10)
	apply := func(i uint64, c quorum.Command) any {
		b, _ := json.Marshal(c)
		return f.Apply(&raft.Log{Index: i, Data: b})
	}
	apply(1, quorum.Command{Op: quorum.OpAcquire, Node: "node2"})
	apply(2, quorum.Command{Op: quorum.OpState, Node: "node2", Epoch: 1, State: quorum.HolderMounting})
	rec := fencing.Record{Kind: fencing.KindUnfence, Action: fencing.ActionOn, Target: "node2", Executor: "node2", Outcome: fencing.OutcomeSuccess}
	c := quorum.Command{Op: quorum.OpRecord, Record: &rec}
	if !acceptForwarded(&c, "node2") {
		t.Fatal("own unfence refused")
	}
	if res := apply(3, c); res != uint64(1) {
		t.Fatalf("apply: %v", res)
	}
	st := f.State()
	if st.Unconfirmed["node2"] != 1 || st.HolderState != quorum.HolderMounting || len(st.History) != 1 || st.History[0].Kind != fencing.KindUnfence {
		t.Fatalf("state after an unfence record: %+v", st)
	}
}

// A node whose every fence level cuts only its storage, with no watchdog
// level, is warned of: no fence stops it if its stop fails and it cannot
// reset itself; one with a power level, or the watchdog level, is not.
func TestWarnStorageOnlyTopology(t *testing.T) {
	reg := agents.NewRegistry()
	reg.Register(agents.Kind{Name: "plain", New: func(agents.Params, *slog.Logger) (agents.Agent, error) { return plainAgent{}, nil }})
	reg.Register(agents.Kind{Name: "scsi", New: func(agents.Params, *slog.Logger) (agents.Agent, error) { return scsiAgent{}, nil }})
	cfg := config.Default()
	cfg.Devices = map[string]config.Device{"scsi": {Agent: "scsi"}, "bmc": {Agent: "plain"}, "zone": {Agent: "san"}}
	cfg.Watchdog.Device = "/dev/watchdog"
	cfg.Storage.Hooks = config.Hooks{Start: "/bin/true", Stop: "/bin/true"}
	level := func(devs ...string) config.Level {
		var l config.Level
		for _, d := range devs {
			l.Devices = append(l.Devices, config.DeviceRef{Device: d})
		}
		return l
	}
	cfg.Nodes = []config.Node{
		{Name: "a", Fence: []config.Level{level("scsi"), level("zone")}},
		{Name: "b", Fence: []config.Level{level("scsi"), level("bmc")}},
		{Name: "c", Fence: []config.Level{level("scsi"), {Watchdog: true}}},
	}
	ws := Warnings(cfg, reg).Error()
	if !strings.Contains(ws, "every fence level of a cuts only its storage") {
		t.Fatalf("no warning for a: %s", ws)
	}
	if strings.Contains(ws, "level of b") || strings.Contains(ws, "level of c") {
		t.Fatalf("warned of b or c: %s", ws)
	}
}

type plainAgent struct{}

func (plainAgent) Off(context.Context) error                    { return nil }
func (plainAgent) On(context.Context) error                     { return nil }
func (plainAgent) Reboot(context.Context) error                 { return nil }
func (plainAgent) Status(context.Context) (agents.State, error) { return agents.StateOn, nil }

type scsiAgent struct{ plainAgent }

func (scsiAgent) UnfenceAtStart() bool { return true }

// TestForwardableGroupCommands: the holder of a group other than the
// default one writes its own grant, states, renewals and handover through
// the leader; the default group's, another node's, and another node's
// handover are refused.
func TestForwardableGroupCommands(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    quorum.Command
		ok   bool
	}{
		{"its acquire", quorum.Command{Op: quorum.OpAcquire, Group: "g2", Node: "node2"}, true},
		{"its state", quorum.Command{Op: quorum.OpState, Group: "g2", Node: "node2", Epoch: 3, State: quorum.HolderMounting}, true},
		{"its renewal", quorum.Command{Op: quorum.OpRenew, Group: "g2", Node: "node2", Epoch: 3}, true},
		{"its handover", quorum.Command{Op: quorum.OpPlace, Group: "g2", Node: "node3", From: "node2"}, true},
		{"the default group's acquire", quorum.Command{Op: quorum.OpAcquire, Node: "node2"}, false},
		{"the default group's acquire, by name", quorum.Command{Op: quorum.OpAcquire, Group: quorum.DefaultGroup, Node: "node2"}, false},
		{"another node's acquire", quorum.Command{Op: quorum.OpAcquire, Group: "g2", Node: "node3"}, false},
		{"another node's renewal", quorum.Command{Op: quorum.OpRenew, Group: "g2", Node: "node3", Epoch: 3}, false},
		{"an unconditional placement", quorum.Command{Op: quorum.OpPlace, Group: "g2", Node: "node2"}, false},
		{"another node's handover", quorum.Command{Op: quorum.OpPlace, Group: "g2", Node: "node2", From: "node3"}, false},
	} {
		if got := acceptForwarded(&tc.c, "node2"); got != tc.ok {
			t.Errorf("%s: acceptForwarded = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// TestForwardAnswer: the leader's answer to a forwarded command comes back
// as its Apply returned it; no answer (a leader of an earlier version) is
// nil, a garbled one an error.
func TestForwardAnswer(t *testing.T) {
	g := quorum.Grant{Epoch: 7, Previous: "node1", LeaseOf: "node1", Unconfirmed: map[string]uint64{"node1": 6}}
	for _, res := range []any{g, uint64(42), nil} {
		got, err := decodeAnswer(encodeAnswer(res))
		if err != nil {
			t.Fatalf("%v: %v", res, err)
		}
		if gg, ok := got.(quorum.Grant); ok {
			if gg.Epoch != 7 || gg.Previous != "node1" || gg.Unconfirmed["node1"] != 6 {
				t.Fatalf("grant came back as %+v", gg)
			}
			continue
		}
		if got != res {
			t.Fatalf("%v came back as %v", res, got)
		}
	}
	if _, err := decodeAnswer([]byte("{")); err == nil || !strings.Contains(err.Error(), "the leader's answer") {
		t.Fatalf("garbled answer: %v", err)
	}
}

// TestFenceRunRefusal: a peer runs a fence handed on by the raft leader,
// or by the holder of a group other than the default one at its epoch;
// nothing else.
func TestFenceRunRefusal(t *testing.T) {
	req := func(group string, epoch uint64) driver.FenceRequest {
		return driver.FenceRequest{Target: "node3", Action: fencing.ActionOff, Executor: "node2", Epoch: epoch, ID: 9, Group: group}
	}
	g2 := quorum.Holders{Holder: "node4", Epoch: 5}
	for _, tc := range []struct {
		name, from string
		req        driver.FenceRequest
		group      quorum.Holders
		want       string // "" = runs it
	}{
		{"the leader's", "node1", req("", 3), quorum.Holders{Epoch: 3}, ""},
		{"an old epoch of the leader's", "node1", req("", 2), quorum.Holders{Epoch: 3}, "below epoch 3"},
		{"a follower's", "node4", req("", 3), quorum.Holders{Epoch: 3}, "does not lead"},
		{"a group holder's", "node4", req("g2", 5), g2, ""},
		{"a group's former holder's", "node4", req("g2", 4), g2, "neither leads the cluster as this node knows it"},
		{"another node's for the group", "node5", req("g2", 5), g2, "nor holds group g2 at epoch 5"},
		{"the leader's for the group", "node1", req("g2", 5), g2, ""},
		{"an unrecorded one", "node1", driver.FenceRequest{Target: "node3", Action: fencing.ActionOff, Executor: "node2", Epoch: 3}, quorum.Holders{Epoch: 3}, "not recorded"},
		{"a fence of itself", "node1", driver.FenceRequest{Target: "node2", Action: fencing.ActionOff, Executor: "node2", Epoch: 3, ID: 1}, quorum.Holders{Epoch: 3}, "never fences itself"},
	} {
		got := fenceRunRefusal(tc.req, tc.from, "node2", "node1", tc.group)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestWatchConfirmed: a fence handed on here ends once its target, listed
// when it began, is confirmed stopped (an admin's confirmation commits);
// one of a node not listed (an admin's fence) is never ended so.
func TestWatchConfirmed(t *testing.T) {
	f := quorum.NewFSM(10)
	i := uint64(0)
	apply := func(c quorum.Command) {
		i++
		b, _ := json.Marshal(c)
		if err, ok := f.Apply(&raft.Log{Index: i, Data: b}).(error); ok {
			t.Fatal(err)
		}
	}
	apply(quorum.Command{Op: quorum.OpAcquire, Node: "node2"})
	apply(quorum.Command{Op: quorum.OpState, Node: "node2", Epoch: 1, State: quorum.HolderMounting})
	apply(quorum.Command{Op: quorum.OpAcquire, Node: "node1"})
	req := driver.FenceRequest{Target: "node2", Action: fencing.ActionOff, Epoch: 2, ID: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan bool, 1)
	go func() { got <- watchConfirmed(ctx, f, req) }()
	// A change that leaves it listed ends nothing.
	apply(quorum.Command{Op: quorum.OpStandby, Node: "node3", Flag: true})
	select {
	case v := <-got:
		t.Fatalf("ended (%v) while node2 is still listed", v)
	case <-time.After(50 * time.Millisecond):
	}
	rec := fencing.Record{Kind: fencing.KindConfirm, Target: "node2", Outcome: fencing.OutcomeSuccess, Epoch: 2}
	apply(quorum.Command{Op: quorum.OpRecord, Record: &rec})
	if v := <-got; !v {
		t.Fatal("not ended by the confirmation")
	}
	// node3 is not listed: an admin's fence of it is not watched.
	short, stop := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer stop()
	if watchConfirmed(short, f, driver.FenceRequest{Target: "node3", Action: fencing.ActionOff}) {
		t.Fatal("a fence of a node not listed ended")
	}
}
