package nemesis

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/harness/devcluster"
)

var bins struct{ fenced, fencectl, nemesis, lab string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nemesis-bin-")
	if err != nil {
		panic(err)
	}
	bins.fenced, bins.fencectl, bins.nemesis, bins.lab = filepath.Join(dir, "fenced"), filepath.Join(dir, "fencectl"), filepath.Join(dir, "nemesis"), filepath.Join(dir, "fenced-lab")
	for _, b := range []struct{ out, pkg string }{{bins.fenced, "../../cmd/fenced"}, {bins.fencectl, "../../cmd/fencectl"}, {bins.nemesis, "./cmd/nemesis"}, {bins.lab, "../../cmd/fenced-lab"}} {
		if out, err := exec.Command("go", "build", "-o", b.out, b.pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", b.pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needRoot skips only where the tests cannot run at all: CI runs as root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network, mount, PID and time namespaces, loop devices (CI runs as root)")
	}
}

// envInt reads a test knob from the environment.
func envInt(t *testing.T, name string, def int64) int64 {
	if s := os.Getenv(name); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, s, err)
		}
		return v
	}
	return def
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// runProfile runs the CI profile: a seed from NEMESIS_SEED or the clock
// (printed, so a failure replays), faults from NEMESIS_FAULTS.
func runProfile(t *testing.T, nodes int, faults int64, o Options) *Result {
	t.Helper()
	seed := envInt(t, "NEMESIS_SEED", time.Now().UnixNano()%1_000_000_000)
	o.Nodes, o.Seed, o.Faults = nodes, seed, int(envInt(t, "NEMESIS_FAULTS", faults))
	o.Fenced, o.Fencectl, o.Nemesis, o.Lab = bins.fenced, bins.fencectl, bins.nemesis, bins.lab
	o.Progress = testWriter{t}
	// Logs outside t.TempDir, so a failed run keeps them.
	dir, err := os.MkdirTemp("", fmt.Sprintf("nemesis-%s-%d-", t.Name(), seed))
	if err != nil {
		t.Fatal(err)
	}
	o.Dir = dir
	t.Logf("seed %d (replay: NEMESIS_SEED=%d, or make nemesis SEED=%d NODES=%d FAULTS=%d TIMING=ci), logs in %s", seed, seed, seed, nodes, o.Faults, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("harness: %v (logs in %s)", err, dir)
	}
	t.Logf("\n%s", res.Summary)
	return res
}

// keepOrRemove keeps the run's directory when the test failed or a fault
// without a BMC fault took unusually long to take over (worth a look; the
// takeover waits for fence retries only when a fence failed).
func keepOrRemove(t *testing.T, res *Result) {
	if t.Failed() {
		t.Logf("logs, timeline and seed kept in %s", res.Dir)
		return
	}
	for _, f := range res.Faults {
		if f.Takeover > 20*time.Second && !strings.HasSuffix(f.Kind, "-bmc") {
			t.Logf("fault %d (%s) took %v to take over: logs kept in %s", f.N, f.Kind, f.Takeover, res.Dir)
			return
		}
	}
	os.RemoveAll(res.Dir)
}

// TestNemesis3 and TestNemesis5 are the CI profile: random faults of every
// kind against real fenced processes on simulated machines with a real
// shared ext4; the checker must find nothing, and the cluster must recover
// after every fault.
func TestNemesis3(t *testing.T) {
	needRoot(t)
	res := runProfile(t, 3, 26, Options{})
	defer keepOrRemove(t, res)
	for _, v := range res.Violations {
		t.Errorf("SAFETY VIOLATION: %s: %s", v.Check, v.Detail)
	}
	if res.Stuck > 0 {
		t.Errorf("the cluster did not recover after %d faults", res.Stuck)
	}
}

func TestNemesis5(t *testing.T) {
	needRoot(t)
	res := runProfile(t, 5, 22, Options{})
	defer keepOrRemove(t, res)
	for _, v := range res.Violations {
		t.Errorf("SAFETY VIOLATION: %s: %s", v.Check, v.Detail)
	}
	if res.Stuck > 0 {
		t.Errorf("the cluster did not recover after %d faults", res.Stuck)
	}
}

// TestNemesisTokens is the tokens profile: storage that checks tokens and
// nothing else (no shared ext4), the last node without a fence topology,
// so that a takeover from it goes by lease expiry; random faults of every
// kind, and the checker must find nothing.
func TestNemesisTokens(t *testing.T) {
	needRoot(t)
	res := runProfile(t, 3, 15, Options{Tokens: true})
	defer keepOrRemove(t, res)
	for _, v := range res.Violations {
		t.Errorf("SAFETY VIOLATION: %s: %s", v.Check, v.Detail)
	}
	if res.Stuck > 0 {
		t.Errorf("the cluster did not recover after %d faults", res.Stuck)
	}
	t.Logf("%d takeovers by lease expiry", res.Expiries)
	if res.Expiries == 0 {
		t.Error("no takeover by lease expiry: the profile did not test its path")
	}
}

// TestNemesisNegativeControl: a writer that escapes its machine (power-off
// does not stop it) must be caught: its writes interleave with the next
// primary's, and it writes after the fence that was meant to stop it.
func TestNemesisNegativeControl(t *testing.T) {
	needRoot(t)
	res := runProfile(t, 3, 2, Options{Escape: true, Kinds: []string{"kill-primary"}, RecoveryTimeout: 30 * time.Second})
	defer os.RemoveAll(res.Dir)
	found := map[string]bool{}
	for _, v := range res.Violations {
		found[strings.SplitN(v.Check, " ", 2)[0]] = true
	}
	if !found["interleave"] || !found["handover"] {
		t.Fatalf("the escaped writer was not caught: interleave %v, handover %v; violations: %v", found["interleave"], found["handover"], res.Violations)
	}
	t.Logf("caught: %s: %s", res.Violations[0].Check, res.Violations[0].Detail)
}

// TestDelayLine: the slow link really carries traffic, ICMP and TCP, and
// really delays it.
func TestDelayLine(t *testing.T) {
	needRoot(t)
	prefix := fmt.Sprintf("nd%d", os.Getpid()%10000)
	ns, err := devcluster.NewNetns(prefix, 2, os.Getpid()%200+20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	free, bridged := spareNames(prefix, 0)
	sw := ns.Switch()
	for _, step := range [][]string{
		{"ip", "-n", sw, "link", "add", free, "type", "veth", "peer", "name", bridged},
		{"ip", "-n", sw, "link", "set", bridged, "master", "br0", "up"},
		{"ip", "-n", sw, "link", "set", free, "up"},
	} {
		if err := run(step...); err != nil {
			t.Fatal(err)
		}
	}
	for _, ifc := range []struct{ ns, name string }{{ns.Name(0), "eth0"}, {ns.Name(1), "eth0"}, {sw, ns.Veth(0)}, {sw, ns.Veth(1)}, {sw, free}, {sw, bridged}, {sw, "br0"}} {
		if err := disableOffloads(ifc.ns, ifc.name); err != nil {
			t.Fatal(err)
		}
	}
	rtt := func() time.Duration {
		t.Helper()
		var c net.Conn
		var ln net.Listener
		if err := inNetns(ns.Name(1), func() error {
			var err error
			ln, err = net.Listen("tcp", ns.Hosts[1]+":7000")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			s, err := ln.Accept()
			if err == nil {
				io.Copy(s, s)
				s.Close()
			}
		}()
		if err := inNetns(ns.Name(0), func() error {
			var err error
			c, err = net.DialTimeout("tcp", ns.Hosts[1]+":7000", 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		// 256 KiB echoed: many full-size segments, their checksums checked
		// by the receiving stack.
		payload := make([]byte, 256<<10)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		start := time.Now()
		go c.Write(payload)
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("echo through the link: %v", err)
		}
		if string(got) != string(payload) {
			t.Fatal("echo corrupted")
		}
		return time.Since(start)
	}
	direct := rtt()
	line := &delayLine{ns: sw, port: ns.Veth(0), spare: free}
	if err := line.start(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	slow := rtt()
	if err := line.stop(); err != nil {
		t.Fatal(err)
	}
	again := rtt()
	t.Logf("256 KiB echo: direct %v, through a 100ms delay line %v, after %v", direct, slow, again)
	// One round trip at least (the connect is not counted): 2 × 100ms.
	if slow < 200*time.Millisecond {
		t.Errorf("delay line did not delay: %v", slow)
	}
}

func rec(sec float64, node string, epoch uint64) Record {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return Record{Time: t0.Add(time.Duration(sec * float64(time.Second))), Node: node, Epoch: epoch}
}

func hrec(sec float64, kind, target string, epoch uint64, outcome string) HistoryRecord {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add(time.Duration(sec * float64(time.Second)))
	return HistoryRecord{Kind: kind, Target: target, Action: "off", Epoch: epoch, Started: at, Finished: at, Outcome: outcome}
}

// The checker's rules, each with a log that breaks it and one that keeps it.
func TestCheckOrder(t *testing.T) {
	for _, c := range []struct {
		name string
		recs []Record
		want string // substring of the violation; "" = none
	}{
		{"one writer", []Record{rec(0, "a", 1), rec(1, "a", 1)}, ""},
		{"handover", []Record{rec(0, "a", 1), rec(1, "b", 2), rec(2, "b", 2)}, ""},
		{"same node new epoch", []Record{rec(0, "a", 1), rec(1, "a", 3)}, ""},
		{"interleave", []Record{rec(0, "a", 1), rec(1, "b", 2), rec(2, "a", 1)}, "a@1 wrote again"},
		{"interleave same node", []Record{rec(0, "a", 1), rec(1, "a", 2), rec(2, "a", 1)}, "a@1 wrote again"},
		{"stale start", []Record{rec(0, "a", 2), rec(1, "b", 1)}, "b@1 wrote"},
	} {
		vs := checkOrder("log", c.recs)
		switch {
		case c.want == "" && len(vs) > 0:
			t.Errorf("%s: unexpected %v", c.name, vs)
		case c.want != "" && (len(vs) == 0 || !strings.Contains(vs[0].Detail, c.want)):
			t.Errorf("%s: want %q, got %v", c.name, c.want, vs)
		}
	}
}

func TestCheckHandovers(t *testing.T) {
	recs := []Record{rec(0, "a", 1), rec(1, "a", 1), rec(3, "b", 2)}
	for _, c := range []struct {
		name string
		hist []HistoryRecord
		ok   bool
	}{
		{"no record", nil, false},
		{"release", []HistoryRecord{hrec(2, "release", "a", 1, "success")}, true},
		{"release of an older epoch", []HistoryRecord{hrec(2, "release", "a", 0, "success")}, false},
		{"fence", []HistoryRecord{hrec(2, "fence", "a", 2, "success")}, true},
		{"failed fence", []HistoryRecord{hrec(2, "fence", "a", 2, "failed")}, false},
		{"fence of another node", []HistoryRecord{hrec(2, "fence", "c", 2, "success")}, false},
		{"confirm", []HistoryRecord{hrec(2, "confirm", "a", 2, "success")}, true},
		// a fence "confirmed" before the old writer's last write did not stop it
		{"fence before the last write", []HistoryRecord{hrec(0.5, "fence", "a", 2, "success")}, false},
		{"fence after the new writer started", []HistoryRecord{hrec(4, "fence", "a", 2, "success")}, false},
		// storage that checks tokens: the old writer's writes are accepted
		// until the new epoch's first, so its expiry may come before its
		// last write, but not after the new one's first
		{"lease expiry before the last write", []HistoryRecord{hrec(0.5, "lease-expiry", "a", 2, "success")}, true},
		{"lease expiry after the new writer started", []HistoryRecord{hrec(4, "lease-expiry", "a", 2, "success")}, false},
		{"lease expiry before the old tenure", []HistoryRecord{hrec(-1, "lease-expiry", "a", 2, "success")}, false},
	} {
		vs, n := checkHandovers(recs, c.hist)
		if n != 1 {
			t.Fatalf("%s: %d changes", c.name, n)
		}
		if (len(vs) == 0) != c.ok {
			t.Errorf("%s: ok=%v, violations %v", c.name, c.ok, vs)
		}
	}
}

func TestParseRecords(t *testing.T) {
	b := []byte(`{"t":"2026-01-01T00:00:00Z","node":"a","epoch":1,"seq":1,"pid":9}` + "\n" + `{"t":"2026-01-01T00:00:0` + "\n\n" + `{"node":"b","epoch":0}` + "\n")
	recs, bad := ParseRecords(b)
	if len(recs) != 1 || recs[0].Node != "a" || len(bad) != 2 || !strings.HasPrefix(bad[0], "line 2") || !strings.HasPrefix(bad[1], "line 4") {
		t.Fatalf("recs %v bad %v", recs, bad)
	}
}

// The nftables rules the partitions and losses load.
func TestRules(t *testing.T) {
	r := netRules{blocked: []string{"10.0.0.2"}, lossPct: 20, peers: []string{"10.0.0.2", "10.0.0.3"}}.nft()
	for _, want := range []string{"ip saddr { 10.0.0.2 } drop", "ip daddr { 10.0.0.2 } drop", "ip saddr { 10.0.0.2, 10.0.0.3 } numgen random mod 100 < 20 drop"} {
		if !strings.Contains(r, want) {
			t.Errorf("missing %q in\n%s", want, r)
		}
	}
	if strings.Contains(netRules{peers: []string{"10.0.0.2"}}.nft(), "drop") {
		t.Error("healed rules still drop")
	}
}

// The timeline is well-formed SVG inside HTML, with a row per node, the
// writes, the fences and the faults.
func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res := &Result{Seed: 7, Nodes: 3, Start: t0, Duration: 150 * time.Second, Summary: "a <summary> & table"}
	segs := []Segment{
		{Node: "node1", From: t0, To: t0.Add(10 * time.Second), State: "primary", Epoch: 1},
		{Node: "node1", From: t0.Add(10 * time.Second), To: t0.Add(140 * time.Second), State: "off"},
		{Node: "node2", From: t0, To: t0.Add(12 * time.Second), State: "secondary"},
		{Node: "node2", From: t0.Add(12 * time.Second), To: t0.Add(140 * time.Second), State: "blocked", Epoch: 2, Info: "fence <failed>"},
	}
	events := []Event{{Time: t0.Add(9 * time.Second), Kind: "fault", What: "kill-primary", Detail: "fault 1"},
		{Time: t0.Add(13 * time.Second), Kind: "heal", What: "kill-primary", Detail: "fault 1"}}
	ci := checkInput{blind: []Record{rec(1, "node1", 1), rec(1.02, "node1", 1), rec(12.5, "node2", 2)},
		history: []HistoryRecord{hrec(11, "fence", "node1", 2, "success"), hrec(12, "release", "node3", 1, "success")}}
	for i := range ci.blind {
		ci.blind[i].Time = t0.Add(ci.blind[i].Time.Sub(rec(0, "", 0).Time))
	}
	path := filepath.Join(t.TempDir(), "timeline.html")
	if err := writeTimeline(path, res, segs, events, ci); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if n := strings.Count(s, "<svg"); n != 2 {
		t.Fatalf("%d SVGs for 150s in 2-minute windows", n)
	}
	for _, svg := range strings.SplitAfter(s, "</svg>")[:2] {
		svg = svg[strings.Index(svg, "<svg"):]
		dec := xml.NewDecoder(strings.NewReader(svg))
		for {
			if _, err := dec.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("SVG not well-formed: %v", err)
			}
		}
	}
	for _, want := range []string{"node1", "node3", "primary epoch 1", "fence &lt;failed&gt;", "kill-primary", "node1 writes at epoch 1", "✕", "R<title>", "a &lt;summary&gt; &amp; table"} {
		if !strings.Contains(s, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
}
