package alerts

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Pacemaker's sample alert agents, from Debian's pacemaker-common
// (installed by .ci/install-deps).
const samples = "/usr/share/pacemaker/alerts/"

func sample(t *testing.T, name string) string {
	t.Helper()
	p := samples + name
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Pacemaker's sample alert agent is missing (install Debian's pacemaker-common): %v", err)
	}
	return p
}

// every is one event of each name, as the daemon raises them.
var every = []Event{
	{Name: FenceStarted, Kind: KindFencing, Node: "node2", Task: "off", Desc: "Operation off of node2 by node1 for node1 (takeover): started"},
	{Name: FenceSucceeded, Kind: KindFencing, Node: "node2", Task: "off", HasRC: true, Desc: "Operation off of node2 by node1 for node1 (takeover): OK"},
	{Name: FenceFailed, Kind: KindFencing, Node: "node2", Task: "off", HasRC: true, RC: 1, Desc: "Operation off of node2 by node1: failed: auth"},
	{Name: TakeoverBlocked, Kind: KindFencing, Node: "node1", Task: "takeover", HasRC: true, RC: 1, Desc: "takeover by node1 BLOCKED"},
	{Name: TakeoverUnblocked, Kind: KindFencing, Node: "node1", Task: "takeover", HasRC: true, Desc: "takeover by node1 unblocked"},
	{Name: PrimaryChanged, Kind: KindNode, Node: "node1", Desc: "primary", Epoch: 7},
	{Name: DeviceChanged, Kind: KindAttribute, Node: "node1", Attribute: "fence-device-node2-bmc", Value: "failing (auth): refused"},
	{Name: ConfigMismatch, Kind: KindAttribute, Node: "node3", Attribute: "config", Value: "mismatch: timing.lease"},
	{Name: ConfigMatch, Kind: KindAttribute, Node: "node3", Attribute: "config", Value: "match"},
	{Name: QuorumLost, Kind: KindAttribute, Node: "node1", Attribute: "quorum", Value: "lost"},
	{Name: QuorumRegained, Kind: KindAttribute, Node: "node1", Attribute: "quorum", Value: "regained"},
	{Name: SelfFence, Kind: KindFencing, Node: "node1", Task: "reboot", HasRC: true, Desc: "Operation self-fence of node1 by node1: stop timed out"},
}

func runAll(t *testing.T, m *Manager, evs []Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	for _, ev := range evs {
		m.Emit(ev)
	}
	t.Cleanup(func() { cancel(); <-done })
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lines(path string) []string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Pacemaker's alert_file sample, unmodified, writes one line per event for
// each of fenced's events, in the form it writes for Pacemaker's kinds.
func TestAlertFileSample(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "alerts.log")
	var mu sync.Mutex
	results := map[string]int{}
	m := New(Options{Self: "node1", Cluster: "c1", Observe: func(a, r string) { mu.Lock(); results[r]++; mu.Unlock() }},
		[]Agent{{Name: "file", Path: sample(t, "alert_file.sh.sample"), Params: map[string]string{"debug_exec_order": "false"},
			TimestampFormat: "%Y-%m-%d %H:%M:%S.%06N", Recipients: []Recipient{{Value: out}}}})
	runAll(t, m, every)
	waitFor(t, "a line per event", 10*time.Second, func() bool { return len(lines(out)) >= len(every) })
	got := strings.Join(lines(out), "\n")
	for _, want := range []string{
		"Fencing Operation off of node2 by node1 for node1 (takeover): started",
		"Fencing Operation off of node2 by node1 for node1 (takeover): OK",
		"Fencing Operation off of node2 by node1: failed: auth",
		"Fencing takeover by node1 BLOCKED",
		"Fencing takeover by node1 unblocked",
		"Node 'node1' is now 'primary'",
		"Attribute 'fence-device-node2-bmc' on node 'node1' was updated to 'failing (auth): refused'",
		"Attribute 'config' on node 'node3' was updated to 'mismatch: timing.lease'",
		"Attribute 'config' on node 'node3' was updated to 'match'",
		"Attribute 'quorum' on node 'node1' was updated to 'lost'",
		"Attribute 'quorum' on node 'node1' was updated to 'regained'",
		"Fencing Operation self-fence of node1 by node1: stop timed out",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("alert_file wrote no %q; it wrote:\n%s", want, got)
		}
	}
	// The timestamp is the event's, in the configured format.
	for _, l := range lines(out) {
		if _, err := time.Parse("2006-01-02 15:04:05.000000", l[:26]); err != nil {
			t.Errorf("line without the timestamp format: %q", l)
		}
	}
	waitFor(t, "every run counted", 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return results["ok"] == len(every) })
}

// With debug_exec_order the sample numbers its lines by
// CRM_alert_node_sequence: every event has its own number, in order.
func TestAlertSequence(t *testing.T) {
	out := filepath.Join(t.TempDir(), "alerts.log")
	m := New(Options{Self: "node1", MaxRunning: 1}, []Agent{{Name: "file", Path: sample(t, "alert_file.sh.sample"),
		Params: map[string]string{"debug_exec_order": "true"}, Recipients: []Recipient{{Value: out}}}})
	runAll(t, m, every[:5])
	waitFor(t, "five lines", 10*time.Second, func() bool { return len(lines(out)) == 5 })
	for i, l := range lines(out) {
		if want := strconv.Itoa(i+1) + ". "; !strings.HasPrefix(strings.TrimLeft(l, "0"), want) {
			t.Errorf("line %d: %q, want sequence %s", i, l, want)
		}
	}
}

// Pacemaker's alert_smtp sample, unmodified, mails every event through
// sendmail (here a program that keeps the mail it is given, found through
// the PATH the alert's params set).
func TestAlertSMTPSample(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	mail := filepath.Join(dir, "mail")
	// Each mail is appended whole, in one write, so that counting them
	// finds each one complete.
	os.WriteFile(filepath.Join(bin, "sendmail"), []byte("#!/bin/sh\nm=$({ echo \"ARGS: $*\"; cat; echo; })\nprintf '%s\\n\\n' \"$m\" >>"+mail+"\n"), 0o755)
	m := New(Options{Self: "node1"}, []Agent{{Name: "mail", Path: sample(t, "alert_smtp.sh.sample"),
		Params:     map[string]string{"PATH": bin + ":/usr/bin:/bin", "email_sender": "fenced@example.org"},
		Recipients: []Recipient{{Value: "ops@example.org"}}}})
	runAll(t, m, []Event{every[1], every[5]})
	waitFor(t, "two mails", 10*time.Second, func() bool {
		b, _ := os.ReadFile(mail)
		return strings.Count(string(b), "ARGS:") == 2
	})
	b, _ := os.ReadFile(mail)
	got := string(b)
	for _, want := range []string{"ARGS: -t -r fenced@example.org", "To: ops@example.org",
		"Fencing Operation off of node2 by node1 for node1 (takeover): OK", "Node 'node1' is now 'primary'",
		"CRM_alert_kind=fencing", "CRM_alert_node=node2", "CRM_alert_rc=0", "CRM_alert_task=off"} {
		if !strings.Contains(got, want) {
			t.Errorf("mail lacks %q:\n%s", want, got)
		}
	}
}

// Pacemaker's alert_snmp sample, unmodified, sends a v2c trap per event to
// the recipient (net-snmp's snmptrap, PCMK-MIB from pacemaker-common): here
// received on a loopback UDP port. Debian ships neither the IETF MIBs
// PCMK-MIB imports (they are in the non-free snmp-mibs-downloader) nor
// HOST-RESOURCES-MIB: testdata/mibs has minimal stand-ins, found through
// MIBDIRS, and the high-resolution timestamp varbind is left out.
func TestAlertSNMPSample(t *testing.T) {
	if _, err := os.Stat("/usr/bin/snmptrap"); err != nil {
		t.Fatal("snmptrap missing (Debian's snmp package)")
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	dir := t.TempDir()
	mibs, _ := filepath.Abs("testdata/mibs")
	m := New(Options{Self: "node1"}, []Agent{{Name: "snmp", Path: sample(t, "alert_snmp.sh.sample"),
		TimestampFormat: "%Y-%m-%d,%H:%M:%S.%01N",
		Params: map[string]string{"trap_snmp_persistent_dir": dir, "trap_community": "fenced-test",
			"MIBDIRS": "/usr/share/snmp/mibs:" + mibs, "trap_add_hires_timestamp_oid": "false"},
		Recipients: []Recipient{{Value: pc.LocalAddr().String()}}}})
	runAll(t, m, []Event{every[2], every[5], every[9]})
	got := map[string]bool{}
	buf := make([]byte, 65536)
	pc.SetReadDeadline(time.Now().Add(15 * time.Second))
	for len(got) < 3 {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("traps received: %v (%v)", got, err)
		}
		b := string(buf[:n])
		if !strings.Contains(b, "fenced-test") {
			t.Fatalf("trap without the community: %q", b)
		}
		for _, want := range []string{"Operation off of node2 by node1: failed: auth", "primary", "quorum"} {
			if strings.Contains(b, want) {
				got[want] = true
			}
		}
	}
}

// A hanging agent is killed with its whole process group at its timeout;
// the agents after it still run, and Emit never waits for any of them.
func TestAlertHangingAgentKilled(t *testing.T) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "hang.sh")
	pidFile := filepath.Join(dir, "child.pid")
	os.WriteFile(agent, []byte("#!/bin/sh\nsleep 1000 &\necho $! >"+pidFile+"\nwait\n"), 0o755)
	out := filepath.Join(dir, "alerts.log")
	var mu sync.Mutex
	results := map[string]int{}
	m := New(Options{Self: "node1", Observe: func(a, r string) { mu.Lock(); results[a+" "+r]++; mu.Unlock() }}, []Agent{
		{Name: "hang", Path: agent, Timeout: 300 * time.Millisecond},
		{Name: "file", Path: sample(t, "alert_file.sh.sample"), Recipients: []Recipient{{Value: out}}},
	})
	start := time.Now()
	runAll(t, m, every[:3])
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("emitting three events took %v", d)
	}
	waitFor(t, "the other agent's lines", 5*time.Second, func() bool { return len(lines(out)) == 3 })
	waitFor(t, "the hanging agent killed three times", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return results["hang timeout"] == 3
	})
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the agent's child killed with it", 2*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
}

// When the queue is full, events are dropped and counted; Emit does not
// block.
func TestAlertQueueOverflow(t *testing.T) {
	var dropped int
	m := New(Options{QueueSize: 2, Dropped: func() { dropped++ }}, []Agent{{Name: "x", Path: "/bin/true"}})
	start := time.Now()
	for range 10 {
		m.Emit(every[0]) // no Run: nothing takes them
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Emit blocked: %v", d)
	}
	if dropped != 8 || m.DroppedTotal() != 8 {
		t.Errorf("dropped %d (total %d), want 8", dropped, m.DroppedTotal())
	}
}

func TestEventsSelected(t *testing.T) {
	out := filepath.Join(t.TempDir(), "alerts.log")
	m := New(Options{}, []Agent{{Name: "file", Path: sample(t, "alert_file.sh.sample"), Groups: []string{GroupQuorum},
		Recipients: []Recipient{{Value: out}}}})
	runAll(t, m, every)
	waitFor(t, "two lines", 5*time.Second, func() bool { return len(lines(out)) == 2 })
	time.Sleep(300 * time.Millisecond)
	if l := lines(out); len(l) != 2 || !strings.Contains(l[0], "quorum") {
		t.Errorf("quorum only: %q", l)
	}
	for _, ev := range every {
		if GroupOf(ev.Name) == "" {
			t.Errorf("%s has no group", ev.Name)
		}
	}
}

func TestFormatTimestamp(t *testing.T) {
	tm := time.Date(2024, 3, 9, 14, 5, 7, 123456789, time.UTC)
	for _, c := range []struct{ f, want string }{
		{"%H:%M:%S.%06N", "14:05:07.123456"},
		{"%Y-%m-%d,%H:%M:%S.%01N", "2024-03-09,14:05:07.1"},
		{"%N", "123456789"},
		{"%3N ms, 100%%", "123 ms, 100%"},
		{"%s", strconv.FormatInt(tm.Unix(), 10)},
	} {
		got, err := FormatTimestamp(c.f, tm)
		if err != nil || got != c.want {
			t.Errorf("FormatTimestamp(%q) = %q, %v; want %q", c.f, got, err, c.want)
		}
	}
	for _, bad := range []string{"%0N", "%12N", "%5H"} {
		if err := CheckTimestampFormat(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Urgent (the self-fence) starts the runs at once, without Run.
func TestAlertUrgent(t *testing.T) {
	out := filepath.Join(t.TempDir(), "alerts.log")
	m := New(Options{Self: "node1"}, []Agent{{Name: "file", Path: sample(t, "alert_file.sh.sample"), Recipients: []Recipient{{Value: out}}}})
	m.Urgent(every[len(every)-1])
	waitFor(t, "the self-fence line", 5*time.Second, func() bool { return len(lines(out)) == 1 })
	if l := lines(out)[0]; !strings.Contains(l, "Fencing Operation self-fence of node1 by node1: stop timed out") {
		t.Errorf("self-fence alert: %q", l)
	}
}
