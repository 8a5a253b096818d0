package quorum

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// openDurable opens node a of a one-node cluster on dir's bolt log (a
// one-node cluster commits alone, as a recovered survivor does).
func openDurable(t *testing.T, dir string, peers []Peer) *Raft {
	t.Helper()
	_, tr := raft.NewInmemTransport(raft.ServerAddress("a"))
	q, err := OpenRaft(RaftOptions{Self: "a", Peers: peers, DataDir: dir, HeartbeatTimeout: 200 * time.Millisecond, Transport: tr, HistoryLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !q.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return q
}

// TestRecoverRewritesVotingSet: the recovery continues the epoch
// RecoverEpochGap above the log's, clears the declared nodes, records who
// did it, survives a restart, and the next grant is above it.
func TestRecoverRewritesVotingSet(t *testing.T) {
	dir := t.TempDir()
	peers := []Peer{{Name: "a", Raft: "a"}}
	q := openDurable(t, dir, peers)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := q.Apply(Command{Op: OpAcquire, Node: n}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Apply(Command{Op: OpState, Node: "c", Epoch: 3, State: HolderMounting}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := q.Shutdown(); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	got, err := Recover(RecoverOptions{Self: "a", RaftAddr: "a", DataDir: dir, Gone: []string{"c", "b"}, By: "root@a", Time: when, HistoryLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got.Before != 3 || got.Epoch != 3+RecoverEpochGap || got.Holder != "c" || got.Incarnation == "" {
		t.Fatalf("recovered %+v", got)
	}
	if inc, err := ReadIncarnation(dir); err != nil || inc != got.Incarnation {
		t.Fatalf("incarnation file %q, %v; want %q", inc, err, got.Incarnation)
	}
	q = openDurable(t, dir, peers)
	defer q.Shutdown()
	s := q.FSM().State()
	if s.Epoch != got.Epoch || s.Incarnation != got.Incarnation || len(s.Unconfirmed) != 0 || s.HolderState != HolderReleased {
		t.Fatalf("state after restart: epoch %d incarnation %q unconfirmed %v holder %s %s", s.Epoch, s.Incarnation, s.Unconfirmed, s.Holder, s.HolderState)
	}
	last := s.History[len(s.History)-1]
	if last.Kind != KindRecover || last.RequestedBy != "root@a" || !last.Started.Equal(when) || !strings.Contains(last.Reason, "declared gone: b, c") || last.Epoch != got.Epoch {
		t.Fatalf("history record %+v", last)
	}
	res, err := q.Apply(Command{Op: OpAcquire, Node: "a"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g := res.(Grant); g.Epoch != got.Epoch+1 || len(g.Unconfirmed) != 0 {
		t.Fatalf("grant after recovery %+v", g)
	}
	if err := q.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if IncarnationGen(got.Incarnation) != 1 || !Supersedes(got.Incarnation, "") {
		t.Fatalf("first recovery's incarnation %q: generation %d", got.Incarnation, IncarnationGen(got.Incarnation))
	}
	if _, err := os.Stat(filepath.Join(dir, RecoveringFile)); !os.IsNotExist(err) {
		t.Fatalf("recovery mark left behind: %v", err)
	}
	// A second recovery is one generation up: its set supersedes the first.
	again, err := Recover(RecoverOptions{Self: "a", RaftAddr: "a", DataDir: dir, Gone: []string{"b", "c"}, By: "root@a", Time: when, HistoryLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if IncarnationGen(again.Incarnation) != 2 || !Supersedes(again.Incarnation, got.Incarnation) || Supersedes(got.Incarnation, again.Incarnation) {
		t.Fatalf("second recovery's incarnation %q after %q", again.Incarnation, got.Incarnation)
	}
	// The incarnation file lost, the log still knows its set: a recovery
	// that would not go past it is refused, the mark of the attempt kept.
	if err := os.Remove(filepath.Join(dir, IncarnationFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(RecoverOptions{Self: "a", RaftAddr: "a", DataDir: dir, Gone: []string{"b"}, Time: when, HistoryLimit: 100}); err == nil || !strings.Contains(err.Error(), "is not older than the new one") {
		t.Fatalf("recovery below the log's voting set: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, RecoveringFile)); err != nil {
		t.Fatalf("an interrupted recovery left no mark: %v", err)
	}
}

// TestIncarnationGen: the generation orders voting sets, the first
// format (random hex alone) counts as one recovery.
func TestIncarnationGen(t *testing.T) {
	for inc, want := range map[string]uint64{"": 0, "3f9a0c1d22e4b5a6": 1, "1.3f9a": 1, "12.ab": 12, "x.ab": 1} {
		if got := IncarnationGen(inc); got != want {
			t.Errorf("IncarnationGen(%q) = %d, want %d", inc, got, want)
		}
	}
	if Supersedes("1.a", "1.b") || !Supersedes("2.a", "1.b") || Supersedes("", "1.a") {
		t.Error("Supersedes orders by generation only")
	}
}

// TestRecoverRefusals: bad requests name what is wrong.
func TestRecoverRefusals(t *testing.T) {
	dir := t.TempDir()
	if _, err := Recover(RecoverOptions{Self: "a", RaftAddr: "a", DataDir: dir, Gone: []string{"b"}}); err == nil || !strings.Contains(err.Error(), "no raft log to recover from") {
		t.Fatalf("empty data_dir: %v", err)
	}
	if _, err := Recover(RecoverOptions{Self: "a", RaftAddr: "a", DataDir: dir, Gone: []string{"a"}}); err == nil || !strings.Contains(err.Error(), "cannot declare itself gone") {
		t.Fatalf("self gone: %v", err)
	}
	f := NewFSM(10)
	f.state.Epoch = 5
	if err, _ := f.apply(&Command{Op: OpRecover, Epoch: 5, Incarnation: "x"}).(error); err == nil || !strings.Contains(err.Error(), "not above the current epoch 5") {
		t.Fatalf("epoch not above: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, IncarnationFile), []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if inc, err := ReadIncarnation(dir); err != nil || inc != "abc" {
		t.Fatalf("ReadIncarnation %q %v", inc, err)
	}
}
