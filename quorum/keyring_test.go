package quorum

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// TestParseKeys: a key file is one base64 key a line, the first the
// primary, with blank lines and comments; a single key reads as before;
// every bad file is refused with its file and line, and no error shows a
// key.
func TestParseKeys(t *testing.T) {
	key16 := bytes.Repeat([]byte{9}, 16)
	for _, tc := range []struct {
		name, file string
		want       [][]byte
		err        string
	}{
		{"one key, as keygen writes it", b64(keyA) + "\n", [][]byte{keyA}, ""},
		{"one key, no newline", b64(keyA), [][]byte{keyA}, ""},
		{"rotation", "# rotation of 2026-12\n\n" + b64(keyB) + "\n  " + b64(keyA) + "  \n\n", [][]byte{keyB, keyA}, ""},
		{"mixed sizes", b64(key16) + "\r\n" + b64(keyA) + "\r\n", [][]byte{key16, keyA}, ""},
		{"empty", "", nil, "/k: no key"},
		{"only comments", "# none\n\n", nil, "/k: no key"},
		{"not base64", b64(keyA) + "\n\nnot-base64!\n", nil, "/k line 3: not base64"},
		{"wrong size", "# c\n" + b64([]byte("short")) + "\n", nil, "/k line 2: key is 5 bytes, want 16, 24 or 32"},
		{"duplicate", b64(keyA) + "\n" + b64(keyB) + "\n" + b64(keyA) + "\n", nil, "/k line 3: the same key as line 1"},
		{"too many", func() string {
			var s []string
			for i := range MaxKeys + 1 {
				s = append(s, b64(bytes.Repeat([]byte{byte(i + 1)}, 32)))
			}
			return strings.Join(s, "\n")
		}(), nil, fmt.Sprintf("/k line %d: more than %d keys", MaxKeys+1, MaxKeys)},
	} {
		got, err := ParseKeys("/k", []byte(tc.file))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
			}
			for _, k := range [][]byte{keyA, keyB} {
				if err != nil && strings.Contains(err.Error(), b64(k)) {
					t.Errorf("%s: the error shows a key: %v", tc.name, err)
				}
			}
			continue
		}
		if err != nil || !sameKeys(got, tc.want) {
			t.Errorf("%s: %d keys, %v; want %d", tc.name, len(got), err, len(tc.want))
		}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "gossip.key")
	os.WriteFile(f, []byte(b64(keyB)+"\n"+b64(keyA)+"\n"), 0o600)
	if k, err := ReadKey(f); err != nil || !bytes.Equal(k, keyB) {
		t.Errorf("ReadKey: %v, want the first line's key", err)
	}
	if _, err := ReadKeys(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "gossip.key_file") {
		t.Errorf("missing file: %v", err)
	}
}

// TestKeyID: 8 hex digits, the same for the same key, different for
// another, and nothing of the key in it.
func TestKeyID(t *testing.T) {
	a, b := KeyID(keyA), KeyID(keyB)
	if len(a) != 8 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("id %q", a)
	}
	if a != KeyID(bytes.Clone(keyA)) || a == b {
		t.Fatalf("ids %s %s", a, b)
	}
	if strings.Contains(b64(keyA), a) || strings.Contains(fmt.Sprintf("%x", keyA), a) {
		t.Fatalf("id %s is part of the key", a)
	}
}

// TestKeyRingBeacons: a ring seals under its primary and opens under any
// of its keys; a frame of a key it lacks is refused with a reason that
// names the ring's key IDs.
func TestKeyRingBeacons(t *testing.T) {
	ringA, _ := newKeyRing([][]byte{keyA})
	ringAB, _ := newKeyRing([][]byte{keyA, keyB})
	ringBA, _ := newKeyRing([][]byte{keyB, keyA})
	ringB, _ := newKeyRing([][]byte{keyB})
	msg := []byte("beacon")
	for _, tc := range []struct {
		name     string
		from, to *keyRing
		ok       bool
	}{
		{"A to A", ringA, ringA, true},
		{"A to A,B", ringA, ringAB, true},
		{"B,A to A,B", ringBA, ringAB, true},
		{"B,A to B", ringBA, ringB, true},
		{"A,B to B", ringAB, ringB, false},
		{"B to A", ringB, ringA, false},
	} {
		p, err := tc.to.open(tc.from.seal(msg))
		if tc.ok != (err == nil) || tc.ok && !bytes.Equal(p, msg) {
			t.Errorf("%s: %q, %v", tc.name, p, err)
		}
		if !tc.ok {
			if !errors.Is(err, errBeaconAuth) || !strings.Contains(err.Error(), "ids "+strings.Join(tc.to.ids, ", ")) {
				t.Errorf("%s: refusal %q does not name the keys", tc.name, err)
			}
		}
	}
	var plain *keyRing
	if p, err := plain.open(plain.seal(msg)); err != nil || !bytes.Equal(p, msg) {
		t.Errorf("plaintext: %q, %v", p, err)
	}
}

// TestRaftTLSEitherKey: a raft stream accepts a peer whose certificate is
// of any of its keys and presents its primary's; a peer holding only a
// removed key is refused on both ends, each logging why with the key IDs;
// a change of keys leaves an established connection working, until
// closeRemoved closes those made under a removed key.
func TestRaftTLSEitherKey(t *testing.T) {
	logs := &logRecords{}
	confAB, err := clusterTLS([][]byte{keyA, keyB}, "prod", "a")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newTLSStream("127.0.0.1:0", nil, confAB, streamGuard{Log: slog.New(logs), KeyIDs: KeyIDs([][]byte{keyA, keyB})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) // echo
		}
	}()
	addr := s.ln.Addr().String()
	dial := func(keys ...[]byte) (*tls.Conn, error) {
		conf, err := clusterTLS(keys, "prod", "b")
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, conf)
		if err == nil {
			// TLS 1.3: the server's verdict on the client's certificate
			// arrives with the first read.
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err = c.Write([]byte("x")); err == nil {
				_, err = io.ReadFull(c, make([]byte, 1))
			}
			c.SetDeadline(time.Time{})
			if err != nil {
				c.Close()
			}
		}
		return c, err
	}
	for _, keys := range [][][]byte{{keyA}, {keyB, keyA}, {keyA, keyB}} {
		c, err := dial(keys...)
		if err != nil {
			t.Fatalf("peer with keys %v: %v", KeyIDs(keys), err)
		}
		c.Close()
	}
	// A peer of B alone: it cannot verify the stream's A certificate, and
	// says so; the stream logs that the peer refused its primary.
	if c, err := dial(keyB); err == nil {
		c.Close()
	} else if !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("peer of B alone against a primary A: %v", err)
	}
	held, err := dial(keyA)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	// The stream moves to B alone: the connection made under A stays; a
	// peer of A alone is refused, and one of B (or B first) accepted.
	confB, err := clusterTLS([][]byte{keyB}, "prod", "a")
	if err != nil {
		t.Fatal(err)
	}
	s.setConf(confB, KeyIDs([][]byte{keyB}))
	if c, err := dial(keyA); err == nil {
		c.Close()
		t.Fatal("a peer of the removed key A alone was accepted")
	}
	// A peer that still has A first presents a certificate of A.
	if c, err := dial(keyA, keyB); err == nil {
		c.Close()
		t.Fatal("a peer presenting a certificate of the removed key A was accepted")
	}
	for _, keys := range [][][]byte{{keyB}, {keyB, keyA}} {
		c, err := dial(keys...)
		if err != nil {
			t.Fatalf("peer with keys %v after the change: %v", KeyIDs(keys), err)
		}
		c.Close()
	}
	held.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := held.Write([]byte("y")); err != nil {
		t.Fatalf("established connection after the change: %v", err)
	}
	if _, err := io.ReadFull(held, make([]byte, 1)); err != nil {
		t.Fatalf("established connection after the change: %v", err)
	}
	held.SetDeadline(time.Time{})

	// closeRemoved: a peer whose connection was made under A keeps it
	// while keep says it can connect again; else it is closed. One made
	// under B stays whatever keep says.
	heldB, err := dial(keyB)
	if err != nil {
		t.Fatal(err)
	}
	defer heldB.Close()
	echoes := func(c *tls.Conn) bool {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		defer c.SetDeadline(time.Time{})
		if _, err := c.Write([]byte("z")); err != nil {
			return false
		}
		_, err := io.ReadFull(c, make([]byte, 1))
		return err == nil
	}
	if closed := s.closeRemoved(func(string) bool { return true }); len(closed) != 0 || !echoes(held) {
		t.Fatalf("closed %v though kept", closed)
	}
	if closed := s.closeRemoved(func(string) bool { return false }); !slices.Equal(closed, []string{"b"}) {
		t.Fatalf("closed the connections of %v, want b's made under A", closed)
	}
	if echoes(held) {
		t.Fatal("the connection made under the removed key still works")
	}
	if !echoes(heldB) {
		t.Fatal("the connection made under B was closed")
	}

	// The refusing side's lines name the keys.
	wantRemoved := "TLS handshake refused: the peer's certificate is signed with none of this node's keys (ids " + KeyID(keyB) + ")"
	wantRefused := "TLS handshake refused by the peer: it does not hold this node's primary key (id " + KeyID(keyA) + ")"
	deadline := time.Now().Add(3 * time.Second)
	for {
		var reasons []string
		for _, r := range logs.records() {
			reasons = append(reasons, recordAttr(r, "reason").String())
		}
		has := func(p string) bool {
			return slices.ContainsFunc(reasons, func(r string) bool { return strings.HasPrefix(r, p) })
		}
		if has(wantRemoved) && has(wantRefused) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals logged: %q; want %q and %q", reasons, wantRemoved, wantRefused)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGossipKeyRotation: two members rotate from key A to key B in three
// steps of SetKeys each, calling each other after every step; then a node
// holding only A is not let in, and the members log that its gossip did
// not decrypt with their keys, naming them.
func TestGossipKeyRotation(t *testing.T) {
	logs := &logRecords{}
	a, b, peers := gossipPair(t, logs)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// a's request and b's answer: each end encrypts with its primary and
	// decrypts the other's.
	call := func(step string) {
		t.Helper()
		if _, err := callSize(ctx, a, 10); err != nil {
			t.Fatalf("%s: call: %v", step, err)
		}
	}
	call("key A")
	for _, step := range []struct {
		name string
		keys [][]byte
	}{{"add B", [][]byte{keyA, keyB}}, {"B first", [][]byte{keyB, keyA}}, {"remove A", [][]byte{keyB}}} {
		for _, m := range []*Membership{a, b} {
			changed, err := m.SetKeys(step.keys)
			if err != nil || !changed {
				t.Fatalf("%s: SetKeys: %v, %v", step.name, changed, err)
			}
			if !sameKeys(m.mlKeys.GetKeys(), step.keys) {
				t.Fatalf("%s: memberlist's keys are %v, want %v", step.name, KeyIDs(m.mlKeys.GetKeys()), KeyIDs(step.keys))
			}
			if !slices.Equal(m.KeyIDs(), KeyIDs(step.keys)) {
				t.Fatalf("%s: KeyIDs %v", step.name, m.KeyIDs())
			}
			// Between the two nodes' steps, each reads the other.
			call(step.name + " on " + m.opts.Self)
		}
	}
	if changed, err := a.SetKeys([][]byte{keyB}); err != nil || changed {
		t.Fatalf("the same keys again: changed %v, %v", changed, err)
	}
	if _, err := a.SetKeys(nil); err == nil {
		t.Fatal("an encrypted membership took no key")
	}
	// b advertises its keys.
	waitMeta := time.Now().Add(5 * time.Second)
	for {
		if m, ok := a.LastMeta("b"); ok && m.Keys == KeyID(keyB) {
			break
		}
		if time.Now().After(waitMeta) {
			m, _ := a.LastMeta("b")
			t.Fatalf("b advertises keys %q, want %s", m.Keys, KeyID(keyB))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// c, of A alone, tries to join.
	peers = append(peers, Peer{Name: "c", Gossip: freeGossipAddr(t)})
	c, err := JoinMembership(MembershipOptions{Self: "c", Peers: peers, Key: keyA, Logger: slog.New(slog.DiscardHandler)}, Meta{Role: "secondary"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	if _, err := c.ml.Join([]string{peers[0].Gossip}); err == nil {
		t.Error("a node of the removed key joined")
	}
	want := (&keyRing{idText: KeyID(keyB)}).undecryptable("message")
	deadline := time.Now().Add(5 * time.Second)
	for {
		found := false
		for _, r := range logs.records() {
			if recordAttr(r, "reason").String() == want {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal %q logged", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, mb := range a.Members() {
		if mb.Name == "c" && mb.State == "alive" {
			t.Fatal("c is a member")
		}
	}
}

// TestNodeMetaKeys: the metadata carries the key IDs, and only the
// primary's when it would not fit otherwise.
func TestNodeMetaKeys(t *testing.T) {
	m := &Membership{}
	ring, _ := newKeyRing([][]byte{keyB, keyA})
	m.ring.Store(ring)
	m.meta.Store(&Meta{Role: "secondary"})
	var got Meta
	json.Unmarshal((*mlDelegate)(m).NodeMeta(512), &got)
	if got.Keys != KeyID(keyB)+","+KeyID(keyA) {
		t.Fatalf("keys %q", got.Keys)
	}
	m.meta.Store(&Meta{Role: "secondary", Version: strings.Repeat("v", 440)})
	got = Meta{}
	b := (*mlDelegate)(m).NodeMeta(512)
	json.Unmarshal(b, &got)
	if len(b) > 512 || got.Keys != KeyID(keyB) {
		t.Fatalf("%d bytes, keys %q; want the primary's alone", len(b), got.Keys)
	}
}

// TestGossipKeysChangeUnderTraffic: keys added and removed again and again
// while the members call each other (and probe, and push their metadata):
// every call is answered, as every node's primary is one all hold, also
// while a key leaves the middle of the ring (setMemberlistKeys reorders it
// first).
func TestGossipKeysChangeUnderTraffic(t *testing.T) {
	a, b, _ := gossipPair(t, &logRecords{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := make(chan struct{})
	errs := make(chan error, 1)
	calls := 0
	go func() {
		defer close(errs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := callSize(ctx, a, 100); err != nil {
				errs <- err
				return
			}
			calls++
		}
	}()
	keyC := bytes.Repeat([]byte{10}, 32)
	for range 30 {
		// B removed from the middle of the ring, A first throughout.
		for _, keys := range [][][]byte{{keyA, keyB, keyC}, {keyA, keyC}} {
			for _, m := range []*Membership{a, b} {
				if _, err := m.SetKeys(keys); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(stop)
	if err := <-errs; err != nil {
		t.Fatalf("call while the keys change: %v", err)
	}
	if calls == 0 {
		t.Fatal("no call made")
	}
	t.Logf("%d calls while the keys changed 120 times", calls)
}

// FuzzParseKeys: any file either parses to 1 to MaxKeys distinct keys of
// AES sizes, or is refused with an error that names the file and shows no
// line of it.
func FuzzParseKeys(f *testing.F) {
	f.Add([]byte(b64(keyA) + "\n"))
	f.Add([]byte("# c\n\n" + b64(keyB) + "\n" + b64(keyA)))
	f.Add([]byte(b64(keyA) + "\n" + b64(keyA)))
	f.Add([]byte("not base64\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseKeys("/etc/fenced/gossip.key", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gossip.key_file /etc/fenced/gossip.key") {
				t.Fatalf("error without the file: %v", err)
			}
			for _, line := range strings.Split(string(b), "\n") {
				if s := strings.TrimSpace(line); len(s) >= 16 && strings.Contains(err.Error(), s) {
					t.Fatalf("error shows a line of the file: %v", err)
				}
			}
			return
		}
		if len(keys) == 0 || len(keys) > MaxKeys {
			t.Fatalf("%d keys", len(keys))
		}
		for i, k := range keys {
			if l := len(k); l != 16 && l != 24 && l != 32 {
				t.Fatalf("key of %d bytes", l)
			}
			for _, o := range keys[:i] {
				if bytes.Equal(k, o) {
					t.Fatal("the same key twice")
				}
			}
		}
	})
}
