package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// notifySocket plays systemd's side of sd_notify: a datagram socket that
// records every message with its arrival time.
type notifySocket struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []notifyMsg
}

type notifyMsg struct {
	at   time.Time
	text string
}

func listenNotify(t *testing.T, dir, name string) *notifySocket {
	t.Helper()
	path := filepath.Join(dir, name)
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	s := &notifySocket{path: path, conn: c}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := c.ReadFromUnix(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if line != "" {
					s.msgs = append(s.msgs, notifyMsg{time.Now(), line})
				}
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close() })
	return s
}

func (s *notifySocket) find(prefix string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Time
	for _, m := range s.msgs {
		if strings.HasPrefix(m.text, prefix) {
			out = append(out, m.at)
		}
	}
	return out
}

func (s *notifySocket) waitFor(t *testing.T, prefix string, d time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if at := s.find(prefix); len(at) > 0 {
			return at[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q within %s", prefix, d)
	return time.Time{}
}

// TestSystemdNotify runs fenced under a harness that plays systemd: READY
// only after the node joined a cluster (not while it is alone), WATCHDOG=1
// pings while healthy, no pings once its main loop is stuck, STOPPING=1 on
// SIGTERM.
func TestSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: dir, Bin: fencedBin, Timing: testTiming})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	socks := make([]*notifySocket, 3)
	for i, n := range c.Nodes {
		socks[i] = listenNotify(t, dir, fmt.Sprintf("notify%d", i))
		n.Env = []string{"NOTIFY_SOCKET=" + socks[i].path, "WATCHDOG_USEC=1000000"}
	}
	// Node 3 gets stuck 4 s after starting.
	c.Nodes[2].Env = append(c.Nodes[2].Env, "FENCED_FAULT_STALL_AFTER=4s") // daemon/faults.go, built with -tags faultinject

	if err := c.Nodes[0].Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	time.Sleep(2 * time.Second)
	if r := socks[0].find("READY=1"); len(r) > 0 {
		t.Fatalf("READY=1 sent %s after start while alone (no majority)", r[0].Sub(started))
	}
	if len(socks[0].find("WATCHDOG=1")) == 0 {
		t.Error("no watchdog pings while joining")
	}
	if s := socks[0].find("STATUS=joining"); len(s) == 0 {
		t.Error("no STATUS while joining")
	}
	c.Nodes[1].Start()
	c.Nodes[2].Start()
	stallStart := time.Now()
	socks[0].waitFor(t, "READY=1", 20*time.Second)
	if _, _, err := c.Primary(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(socks[0].find("STATUS=primary")) == 0 && len(socks[0].find("STATUS=secondary")) == 0 {
		t.Errorf("no STATUS with the role: %v", socks[0].msgs)
	}
	// The stuck node stops pinging within the stall and half a watchdog
	// interval (pings need a heartbeat of the loop younger than that),
	// counted from its own start, a moment after stallStart: the last ping
	// comes about 4.5 s after stallStart, so 7 s after it the last is
	// more than 1.5 s old with a second to spare.
	time.Sleep(time.Until(stallStart.Add(4*time.Second + 3*time.Second)))
	pings := socks[2].find("WATCHDOG=1")
	if len(pings) == 0 {
		t.Fatal("stuck node never pinged")
	}
	last := pings[len(pings)-1]
	if since := time.Since(last); since < 1500*time.Millisecond {
		t.Fatalf("stuck node still pinging (last %s ago)", since)
	}
	if n := len(socks[1].find("WATCHDOG=1")); n < 10 {
		t.Errorf("healthy node pinged only %d times", n)
	}
	c.Nodes[0].Signal(syscall.SIGTERM)
	socks[0].waitFor(t, "STOPPING=1", 10*time.Second)
	if !c.Nodes[0].Wait(10 * time.Second) {
		t.Error("did not exit after SIGTERM")
	}
}

// TestMetricsDuringFence scrapes /metrics while a fence runs: the fence
// counter and the duration histogram move; names follow the conventions.
func TestMetricsDuringFence(t *testing.T) {
	addrs := make([]string, 3)
	for i := range addrs {
		p, err := devcluster.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true,
		NodeConfig: func(i int, cfg *config.Config) { cfg.Metrics.Listen = addrs[i] }})
	p, _, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		resp, err := http.Get("http://" + addrs[p.Index] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	before := scrape()
	for _, want := range []string{"fenced_quorum 1", "fenced_role{role=\"primary\"} 1", "fenced_quorum_votes_needed 2", "fenced_lease_remaining_seconds"} {
		if !strings.Contains(before, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	victim := c.Other(p)
	cl := p.Client()
	defer cl.Close()
	if err := cl.Do(context.Background(), "POST", "/v1/fence", nil, daemon.AdminRequest{Node: victim.Name}, nil); err != nil {
		t.Fatal(err)
	}
	after := scrape()
	counter := fmt.Sprintf(`fenced_fence_operations_total{action="off",outcome="success",target="%s"} 1`, victim.Name)
	if strings.Contains(before, counter) || !strings.Contains(after, counter) {
		t.Errorf("fence counter did not move to 1:\n%s", grep(after, "fenced_fence"))
	}
	hist := regexp.MustCompile(`fenced_fence_device_action_duration_seconds_count\{action="off",device="` + victim.Name + `-bmc"\} 1`)
	if !hist.MatchString(after) {
		t.Errorf("duration histogram did not move:\n%s", grep(after, "duration"))
	}
	// Conventions: counters end in _total, durations in _seconds, all fenced_ prefixed.
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "# TYPE fenced_") {
			f := strings.Fields(line)
			name, typ := f[2], f[3]
			if typ == "counter" && !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s lacks _total", name)
			}
			if strings.Contains(name, "duration") && !strings.HasSuffix(name, "_seconds") {
				t.Errorf("duration %s lacks _seconds", name)
			}
		}
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
