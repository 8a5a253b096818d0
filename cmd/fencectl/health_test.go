package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/api"
)

func fencingStatus(now time.Time) *api.Status {
	since := now.Add(-3*time.Minute - 10*time.Second)
	return &api.Status{
		SchemaVersion: 1, Cluster: "c", Node: "node1",
		Nodes: []api.NodeStatus{{Name: "node1"}, {Name: "node2"}, {Name: "node3"}, {Name: "node4"}},
		FencePaths: []api.FencePath{
			{Node: "node1", State: api.PathUnknown, Devices: []api.FencePathDevice{{Device: "node1-bmc", Level: 1, State: api.HealthUnmonitored}}},
			{Node: "node2", State: api.PathFailing, Devices: []api.FencePathDevice{
				{Device: "node2-bmc", Level: 1, State: api.HealthFailing, ErrorKind: "auth", Since: &since},
				{Device: "pdu-a", Level: 2, State: api.HealthOK},
				{Device: "pdu-b", Level: 2, State: api.HealthFailing, ErrorKind: "unreachable", Since: &since},
			}},
			{Node: "node3", State: api.PathWorking, Devices: []api.FencePathDevice{{Device: "node3-bmc", Level: 1, State: api.HealthOK}}},
			{Node: "node4", State: api.PathUnknown, Devices: []api.FencePathDevice{{Device: "node4-bmc", Level: 1, State: api.HealthPending}}},
		},
	}
}

// The warning names every device of the node's path and what is wrong
// with it; only nodes with no working path get one.
func TestFenceWarnings(t *testing.T) {
	now := time.Now()
	st := fencingStatus(now)
	got := fenceWarnings(st, now, true)
	want := "node2: no working fence path: node2-bmc auth failed 3m ago; pdu-a ok; pdu-b unreachable 3m ago"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("warnings %q, want [%q]", got, want)
	}
	if got := fenceWarnings(st, now, false); len(got) != 1 || strings.Contains(got[0], "ago") {
		t.Errorf("warnings without times: %q", got)
	}
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	if !strings.Contains(out, "Fencing:  "+want+"\n") {
		t.Errorf("status lacks the warning:\n%s", out)
	}
	for node, cellWant := range map[string]string{"node1": "not checked here", "node2": "NONE WORKING", "node3": "working", "node4": "unknown"} {
		if got := pathCell(st, node); got != cellWant {
			t.Errorf("%s: FENCE PATH %q, want %q", node, got, cellWant)
		}
	}
	// status --watch: a line of its own that does not change with time.
	_, lines := statusLines(st)
	if l := lines["fencing node2"]; !strings.HasPrefix(l, "fencing: node2: no working fence path: node2-bmc auth failed; pdu-a ok") {
		t.Errorf("watch line %q", l)
	}
	later := fencingStatus(now.Add(time.Hour))
	if ch := statusChanges(st, later); len(ch) != 0 {
		t.Errorf("watch reports changes when only time passed: %q", ch)
	}
}

func TestShortAgo(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 12 * time.Second: "12s", 3*time.Minute + 59*time.Second: "3m",
		5 * time.Hour: "5h", 47 * time.Hour: "47h", 72 * time.Hour: "3d",
	} {
		if got := shortAgo(d); got != want {
			t.Errorf("shortAgo(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestHealthCells(t *testing.T) {
	now := time.Now()
	last, since, checking := now.Add(-12*time.Second), now.Add(-5*time.Minute), now.Add(-20*time.Second)
	state, checked, latency, errText := healthCells(api.DeviceHealth{State: api.HealthFailing, ErrorKind: "unreachable", Error: "ipmi 10.0.0.2:623: connect: outcome unknown: i/o timeout\x1b[2J",
		LastCheck: &last, LatencyMillis: 2000.4, Since: &since, CheckingSince: &checking}, now)
	if state != "FAILING (unreachable) for 5m" || checked != "12s ago (checking for 20s)" || latency != "2s" || strings.ContainsRune(errText, '\x1b') {
		t.Errorf("cells %q %q %q %q", state, checked, latency, errText)
	}
	if state, checked, _, _ := healthCells(api.DeviceHealth{State: api.HealthUnmonitored}, now); state != "not checked here" || checked != "-" {
		t.Errorf("unmonitored: %q %q", state, checked)
	}
	if state, _, _, errText := healthCells(api.DeviceHealth{State: api.HealthOK, Session: "held", Note: "BMC has no free session slot: checked on the held session"}, now); state != "ok (session held)" || errText != "BMC has no free session slot: checked on the held session" {
		t.Errorf("held, no free slot: %q %q", state, errText)
	}
}
