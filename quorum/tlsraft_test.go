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
}

// tcpCluster opens nodes a, b, c … on loopback TCP, node i with trusts[i].
func tcpCluster(t *testing.T, trusts ...trust) (map[string]*Raft, []Peer) {
	t.Helper()
	var peers []Peer
	for i := range trusts {
		peers = append(peers, Peer{Name: string(rune('a' + i)), Raft: freeAddr(t)})
	}
	nodes := map[string]*Raft{}
	for i, p := range peers {
		q, err := OpenRaft(RaftOptions{Self: p.Name, Peers: peers, HeartbeatTimeout: 200 * time.Millisecond, InMemory: true, Key: trusts[i].key, Cluster: trusts[i].cluster})
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
	prod = trust{"prod", keyA}
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
		{"other-key", trust{"prod", keyB}},
		{"other-cluster", trust{"test", keyA}},
		{"plaintext", trust{"prod", nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, _ := tcpCluster(t, prod, prod, tc.outsider)
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
