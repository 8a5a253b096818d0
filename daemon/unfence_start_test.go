package daemon_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// agentRun is one line of testdata/fence_ontarget's log.
type agentRun struct {
	at     time.Time
	action string
	plug   string
	ppid   int
}

func agentRuns(t *testing.T, dir string) []agentRun {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []agentRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			continue
		}
		sec, err := strconv.ParseFloat(fs[0], 64)
		if err != nil {
			continue
		}
		ppid, _ := strconv.Atoi(strings.TrimPrefix(fs[3], "ppid="))
		out = append(out, agentRun{at: time.Unix(0, int64(sec*1e9)), action: fs[1], plug: strings.TrimPrefix(fs[2], "plug="), ppid: ppid})
	}
	return out
}

// TestUnfenceAtStart (issue 12, part 5): every node's topology has a
// reservation-style device whose metadata says its "on" runs on the node
// itself (on_target, automatic). Each node runs it for itself when it
// starts — its own process, its own plug — and before it is ever primary.
// A node whose unfence fails stays ineligible, says why, and retries: with
// every other node in standby there is then no primary at all, until the
// device is fixed and the node unfences itself and takes over. The history
// records each unfence, committed through the leader.
func TestUnfenceAtStart(t *testing.T) {
	agent, err := filepath.Abs("testdata/fence_ontarget")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	// node1's registration fails until the file goes.
	failFile := filepath.Join(state, "fail-node1")
	if err := os.WriteFile(failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, devcluster.Options{Nodes: 3, Configure: func(cfg *config.Config) {
		cfg.Devices = map[string]config.Device{"scsi": {Agent: "exec", Params: map[string]string{"agent": agent, "state_dir": state}}}
		for i := range cfg.Nodes {
			cfg.Nodes[i].Fence = []config.Level{{Devices: []config.DeviceRef{{Device: "scsi", Plug: cfg.Nodes[i].Name}}}}
		}
	}})
	watchSafety(t, c)
	node1 := c.Nodes[0]

	p, e1, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if p == node1 {
		t.Fatalf("%s became primary with its unfence failing", p.Name)
	}
	// Each of the others unfenced itself: the run that registered nodeK's
	// key was made by nodeK's own process.
	pids := map[int]string{}
	for _, n := range c.Nodes {
		pids[n.Pid()] = n.Name
	}
	waitUntil(t, "node2 and node3 unfenced", 20*time.Second, func() bool {
		ok := map[string]bool{}
		for _, r := range agentRuns(t, state) {
			if r.action == "on" && pids[r.ppid] == r.plug {
				ok[r.plug] = true
			}
		}
		return ok["node2"] && ok["node3"]
	})
	for _, r := range agentRuns(t, state) {
		if r.action == "on" && pids[r.ppid] != r.plug {
			t.Errorf("on for %s run by %s's process (pid %d)", r.plug, pids[r.ppid], r.ppid)
		}
	}
	// Unfenced before it was ever primary: the primary's own log says
	// so, in order.
	unfenced := logTimes(p.Log, time.Time{}, "unfenced at start")
	elected := logTimes(p.Log, time.Time{}, "elected: epoch granted")
	if len(unfenced) == 0 || len(elected) == 0 || !unfenced[0].Before(elected[0]) {
		t.Fatalf("%s: unfenced at %v, elected at %v", p.Name, unfenced, elected)
	}
	var onAt time.Time
	for _, r := range agentRuns(t, state) {
		if r.action == "on" && r.plug == p.Name && onAt.IsZero() {
			onAt = r.at
		}
	}
	if onAt.IsZero() || !onAt.Before(elected[0]) {
		t.Fatalf("%s's on ran at %v, its first election at %v", p.Name, onAt, elected[0])
	}

	// node1: ineligible, with the device's error, and retrying.
	waitUntil(t, "node1 to report its unfence failure", 20*time.Second, func() bool {
		st, err := node1.Status(context.Background())
		return err == nil && strings.Contains(st.Self.Ineligible, "unfence: unfencing this node failed (try 2") &&
			strings.Contains(st.Self.Ineligible, "reservation conflict registering the key of node1")
	})
	// Everyone else in standby: node1 is the only candidate, and still may
	// not be primary.
	cl := p.Client()
	defer cl.Close()
	for _, n := range c.Nodes[1:] {
		if err := cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/standby", nil, daemon.AdminRequest{Node: n.Name, Flag: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the primary to hand over", 20*time.Second, func() bool {
		for _, n := range c.Nodes {
			if st, err := n.Status(context.Background()); err == nil && st.Self.Acting {
				return false
			}
		}
		return true
	})
	for range 20 {
		if st, err := node1.Status(context.Background()); err == nil && (st.Self.Acting || st.Self.Epoch != 0) {
			t.Fatalf("%s holds epoch %d while its unfence fails", node1.Name, st.Self.Epoch)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Fixed: at its next try node1 registers its key, becomes eligible,
	// and, the only candidate, primary.
	if err := os.Remove(failFile); err != nil {
		t.Fatal(err)
	}
	q, e2, err := c.Primary(ctxT(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if q != node1 || e2 <= e1 {
		t.Fatalf("primary %s at epoch %d, want %s above %d", q.Name, e2, node1.Name, e1)
	}
	st, err := node1.Status(context.Background())
	if err != nil || st.Self.Ineligible != "" {
		t.Fatalf("node1 still ineligible: %q %v", st.Self.Ineligible, err)
	}
	if _, err := os.Stat(filepath.Join(state, "registered-node1")); err != nil {
		t.Fatalf("node1's key not registered: %v", err)
	}

	// The history: each node's unfence of itself, run by itself; node1's
	// first failure and its success, nothing in between.
	recs := map[string][]fencing.Record{}
	waitUntil(t, "the unfence records", 10*time.Second, func() bool {
		recs = map[string][]fencing.Record{}
		for _, r := range history(t, q, "") {
			if r.Kind == fencing.KindUnfence {
				recs[r.Target] = append(recs[r.Target], r)
			}
		}
		return len(recs["node1"]) == 2 && len(recs["node2"]) == 1 && len(recs["node3"]) == 1
	})
	for node, rs := range recs {
		for _, r := range rs {
			if r.Executor != node || r.Action != fencing.ActionOn || r.RequestedBy != node+" (start)" || len(r.Attempts) == 0 || r.Attempts[0].Device != "scsi" {
				t.Errorf("unfence record of %s: %+v", node, r)
			}
		}
	}
	if r := recs["node1"]; r[0].Outcome == fencing.OutcomeSuccess || !strings.Contains(r[0].Error, "reservation conflict") || r[1].Outcome != fencing.OutcomeSuccess {
		t.Errorf("node1's records: %+v", r)
	}
}

func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
	}
}

// TestUnfenceWaitsForRebootOrConsent (issue 21, item 1): the primary's
// daemon dies and leaves its writer running; the successor fences it at
// the storage level (the reservation-style device: its key removed) and
// takes over. When the daemon starts again on the same boot, it must not
// unfence itself — that would give the storage back to whatever of the
// group still runs there — until an admin runs fencectl unfence; then it
// does, after its probe stopped the leftover writer.
func TestUnfenceWaitsForRebootOrConsent(t *testing.T) {
	agent, err := filepath.Abs("testdata/fence_ontarget")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	c := startCluster(t, devcluster.Options{Nodes: 3, Store: true, Configure: func(cfg *config.Config) {
		cfg.Devices = map[string]config.Device{"scsi": {Agent: "exec", Params: map[string]string{"agent": agent, "state_dir": state}}}
		for i := range cfg.Nodes {
			cfg.Nodes[i].Fence = []config.Level{{Devices: []config.DeviceRef{{Device: "scsi", Plug: cfg.Nodes[i].Name}}}}
		}
	}})
	p, e1 := primaryWriting(t, c)
	registered := filepath.Join(state, "registered-"+p.Name)
	if _, err := os.Stat(registered); err != nil {
		t.Fatalf("the primary %s is not registered: %v", p.Name, err)
	}
	// Its daemon dies; its writer goes on (a crashed daemon's application).
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.Wait(5 * time.Second)
	q, e2 := successorWriting(t, c, p, e1)
	rec, ok := recordOf(t, q, p.Name, fencing.KindFence)
	if !ok || rec.Scope != fencing.ScopeStorage || rec.TargetBoot == "" {
		t.Fatalf("the fence of %s: %+v (want a storage-level fence that records its boot)", p.Name, rec)
	}
	if _, err := os.Stat(registered); !os.IsNotExist(err) {
		t.Fatalf("%s still registered after its fence: %v", p.Name, err)
	}

	// The daemon starts again, same boot: no unfence.
	restarted := time.Now()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, p.Name+" to say why it does not unfence", 20*time.Second, func() bool {
		st, err := p.Status(context.Background())
		return err == nil && strings.Contains(st.Self.Ineligible, "during this boot") && strings.Contains(st.Self.Ineligible, "fencectl unfence "+p.Name)
	})
	time.Sleep(2 * testTiming.Lease.D())
	ownOn := func() bool {
		for _, r := range agentRuns(t, state) {
			if r.action == "on" && r.plug == p.Name && r.ppid == p.Pid() && r.at.After(restarted) {
				return true
			}
		}
		return false
	}
	if ownOn() {
		t.Fatalf("%s unfenced itself in the boot it was fenced in", p.Name)
	}
	if _, err := os.Stat(registered); !os.IsNotExist(err) {
		t.Fatalf("%s registered again without consent: %v", p.Name, err)
	}
	// Its probe stopped the leftover writer meanwhile.
	if st, _ := p.Status(context.Background()); strings.Contains(st.Self.Ineligible, "resources:") {
		t.Fatalf("probe not done: %q", st.Self.Ineligible)
	}

	// The admin consents: it unfences itself, through its own process.
	cl := q.Client()
	defer cl.Close()
	var unf fencing.Record
	if err := cl.Do(ctxT(t, 60*time.Second), "POST", "/v1/unfence", nil, daemon.AdminRequest{Node: p.Name, Reason: "checked: nothing runs there"}, &unf); err != nil {
		t.Fatalf("fencectl unfence: %v", err)
	}
	waitUntil(t, p.Name+" to unfence itself after the consent", 20*time.Second, ownOn)
	waitUntil(t, p.Name+" eligible", 20*time.Second, func() bool {
		st, err := p.Status(context.Background())
		return err == nil && st.Self.Ineligible == ""
	})
	if _, err := c.WaitWrite(ctxT(t, time.Second), q.Name, e2); err != nil {
		t.Fatal(err)
	}
}

// TestSelfFenceWithoutResetNeedsPower (issue 21, item 1): the primary's
// stop fails on a handover and it has no way to reset itself (no watchdog,
// no sysrq): it is never released, says so in the replicated state
// (unclean), and exits. Its first fence level cuts only its storage,
// which would leave the rest of the group running there, so the successor
// takes over only through the level that removes its power.
func TestSelfFenceWithoutResetNeedsPower(t *testing.T) {
	agent, err := filepath.Abs("testdata/fence_ontarget")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	c := startCluster(t, devcluster.Options{Nodes: 3, Store: true, BMC: true, Configure: func(cfg *config.Config) {
		cfg.Devices["scsi"] = config.Device{Agent: "exec", Params: map[string]string{"agent": agent, "state_dir": state}}
		for i := range cfg.Nodes {
			bmc := cfg.Nodes[i].Fence[0]
			cfg.Nodes[i].Fence = []config.Level{{Devices: []config.DeviceRef{{Device: "scsi", Plug: cfg.Nodes[i].Name}}}, bmc}
		}
		// A stop that fails while STATE_DIR/fail-stop-NODE exists.
		stop := filepath.Join(state, "stop")
		script := "#!/bin/sh\n[ -e " + state + "/fail-stop-$FENCED_NODE ] && { echo 'umount: target is busy' >&2; exit 1; }\nexec " + cfg.Storage.Hooks.Stop + "\n"
		if err := os.WriteFile(stop, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg.Storage.Hooks.Stop = stop
	}})
	p, e1 := primaryWriting(t, c)
	if err := os.WriteFile(filepath.Join(state, "fail-stop-"+p.Name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cl := p.Client()
	defer cl.Close()
	if err := cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/transfer", nil, daemon.AdminRequest{}, nil); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	q, _ := successorWriting(t, c, p, e1)
	if got := logTimes(p.Log, time.Time{}, "SELF-FENCE IMPOSSIBLE"); len(got) == 0 {
		t.Fatalf("%s's log does not say it could not reset itself", p.Name)
	}
	if got := logTimes(p.Log, time.Time{}, "asking the leader to fence it (power levels only)"); len(got) == 0 {
		t.Fatalf("%s did not mark itself unclean", p.Name)
	}
	rec, ok := recordOf(t, q, p.Name, fencing.KindFence)
	if !ok {
		t.Fatalf("no confirmed fence of %s: %+v", p.Name, history(t, q, p.Name))
	}
	for _, a := range rec.Attempts {
		if a.Device == "scsi" {
			t.Fatalf("%s was fenced through its storage level: %+v", p.Name, rec)
		}
	}
	if rec.Scope != "" || len(rec.Attempts) == 0 || rec.Attempts[len(rec.Attempts)-1].Device != p.Name+"-bmc" {
		t.Fatalf("not confirmed by its power level: %+v", rec)
	}
}

// TestProbeLeftoverIsFencedByTheHolder (issue 21, item 1): a node whose
// daemon died holding the storage left its writer running, and an admin
// confirmed it down by mistake, so a successor took over. When its daemon
// starts again, its probe finds the writer and cannot stop it: it says so
// in the replicated state (unclean), and the holder, which keeps serving,
// fences it through its power level.
func TestProbeLeftoverIsFencedByTheHolder(t *testing.T) {
	state := t.TempDir()
	var powerOffs atomic.Int32
	c := startCluster(t, devcluster.Options{Nodes: 3, Store: true, BMC: true, PowerOff: func(int) { powerOffs.Add(1) }, Configure: func(cfg *config.Config) {
		// While STATE_DIR/stuck-NODE exists, something of the group runs
		// there that cannot be stopped: the monitor says running, the
		// stop fails.
		stuck := "[ -e " + state + "/stuck-$FENCED_NODE ]"
		stop, monitor := filepath.Join(state, "stop"), filepath.Join(state, "monitor")
		for path, script := range map[string]string{
			stop:    "#!/bin/sh\n" + stuck + " && { echo 'umount: target is busy' >&2; exit 1; }\nexec " + cfg.Storage.Hooks.Stop + "\n",
			monitor: "#!/bin/sh\n" + stuck + " && exit 0\nexec " + cfg.Storage.Hooks.Monitor + "\n",
		} {
			if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cfg.Storage.Hooks.Stop, cfg.Storage.Hooks.Monitor = stop, monitor
	}})
	p, e1 := primaryWriting(t, c)
	if err := os.WriteFile(filepath.Join(state, "stuck-"+p.Name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.BMCs[p.Index].SetSilent(true)
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.Wait(5 * time.Second)
	other := c.Other(p)
	waitBlocked(t, other)
	confirmDown(t, other, p, "mistaken: its writer still runs")
	q, e2 := successorWriting(t, c, p, e1)
	// The takeover's fence may still be in flight when the confirmation
	// lands; the confirmation cancels it, and its power-off is never sent
	// again (this test found a cancelled power-off resent once the BMC
	// answered again: it powered the restarted node off, unrecorded, so
	// that the fence this test is about never came).
	waitUntil(t, "the blocked takeover's fence of "+p.Name+" to end", 20*time.Second, func() bool {
		for _, r := range history(t, q, p.Name) {
			if r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomePending {
				return false
			}
		}
		return true
	})

	c.BMCs[p.Index].SetSilent(false)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the holder to fence "+p.Name, 30*time.Second, func() bool {
		for _, r := range history(t, q, p.Name) {
			// Asked for by the holder; run by it, or by a peer it handed the
			// fence to (its own path to the BMC failed while it was silent).
			if r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomeSuccess && strings.HasPrefix(r.RequestedBy, q.Name) &&
				strings.Contains(r.Reason, "may run the group beside its holder") {
				return true
			}
		}
		return false
	})
	if got := logTimes(p.Log, time.Time{}, "asking the leader to fence this node"); len(got) == 0 {
		t.Fatalf("%s's probe did not escalate", p.Name)
	}
	// The holder kept serving throughout: same epoch, still writing.
	st, err := q.Status(ctxT(t, 5*time.Second))
	if err != nil || !st.Self.Acting || st.Self.Epoch != e2 {
		t.Fatalf("the holder after the fence: %+v %v", st.Self, err)
	}
	// Powered off once, by that recorded fence (the cancelled one never
	// reached the BMC).
	if n := powerOffs.Load(); n != 1 {
		t.Fatalf("%s was powered off %d times; want once, by the holder's fence", p.Name, n)
	}
}
