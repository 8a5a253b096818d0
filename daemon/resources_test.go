package daemon_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

const ocfRoot = "/usr/lib/ocf"

func needOCF(t testing.TB, agents ...string) {
	t.Helper()
	for _, a := range agents {
		if _, err := os.Stat(filepath.Join(ocfRoot, "resource.d", "heartbeat", a)); err != nil {
			t.Fatalf("OCF agent heartbeat:%s not installed (apt-get install resource-agents; make test does): %v", a, err)
		}
	}
}

// resourcesOf asks node n for its resource group.
func resourcesOf(ctx context.Context, n *devcluster.Node) (api.ResourceList, error) {
	cl := n.Client()
	defer cl.Close()
	var l api.ResourceList
	err := cl.Do(ctx, "GET", "/v1/resources", nil, nil, &l)
	return l, err
}

// waitRunning waits until every resource of n's group reads "running".
func waitRunning(ctx context.Context, n *devcluster.Node) error {
	for {
		l, err := resourcesOf(ctx, n)
		running := err == nil && len(l.Resources) > 0
		for _, r := range l.Resources {
			running = running && r.State == "running"
		}
		if running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: resources not all running (%+v, %v): %w", n.Name, l.Resources, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logOrder returns, in order, the resource= values of n's log lines with msg.
func logOrder(t *testing.T, n *devcluster.Node, msg string, since time.Time) []string {
	t.Helper()
	b, _ := os.ReadFile(n.Log)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "msg=\""+msg+"\"") {
			continue
		}
		if m := reLogTime.FindStringSubmatch(line); m != nil {
			if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && ts.Before(since) {
				continue
			}
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "resource="); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// TestResourceGroupDummyCluster runs a group of three real
// ocf:heartbeat:Dummy agents on three fenced processes: they start in
// order on the primary only; a monitor failure (r2's state vanishes)
// stops them in reverse, releases and moves primacy without a fence; a
// node where r2 cannot start (its state directory is gone), handed
// primacy, stops r2 and r1 again, releases, and primacy moves on.
func TestResourceGroupDummyCluster(t *testing.T) {
	needOCF(t, "Dummy")
	dir := t.TempDir()
	// Every node keeps its state files apart (one machine here); r2's
	// lives in a directory of its own, so that removing it makes r2's
	// start fail on that node.
	state := func(node, r string) string {
		if r == "r2" {
			return filepath.Join(dir, node, "r2", "r2.state")
		}
		return filepath.Join(dir, node, r+".state")
	}
	metricsAt := map[int]string{}
	for i := range 3 {
		port, err := devcluster.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		metricsAt[i] = "127.0.0.1:" + strconv.Itoa(port)
	}
	c := startCluster(t, devcluster.Options{Nodes: 3, Dir: dir, BMC: true,
		Configure: func(cfg *config.Config) {
			for _, r := range []string{"r1", "r2", "r3"} {
				cfg.Resources = append(cfg.Resources, config.Resource{Name: r, OCF: "heartbeat:Dummy",
					MonitorInterval: ms(200)})
			}
		},
		NodeConfig: func(i int, cfg *config.Config) {
			os.MkdirAll(filepath.Dir(state(cfg.Node, "r2")), 0o755)
			rs := slices.Clone(cfg.Resources)
			for k := range rs {
				rs[k].NodeParams = map[string]string{"state": state(cfg.Node, rs[k].Name)}
			}
			cfg.Resources = rs
			cfg.Metrics.Listen = metricsAt[i]
		},
	})
	watchSafety(t, c)
	running := func(node string) []string {
		var out []string
		for _, r := range []string{"r1", "r2", "r3"} {
			if _, err := os.Stat(state(node, r)); err == nil {
				out = append(out, r)
			}
		}
		return out
	}
	onlyOn := func(p *devcluster.Node) {
		t.Helper()
		for _, n := range c.Nodes {
			want := []string(nil)
			if n == p {
				want = []string{"r1", "r2", "r3"}
			}
			if got := running(n.Name); !slices.Equal(got, want) {
				t.Errorf("%s runs %v, want %v", n.Name, got, want)
			}
		}
	}

	// A primary with the group running.
	p, e1, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctxT(t, 10*time.Second), p); err != nil {
		t.Fatal(err)
	}
	if got := logOrder(t, p, "resource started", time.Time{}); !slices.Equal(got[len(got)-3:], []string{"r1", "r2", "r3"}) {
		t.Errorf("%s start order %v", p.Name, got)
	}
	onlyOn(p)
	time.Sleep(500 * time.Millisecond)
	l, err := resourcesOf(ctxT(t, time.Second), p)
	if err != nil || len(l.Resources) != 3 || l.Resources[1].LastMonitor == nil || l.Resources[1].LastResult != "ok" || l.Resources[1].Kind != "ocf:heartbeat:Dummy" {
		t.Errorf("resource list on the primary: %+v %v", l, err)
	}

	resp, err := http.Get("http://" + metricsAt[p.Index] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`fenced_resource_state{kind="ocf:heartbeat:Dummy",resource="r2",state="running"} 1`,
		`fenced_resource_state{kind="ocf:heartbeat:Dummy",resource="r2",state="failed"} 0`,
		`fenced_resource_failures_total{resource="r3"} 0`,
		`fenced_resource_last_monitor_duration_seconds{resource="r1"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// Monitor failure: r2's state file vanishes on the primary.
	failAt := time.Now()
	os.Remove(state(p.Name, "r2"))
	q, e2, err := c.Primary(ctxT(t, 30*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctxT(t, 10*time.Second), q); err != nil {
		t.Fatal(err)
	}
	t.Logf("monitor failure on %s: %s took over at epoch %d after %s", p.Name, q.Name, e2, time.Since(failAt).Round(time.Millisecond))
	if e2 <= e1 {
		t.Errorf("epoch %d not above %d", e2, e1)
	}
	if got := logOrder(t, p, "resource stopped", failAt); !slices.Equal(got, []string{"r3", "r2", "r1"}) {
		t.Errorf("%s stop order after the monitor failure %v", p.Name, got)
	}
	onlyOn(q)
	released := false
	for _, r := range history(t, q, p.Name) {
		released = released || r.Kind == fencing.KindRelease && r.Epoch == e1 && strings.Contains(r.Reason, "resource r2 monitor")
	}
	if !released {
		t.Errorf("no release of epoch %d for r2's monitor failure in %s's history", e1, p.Name)
	}

	// Start failure in the middle: r2 cannot start on another node any
	// more; hand primacy to it.
	victim := c.Other(q, p) // not the node whose monitor just failed: it may hold back a while
	transferAt := time.Now()
	os.RemoveAll(filepath.Dir(state(victim.Name, "r2")))
	cl := q.Client()
	err = cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/transfer", nil, daemon.AdminRequest{Node: victim.Name}, nil)
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var failed []string
	for len(failed) == 0 && time.Now().Before(deadline) {
		failed = logOrder(t, victim, "resource start failed: stopping the ones started before it", transferAt)
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(failed, []string{"r2"}) {
		t.Fatalf("%s start failures %v, want [r2]", victim.Name, failed)
	}
	r, e3, err := c.Primary(ctxT(t, 30*time.Second), victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctxT(t, 10*time.Second), r); err != nil {
		t.Fatal(err)
	}
	if got := logOrder(t, victim, "resource stopped", transferAt); !slices.Equal(got, []string{"r2", "r1"}) {
		t.Errorf("%s stopped %v after its failed start, want [r2 r1]", victim.Name, got)
	}
	onlyOn(r)
	startReleased := false
	for _, rec := range history(t, r, victim.Name) {
		startReleased = startReleased || rec.Kind == fencing.KindRelease && strings.Contains(rec.Reason, "resource r2 (2 of 3) failed to start")
	}
	if !startReleased {
		t.Errorf("no release by %s for the failed start in the history", victim.Name)
	}
	if l, err := resourcesOf(ctxT(t, time.Second), victim); err != nil || l.Resources[1].Failures == 0 || l.Resources[1].State != "stopped" {
		t.Errorf("%s's resources after the failed start: %+v %v", victim.Name, l.Resources, err)
	}
	noFences(t, r)
	t.Logf("primary %s at epoch %d after %s's failed start", r.Name, e3, victim.Name)
}

// hangAgent is a stand-in OCF agent whose stop hangs once HANG exists
// next to its state file; its sleep's pid is written to STATE.sleep.
const hangAgent = `#!/bin/sh
[ "$1" = meta-data ] || : ${OCF_RESKEY_state:?}
case "$1" in
meta-data) cat <<'END'
<?xml version="1.0"?>
<resource-agent name="Hang" version="1.0">
<version>1.1</version>
<parameters><parameter name="state" required="1"><content type="string"/></parameter></parameters>
<actions><action name="start" timeout="5s"/><action name="stop" timeout="60s"/><action name="monitor" timeout="5s" interval="10s"/><action name="meta-data" timeout="5s"/></actions>
</resource-agent>
END
	exit 0;;
start) touch "$OCF_RESKEY_state"; exit 0;;
stop)
	if [ -e "$(dirname "$OCF_RESKEY_state")/HANG" ]; then
		sleep 3600 & echo $! >"$OCF_RESKEY_state.sleep"; wait; exit 1
	fi
	rm -f "$OCF_RESKEY_state"; exit 0;;
monitor) [ -e "$OCF_RESKEY_state" ] && exit 0; exit 7;;
*) exit 3;;
esac
`

// TestSelfFenceWhenOCFStopHangs: on demotion the group stops Dummy's
// neighbour, a stand-in agent whose stop hangs: it is killed with its
// process group at the end of the grace period and the node self-fences;
// Dummy beneath it is left as it is (the node is being reset).
func TestSelfFenceWhenOCFStopHangs(t *testing.T) {
	needOCF(t, "Dummy")
	dir := t.TempDir()
	root := filepath.Join(dir, "ocf")
	for _, d := range []string{"resource.d/fenced-test"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Symlink(filepath.Join(ocfRoot, "lib"), filepath.Join(root, "lib"))
	os.Symlink(filepath.Join(ocfRoot, "resource.d", "heartbeat"), filepath.Join(root, "resource.d", "heartbeat"))
	if err := os.WriteFile(filepath.Join(root, "resource.d", "fenced-test", "Hang"), []byte(hangAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	port, _ := devcluster.FreePort("127.0.0.1")
	raftPort, _ := devcluster.FreePort("127.0.0.1")
	cfg := config.Default()
	cfg.Gossip.Plaintext = true
	cfg.Version, cfg.Cluster.Name, cfg.Node = 1, "solo", "solo"
	cfg.Timing = testTiming
	cfg.Nodes = []config.Node{{Name: "solo", Gossip: "127.0.0.1:" + strconv.Itoa(port), Raft: "127.0.0.1:" + strconv.Itoa(raftPort)}}
	cfg.DataDir, cfg.API.Socket = filepath.Join(dir, "data"), filepath.Join(dir, "s.sock")
	cfg.OCFRoot = root
	cfg.Resources = []config.Resource{
		{Name: "base", OCF: "heartbeat:Dummy", Params: map[string]string{"state": filepath.Join(dir, "base.state")}},
		{Name: "stuck", OCF: "fenced-test:Hang", Params: map[string]string{"state": filepath.Join(dir, "stuck.state")}},
	}
	fenced := make(chan string, 1)
	d, err := daemon.New(cfg, daemon.Options{
		Logger:    slog.New(slog.DiscardHandler),
		SelfFence: func(reason string) bool { fenced <- reason; return true },
		Raft:      quorum.RaftOptions{InMemory: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !d.Acting() || d.StatusNow().Self.Storage != "running" {
		if time.Now().After(deadline) {
			t.Fatal("single node never became primary with its resources")
		}
		time.Sleep(10 * time.Millisecond)
	}
	os.WriteFile(filepath.Join(dir, "HANG"), nil, 0o644)
	stopAt := time.Now()
	cancel() // graceful stop: demote, whose stop of "stuck" hangs
	select {
	case reason := <-fenced:
		took := time.Since(stopAt)
		if took < testTiming.Grace.D()-50*time.Millisecond || took > testTiming.Grace.D()+time.Second {
			t.Errorf("self-fence after %s, grace %s", took, testTiming.Grace)
		}
		if !strings.Contains(reason, "did not stop") {
			t.Errorf("reason %q", reason)
		}
		t.Logf("self-fence %s after the stop began: %s", took.Round(time.Millisecond), reason)
	case <-time.After(10 * time.Second):
		t.Fatal("no self-fence")
	}
	b, err := os.ReadFile(filepath.Join(dir, "stuck.state.sleep"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	time.Sleep(100 * time.Millisecond)
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil && !strings.Contains(string(st), "State:\tZ") {
		t.Errorf("the hung stop's child %d survived: its process group was not killed", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if l := d.ResourcesNow(); l.Resources[1].State != "failed" || !strings.Contains(l.Resources[1].LastError, "fenced-test:Hang stop: timed out") || l.Resources[0].State != "running" {
		t.Errorf("resources after the failed stop: %+v", l.Resources)
	}
}
