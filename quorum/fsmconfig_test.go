package quorum

import (
	"bytes"
	"testing"
)

func fingerprint(keys map[string]string) *ConfigFingerprint {
	return &ConfigFingerprint{Hash: FingerprintOf(keys), Keys: keys, Node: "a", By: "leader"}
}

// OpConfig commits the cluster's configuration fingerprint, kept across a
// snapshot; malformed ones are refused before anything changes.
func TestConfigFingerprint(t *testing.T) {
	f := NewFSM(10)
	if f.Config() != nil {
		t.Fatal("a fingerprint before any was committed")
	}
	keys := map[string]string{"timing.lease": "0123456789abcdef", "nodes": "fedcba9876543210"}
	good := fingerprint(keys)
	if err, _ := apply(t, f, Command{Op: OpConfig, Config: good}).(error); err != nil {
		t.Fatal(err)
	}
	if got := f.Config(); got == nil || got.Hash != good.Hash || got.Keys["nodes"] != "fedcba9876543210" {
		t.Fatalf("committed %+v", got)
	}
	// The copy handed out is the caller's own.
	f.Config().Keys["nodes"] = "x"
	if f.Config().Keys["nodes"] != "fedcba9876543210" {
		t.Fatal("Config returned the state's own map")
	}

	bad := []*ConfigFingerprint{
		nil,
		{Hash: "nothex", Keys: keys, Node: "a"},
		{Hash: good.Hash, Keys: map[string]string{"timing.lease": "0123456789abcdef"}, Node: "a"}, // not its keys' hash
		fingerprint(map[string]string{}),
		fingerprint(map[string]string{"timing.lease": "short"}),
		fingerprint(map[string]string{"a key with spaces": "0123456789abcdef"}),
		{Hash: good.Hash, Keys: keys}, // no node
	}
	for i, fp := range bad {
		if err, _ := apply(t, f, Command{Op: OpConfig, Config: fp}).(error); err == nil {
			t.Errorf("malformed fingerprint %d accepted: %+v", i, fp)
		}
		if f.Config().Hash != good.Hash {
			t.Fatalf("a refused command changed the state")
		}
	}

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf sinkBuffer
	if err := snap.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	g := NewFSM(10)
	if err := g.Restore(buf.ReadCloser()); err != nil {
		t.Fatal(err)
	}
	if c := g.Config(); c == nil || c.Hash != good.Hash || len(c.Keys) != 2 {
		t.Fatalf("restored %+v", c)
	}
	if !reHash16.MatchString(FingerprintOf(keys)) {
		t.Fatal("fingerprint is not 16 hex digits")
	}
}

// sinkBuffer is a raft.SnapshotSink in memory.
type sinkBuffer struct{ bytes.Buffer }

func (s *sinkBuffer) ID() string    { return "test" }
func (s *sinkBuffer) Cancel() error { return nil }
func (s *sinkBuffer) Close() error  { return nil }
func (s *sinkBuffer) ReadCloser() *readCloser {
	return &readCloser{bytes.NewReader(s.Bytes())}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }
