package quorum

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freeGossipAddr is a loopback address whose port is free for TCP and UDP.
func freeGossipAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no free port")
	return ""
}

// gossipPair joins nodes a and b, encrypted with keyA, on loopback. b
// answers "size" with a JSON string of the requested length; both log to
// logs.
func gossipPair(t *testing.T, logs *logRecords) (a, b *Membership, peers []Peer) {
	t.Helper()
	peers = []Peer{{Name: "a", Gossip: freeGossipAddr(t)}, {Name: "b", Gossip: freeGossipAddr(t)}}
	handler := func(_ context.Context, from, method string, body []byte) ([]byte, error) {
		var n int
		if err := json.Unmarshal(body, &n); err != nil {
			return nil, err
		}
		return json.Marshal(strings.Repeat("x", n))
	}
	log := slog.New(logs)
	var err error
	if a, err = JoinMembership(MembershipOptions{Self: "a", Peers: peers, Key: keyA, Logger: log}, Meta{Role: "secondary"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Shutdown() })
	if b, err = JoinMembership(MembershipOptions{Self: "b", Peers: peers, Key: keyA, Logger: log, Handler: handler}, Meta{Role: "secondary"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown() })
	deadline := time.Now().Add(10 * time.Second)
	for a.ml.NumMembers() < 2 || b.ml.NumMembers() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two nodes did not meet")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a, b, peers
}

// callSize asks b, through a, for a reply of n bytes of payload.
func callSize(ctx context.Context, a *Membership, n int) ([]byte, error) {
	body, _ := json.Marshal(n)
	return a.Call(ctx, "b", "size", body)
}

// TestGossipLargestReplies: a reply as large as the biggest legitimate
// one (a fence record with hundreds of attempts and their stderr) passes
// the guard; one over the limit comes back as an error that says so,
// instead of being dropped by the receiver.
func TestGossipLargestReplies(t *testing.T) {
	a, _, _ := gossipPair(t, &logRecords{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := maxRPCMessage - 1<<10 // leaves room for the reply's envelope
	out, err := callSize(ctx, a, n)
	if err != nil {
		t.Fatalf("reply of %d bytes: %v", n, err)
	}
	if len(out) != n+2 {
		t.Fatalf("reply of %d bytes came back with %d", n, len(out))
	}
	start := time.Now()
	_, err = callSize(ctx, a, maxRPCMessage)
	if err == nil || !strings.Contains(err.Error(), "exceeds the gossip message limit") {
		t.Fatalf("oversized reply: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("oversized reply: the error came only after %s", time.Since(start))
	}
	// A request too large to send is refused at the sender.
	big, _ := json.Marshal(strings.Repeat("x", maxRPCMessage))
	if _, err := a.Call(ctx, "b", "size", big); err == nil || !strings.Contains(err.Error(), "exceeds the gossip message limit") {
		t.Fatalf("oversized request: %v", err)
	}
}

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether the other end closed c (within wait) rather
// than keeping it open.
func closedByPeer(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func src(i int) string { return "127.0.0." + strconv.Itoa(i) }

// TestGossipGuardRefusesOutsiders: connections from outside the
// configured addresses are capped per address and together, headers that
// cannot start an encrypted message and absurd lengths are refused at
// once, strangers share a memory budget, junk datagrams never reach
// decryption; meanwhile the nodes' own requests and replies flow, and the
// refusals are logged at INFO, rate-limited, with no ERROR line per
// packet.
func TestGossipGuardRefusesOutsiders(t *testing.T) {
	logs := &logRecords{}
	a, b, peers := gossipPair(t, logs)
	target := peers[1].Gossip
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Fill the strangers' share: PerSource idle connections from each
	// of Total/PerSource addresses; one more from any address is refused.
	var held []net.Conn
	sources := gossipAdmit.Total / gossipAdmit.PerSource
	for i := range sources {
		for range gossipAdmit.PerSource {
			held = append(held, dialFrom(t, src(2+i), target))
		}
	}
	if c := dialFrom(t, src(2), target); !closedByPeer(c, 2*time.Second) {
		t.Error("a connection over the per-address cap was kept")
	}
	if c := dialFrom(t, src(2+sources), target); !closedByPeer(c, 2*time.Second) {
		t.Error("a connection over the strangers' total was kept")
	}
	for _, c := range held[:3] {
		if closedByPeer(c, 100*time.Millisecond) {
			t.Error("a connection within the caps was closed before its header timeout")
		}
	}
	// The nodes' own traffic is unaffected.
	if _, err := callSize(ctx, a, 100<<10); err != nil {
		t.Fatalf("call while strangers fill their share: %v", err)
	}
	for _, c := range held {
		c.Close()
	}
	waitHeld(t, b.guard, 0)

	// Headers refused at once.
	for name, head := range map[string][]byte{
		"plain push/pull": {6, 0x80},
		"labelled":        {244, 3, 'a', 'b', 'c', 10},
		"huge":            {10, 0x01, 0x40, 0x00, 0x00},
		"tiny":            {10, 0, 0, 0, 3},
	} {
		c := dialFrom(t, src(20), target)
		c.Write(head)
		if !closedByPeer(c, 2*time.Second) {
			t.Errorf("%s header: stream kept", name)
		}
	}

	// The strangers' memory budget: streams announcing the largest
	// message and sending it, from many addresses at once. Within the
	// budget memberlist reads them (and fails to decrypt them); beyond
	// it the guard ends them.
	junk := make([]byte, maxGossipFrame)
	errc := make(chan error, 8)
	for i := range 8 {
		c := dialFrom(t, src(30+i), target)
		go func() {
			head := []byte{10, 0, 0, 0, 0}
			binary.BigEndian.PutUint32(head[1:], maxGossipFrame)
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, err := c.Write(append(head, junk...))
			errc <- err
		}()
	}
	for range 8 {
		<-errc
	}
	if _, err := callSize(ctx, a, 100<<10); err != nil {
		t.Fatalf("call after the strangers' big streams: %v", err)
	}

	// Junk datagrams: random, and shaped like an encrypted packet.
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src(40))})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	dst, _ := net.ResolveUDPAddr("udp", target)
	for i := range 2000 {
		p := bytes.Repeat([]byte{byte(i)}, 200)
		if i%2 == 0 {
			p[0] = 1
		}
		u.WriteToUDP(p, dst)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := callSize(ctx, a, 10); err != nil {
		t.Fatalf("call after junk datagrams: %v", err)
	}

	reasons := map[string]int64{}
	for _, r := range logs.records() {
		if r.Level >= slog.LevelError {
			t.Errorf("ERROR line: %s", r.Message)
		}
		if r.Message == "refused traffic from outside the cluster" {
			reasons[recordAttr(r, "reason").String()] += recordAttr(r, "count").Int64()
		}
	}
	for _, want := range []string{refusedPerSource, refusedTotal, "not an encrypted gossip message", "labelled gossip stream (fenced sends no labels)",
		"gossip message length out of bounds", gossipBudgetText, "not an encrypted gossip packet", a.ring.Load().undecryptable("packet")} {
		if reasons[want] == 0 {
			t.Errorf("no refusal logged for %q (logged: %v)", want, reasons)
		}
	}
	t.Logf("refusals logged: %v", reasons)
}

// waitHeld waits until the guard holds n connections.
func waitHeld(t *testing.T, g *gossipGuard, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		total, _ := g.admit.held()
		if total == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guard holds %d connections, want %d", total, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGossipHeader: the checks on a stream's first five bytes.
func TestGossipHeader(t *testing.T) {
	for _, tc := range []struct {
		in      []byte
		n       uint32
		wantErr string
	}{
		{[]byte{10, 0, 0, 0, 29}, 29, ""},
		{[]byte{10, 0, 0x40, 0, 0}, maxGossipFrame, ""},
		{[]byte{10, 0, 0x40, 0, 1}, 0, "length out of bounds"},
		{[]byte{10, 0, 0, 0, 28}, 0, "length out of bounds"},
		{[]byte{10, 0xff, 0xff, 0xff, 0xff}, 0, "length out of bounds"},
		{[]byte{244, 1, 'x'}, 0, "labelled"},
		{[]byte{8, 0, 0, 0, 0}, 0, "not an encrypted gossip message"},
		{[]byte{10, 0, 0}, 0, io.ErrUnexpectedEOF.Error()},
		{nil, 0, io.EOF.Error()},
	} {
		head, n, err := readGossipHeader(bytes.NewReader(tc.in))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && !strings.Contains(got, tc.wantErr) {
			t.Errorf("%v: err %q, want %q", tc.in, got, tc.wantErr)
			continue
		}
		if err == nil && (n != tc.n || !bytes.Equal(head, tc.in[:5])) {
			t.Errorf("%v: got %d %v", tc.in, n, head)
		}
	}
}
