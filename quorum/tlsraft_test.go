package quorum

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// trust is what a node's raft TLS is rooted in: a cluster name and a key
// (nil: plain TCP).
type trust struct {
	cluster string
	key     []byte
	hb      time.Duration // raft heartbeat timeout; 0: 200ms
}

// tcpCluster opens nodes a, b, c … on loopback TCP, node i with trusts[i].
func tcpCluster(t *testing.T, trusts ...trust) (map[string]*Raft, []Peer) {
	t.Helper()
	var peers []Peer
	used := map[string]bool{}
	for i := range trusts {
		// A port found free can be found free twice before anyone binds
		// it: take each address once.
		addr := freeAddr(t)
		for used[addr] {
			addr = freeAddr(t)
		}
		used[addr] = true
		peers = append(peers, Peer{Name: string(rune('a' + i)), Raft: addr})
	}
	nodes := map[string]*Raft{}
	for i, p := range peers {
		hb := trusts[i].hb
		if hb == 0 {
			hb = 200 * time.Millisecond
		}
		q, err := OpenRaft(RaftOptions{Self: p.Name, Peers: peers, HeartbeatTimeout: hb, InMemory: true, Key: trusts[i].key, Cluster: trusts[i].cluster})
		if err != nil {
			t.Fatal(err)
		}
		nodes[p.Name] = q
		t.Cleanup(func() { q.Shutdown() })
	}
	return nodes, peers
}

var (
	keyA = bytes.Repeat([]byte{7}, 32)
	keyB = bytes.Repeat([]byte{8}, 32)
	prod = trust{cluster: "prod", key: keyA}
)

// TestRaftTLS: nodes holding the cluster key elect a leader and replicate
// over mutual TLS.
func TestRaftTLS(t *testing.T) {
	nodes, _ := tcpCluster(t, prod, prod, prod)
	l := waitLeader(t, nodes, []string{"a", "b", "c"}, "")
	res, err := nodes[l].Apply(Command{Op: OpAcquire, Node: l, Time: time.Now()}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g := res.(Grant); g.Epoch != 1 {
		t.Fatalf("grant %+v", g)
	}
	if err := nodes[l].Confirm(time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRaftTLSRefusesOutsiders: a node with another key, the right key in
// another cluster, or no TLS at all can neither join nor disturb the
// cluster: the two key holders keep their leader and their term.
func TestRaftTLSRefusesOutsiders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		outsider trust
	}{
		{"other-key", trust{cluster: "prod", key: keyB}},
		{"other-cluster", trust{cluster: "test", key: keyA}},
		{"plaintext", trust{cluster: "prod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The members time out slowly, so that a starved CI machine
			// (-race, two cores, other packages running) does not cost
			// them their leader; the outsider times out at 200ms and
			// asks for votes ten times in the two seconds watched.
			member := prod
			member.hb = 2 * time.Second
			nodes, _ := tcpCluster(t, member, member, tc.outsider)
			l := waitLeader(t, nodes, []string{"a", "b"}, "")
			term := nodes[l].Term()
			// The outsider keeps timing out and asking for votes; with a
			// working link it would follow the leader within a heartbeat.
			time.Sleep(2 * time.Second)
			if got := nodes["c"].Leader(); got != "" {
				t.Fatalf("outsider follows leader %q", got)
			}
			if got := nodes[l].Term(); got != term || !nodes[l].IsLeader() {
				t.Fatalf("members disturbed: leader %s term %d → %d, still leader %v", l, term, got, nodes[l].IsLeader())
			}
			if err := nodes[l].Confirm(time.Second); err != nil {
				t.Fatalf("members cannot commit: %v", err)
			}
		})
	}
}

// TestRaftTLSRawClient: a plain TCP raft client, or a TLS client without
// the cluster's certificate, gets no answer from a member.
func TestRaftTLSRawClient(t *testing.T) {
	nodes, peers := tcpCluster(t, prod, prod, prod)
	waitLeader(t, nodes, []string{"a", "b", "c"}, "")
	target := peers[0]
	term := nodes[target.Name].Term()

	plain, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var resp raft.RequestVoteResponse
	req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("x"), Addr: []byte(plain.LocalAddr())}, Term: term + 100, LastLogIndex: 1 << 40, LastLogTerm: term + 100}
	if err := plain.RequestVote("a", raft.ServerAddress(target.Raft), req, &resp); err == nil {
		t.Fatalf("plaintext vote request answered: %+v", resp)
	}

	conn, err := tls.Dial("tcp", target.Raft, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err == nil {
		// TLS 1.3 reports a refused client certificate on the first read.
		conn.SetDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Fatal("TLS client without a certificate was served")
	}
	time.Sleep(200 * time.Millisecond)
	if got := nodes[target.Name].Term(); got != term {
		t.Fatalf("term moved %d → %d", term, got)
	}
}

// TestRaftTLSHandshakeTimeout: a connection that never starts its TLS
// handshake is closed after handshakeTimeout instead of being held.
func TestRaftTLSHandshakeTimeout(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 300 * time.Millisecond
	nodes, peers := tcpCluster(t, prod, prod, prod)
	waitLeader(t, nodes, []string{"a", "b", "c"}, "")
	conn, err := net.Dial("tcp", peers[0].Raft)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a silent connection was held for %s", time.Since(start).Round(time.Millisecond))
	}
	if el := time.Since(start); el < 250*time.Millisecond || el > 3*time.Second {
		t.Fatalf("closed after %s (err %v), want about %s", el.Round(time.Millisecond), err, handshakeTimeout)
	}
}

// TestRaftStreamHandshakeFirst: raft gets a connection from the stream
// layer only after its peer completed the TLS handshake with the cluster's
// certificate; idle connections and failed handshakes never reach it, and
// Close aborts the handshakes in progress at once.
func TestRaftStreamHandshakeFirst(t *testing.T) {
	conf, err := clusterTLS([][]byte{keyA}, "prod", "a")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newTLSStream("127.0.0.1:0", nil, conf, streamGuard{})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.ln.Addr().String()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		dialFrom(t, "127.0.0.2", addr) // idle
	}
	junk := dialFrom(t, "127.0.0.3", addr)
	junk.Write(bytes.Repeat([]byte("junk"), 100))
	select {
	case c := <-accepted:
		t.Fatalf("raft got a connection from %s before any handshake", c.RemoteAddr())
	case <-time.After(300 * time.Millisecond):
	}
	peerConf, err := clusterTLS([][]byte{keyA}, "prod", "b")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.Dial("tcp", addr, peerConf)
	if err != nil {
		t.Fatalf("key holder: %v", err)
	}
	defer tc.Close()
	select {
	case c := <-accepted:
		if st := c.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState(); !st.HandshakeComplete || len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "b" {
			t.Fatalf("handed over before the handshake, or without the peer's certificate: %+v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the key holder's connection did not reach raft")
	}
	start := time.Now()
	s.Close()
	if _, ok := <-accepted; ok {
		t.Fatal("Accept returned a connection after Close")
	}
	if d := time.Since(start); d > handshakeTimeout/2 {
		t.Fatalf("Close waited %s for the idle handshakes", d)
	}
}

// TestRaftPreAuthCaps: connections still in their handshake are capped per
// source address and in total for strangers; a key holder from a
// configured node's address is still served while strangers fill their
// share, and the cluster keeps committing.
func TestRaftPreAuthCaps(t *testing.T) {
	nodes, peers := tcpCluster(t, prod, prod, prod)
	l := waitLeader(t, nodes, []string{"a", "b", "c"}, "")
	term := nodes[l].Term()
	target := peers[0].Raft
	sources := raftAdmit.Total / raftAdmit.PerSource
	var held []net.Conn
	for i := range sources {
		for range raftAdmit.PerSource {
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
			t.Error("a connection within the caps was closed before its handshake timeout")
		}
	}
	conf, err := clusterTLS([][]byte{keyA}, "prod", "d")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}, "tcp", target, conf)
	if err != nil {
		t.Fatalf("a key holder from a configured address, while strangers fill their share: %v", err)
	}
	tc.Close()
	if err := nodes[l].Confirm(time.Second); err != nil {
		t.Fatalf("members cannot commit: %v", err)
	}
	if got := nodes[l].Term(); got != term || !nodes[l].IsLeader() {
		t.Fatalf("members disturbed: term %d → %d, still leader %v", term, got, nodes[l].IsLeader())
	}
}
