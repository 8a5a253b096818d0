package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
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
