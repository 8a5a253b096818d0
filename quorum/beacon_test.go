package quorum

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBeaconFrames(t *testing.T) {
	a, err := beaconCipher(keyA)
	if err != nil {
		t.Fatal(err)
	}
	other, err := beaconCipher(keyB)
	if err != nil {
		t.Fatal(err)
	}
	payload := append([]byte{beaconMagic, 0, 0, 0, 0, 0, 0, 0, 9}, "node1"...)
	frame := sealBeacon(a, payload)
	if frame[0] != beaconFrame || bytes.Contains(frame, []byte("node1")) {
		t.Fatalf("frame %x: want the frame byte, then ciphertext", frame)
	}
	if again := sealBeacon(a, payload); bytes.Equal(again, frame) {
		t.Error("two frames of one payload are equal: the nonce is not fresh")
	}
	if got, err := openBeacon(a, frame); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("open: %q, %v; want the payload", got, err)
	}
	for name, f := range map[string][]byte{
		"another key": sealBeacon(other, payload),
		"tampered":    append(append([]byte(nil), frame[:len(frame)-1]...), frame[len(frame)-1]^1),
		"truncated":   frame[:20],
		"frame byte":  {beaconFrame},
		"unsealed":    sealBeacon(nil, payload),
	} {
		if got, err := openBeacon(a, f); !errors.Is(err, errBeaconAuth) {
			t.Errorf("%s: %q, %v; want %v", name, got, err, errBeaconAuth)
		}
	}
	// A gossip packet (encryption version 0 or 1) is no beacon frame.
	if _, err := openBeacon(a, []byte{1, 2, 3}); err == nil {
		t.Error("a memberlist packet opened as a beacon frame")
	}
	// Without a cluster key the payload travels bare.
	if got, err := openBeacon(nil, sealBeacon(nil, payload)); err != nil || !bytes.Equal(got, payload) {
		t.Errorf("without a key: %q, %v", got, err)
	}
}

// Beacons between two real nodes travel as frames once the receiver has
// advertised that it reads them, as memberlist messages to a node that
// does not, and a frame that does not authenticate reaches no one.
func TestBeaconFramesOnTheWire(t *testing.T) {
	logs := &logRecords{}
	a, b, peers := gossipPair(t, logs)
	var mu sync.Mutex
	var got [][]byte
	b.setBeaconHandler(func(p []byte) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	var frames atomic.Int64
	b.guard.setBeaconHandler(func(f []byte, from net.Addr) {
		frames.Add(1)
		b.receiveBeacon(f, from)
	})
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		framed := a.reads["b"] >= beaconNumbered
		a.mu.Unlock()
		if framed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a never learned that b reads beacon frames")
		}
		time.Sleep(20 * time.Millisecond)
	}
	msg := append([]byte{beaconMagic, 0, 0, 0, 0, 0, 0, 0, 3}, "a"...)
	waitFor := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for received() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d beacons received, want %d", received(), n)
			}
			a.sendBeacons(msg, nil)
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(1)
	if frames.Load() == 0 {
		t.Fatal("the beacon did not come as a frame")
	}
	mu.Lock()
	if !bytes.Equal(got[0], msg) {
		t.Errorf("received %q, sent %q", got[0], msg)
	}
	mu.Unlock()

	// An older node: the memberlist message.
	a.mu.Lock()
	a.reads["b"] = 0
	a.mu.Unlock()
	before, n := frames.Load(), received()
	waitFor(n + 1)
	if f := frames.Load(); f != before {
		t.Errorf("%d frames sent to a node that does not read them", f-before)
	}

	// Frames sealed with another key, and junk after the frame byte.
	other, _ := beaconCipher(keyB)
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	dst, _ := net.ResolveUDPAddr("udp", peers[1].Gossip)
	n = received()
	for i := range 50 {
		u.WriteToUDP(sealBeacon(other, msg), dst)
		u.WriteToUDP(append([]byte{beaconFrame}, bytes.Repeat([]byte{byte(i)}, 60)...), dst)
	}
	time.Sleep(300 * time.Millisecond)
	if r := received(); r != n {
		t.Errorf("%d forged beacons were taken", r-n)
	}
	var refused int64
	for _, r := range logs.records() {
		if r.Message == "refused traffic from outside the cluster" && recordAttr(r, "reason").String() == (&beaconAuthError{ids: KeyID(keyA)}).Error() {
			refused += recordAttr(r, "count").Int64()
		}
		if r.Level >= slog.LevelError {
			t.Errorf("ERROR line: %s", r.Message)
		}
	}
	if refused == 0 {
		t.Error("no refusal logged for the forged beacons")
	}
}
