package quorum

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// fuzzMembership is one encrypted node on memberlist's in-memory network
// whose handler reports every request it answers.
type fuzzMembership struct {
	m     *Membership
	calls chan rpcMsg
}

func newFuzzMembership(f *testing.F) *fuzzMembership {
	fm := &fuzzMembership{calls: make(chan rpcMsg, 16)}
	mnet := &memberlist.MockNetwork{}
	handler := func(_ context.Context, from, method string, body []byte) ([]byte, error) {
		fm.calls <- rpcMsg{From: from, Method: method, Body: body}
		if method == "fail" {
			return nil, errors.New("refused")
		}
		return []byte(`{"ok":true}`), nil
	}
	m, err := JoinMembership(MembershipOptions{Self: "a", Peers: []Peer{{Name: "a", Gossip: "127.0.0.1:1"}},
		Key: keyA, Transport: mnet.NewTransport("a"), Handler: handler}, Meta{Role: "secondary"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Shutdown() })
	fm.m = m
	return fm
}

// FuzzGossipMessage feeds arbitrary bytes to the handler of forwarded
// requests and replies (what memberlist hands NotifyMsg after decryption):
// no panic; what decodeRPC refuses reaches neither the handler nor a
// waiting caller; a request reaches the handler exactly as decoded; a
// reply reaches the caller waiting for its ID only from the node that
// caller asked; the table of waiting calls is left as it was.
func FuzzGossipMessage(f *testing.F) {
	fm := newFuzzMembership(f)
	m := fm.m
	const waiting = 7
	wait := make(chan rpcMsg, 4)
	m.mu.Lock()
	m.pending[waiting] = pendingCall{node: "b", ch: wait}
	m.mu.Unlock()
	for _, seed := range []string{
		`{"id":1,"from":"b","method":"command","body":{"op":"release","node":"b","epoch":3}}`,
		`{"id":7,"reply":true,"from":"b","body":{"id":4,"outcome":"success"}}`,
		`{"id":7,"reply":true,"from":"b","err":"retry: no leader"}`,
		`{"id":2,"from":"b","method":"fail"}`,
		`{"id":0,"from":"b","method":"x"}`,
		`{"id":3,"method":"x"}`,
		`{"id":3,"from":"b"}`,
		`{"id":1,"from":"b","method":"fence","body":`,
		`[]`, `null`, ``, "\x00\xff",
	} {
		f.Add([]byte(seed))
	}
	var mu sync.Mutex // one input at a time: the handler's channel is shared
	f.Fuzz(func(t *testing.T, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		msg, err := decodeRPC(b)
		m.handleMsg(b)
		switch {
		case err != nil:
		case msg.Reply && msg.ID == waiting && msg.From == "b":
			select {
			case got := <-wait:
				if got.From != msg.From || got.Err != msg.Err || !bytes.Equal(got.Body, msg.Body) {
					t.Fatalf("reply delivered as %+v, decoded %+v", got, msg)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("reply %+v not delivered", msg)
			}
		case !msg.Reply:
			select {
			case got := <-fm.calls:
				if got.From != msg.From || got.Method != msg.Method || !bytes.Equal(got.Body, msg.Body) {
					t.Fatalf("handler got %+v, decoded %+v", got, msg)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("request %+v not handled", msg)
			}
			if msg.From == m.opts.Self && msg.ID == waiting {
				// A request "from" this node: its answer comes back
				// through gossip with the waiting call's ID, but from
				// this node, not the one the call asked: refused.
				select {
				case got := <-wait:
					t.Fatalf("answer to itself delivered to a call of b: %+v", got)
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		select {
		case got := <-fm.calls:
			t.Fatalf("handler called with %+v for %q", got, b)
		case got := <-wait:
			t.Fatalf("caller woken with %+v for %q", got, b)
		default:
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.pending) != 1 || m.pending[waiting].ch != wait {
			t.Fatalf("waiting calls changed: %v", m.pending)
		}
	})
}

// FuzzMeta decodes arbitrary node metadata: no panic; an error leaves the
// zero Meta; what decodes survives a round trip.
func FuzzMeta(f *testing.F) {
	for _, seed := range []string{
		`{"r":"primary","e":4,"s":"running","v":"0.1.0","f":"leader"}`,
		`{"r":"secondary","e":0,"s":"stopped","v":""}`,
		`{"e":-1}`, `{"e":1e40}`, `{"r":1}`, `null`, ``, `{"r":"x"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		meta, err := decodeMeta(b)
		if err != nil {
			if meta != (Meta{}) {
				t.Fatalf("error %v with a half-decoded %+v", err, meta)
			}
			return
		}
		out, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeMeta(out)
		if err != nil || again != meta {
			t.Fatalf("round trip: %+v → %s → %+v, %v", meta, out, again, err)
		}
	})
}

// fuzzFSMStart is a state with every part filled in: a holder that
// mounted, an unconfirmed node, standby, history.
var fuzzFSMStart = []Command{
	{Op: OpAcquire, Node: "a", Time: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)},
	{Op: OpState, Node: "a", Epoch: 1, State: HolderMounting},
	{Op: OpState, Node: "a", Epoch: 1, State: HolderMounted},
	{Op: OpStandby, Node: "c", Flag: true},
	{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "b", Outcome: fencing.OutcomePending,
		Attempts: []fencing.Attempt{{Level: 1, Device: "ipmi-b", Action: "off", Result: "unknown"}}}},
	{Op: OpAcquire, Node: "b"},
}

// fuzzFSM returns a state machine after fuzzFSMStart.
func fuzzFSM(t testing.TB) *FSM {
	f := NewFSM(4)
	for i, c := range fuzzFSMStart {
		data, _ := json.Marshal(c)
		if err, ok := f.Apply(&raft.Log{Index: uint64(i + 1), Data: data}).(error); ok {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	return f
}

func stateJSON(t testing.TB, f *FSM) string {
	s := f.State()
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzFSMApply applies arbitrary log entries (the input split at
// newlines) to a state machine: no panic; an entry it refuses (or cannot
// decode) leaves the state exactly as it was; the epoch never goes down;
// history stays bounded with IDs below NextID; a second state machine fed
// the same entries ends in the same state; a snapshot restores it.
func FuzzFSMApply(f *testing.F) {
	for _, seed := range [][]Command{
		{{Op: OpAcquire, Node: "c"}, {Op: OpStandby, Node: "c"}, {Op: OpAcquire, Node: "c"}},
		{{Op: OpRelease, Node: "b", Epoch: 2}, {Op: OpAcquire, Node: "a"}, {Op: OpState, Node: "a", Epoch: 3, State: HolderMounting}},
		{{Op: OpRecord, Record: &fencing.Record{ID: 1, Kind: fencing.KindFence, Target: "a", Executor: "b", Action: "off", Outcome: fencing.OutcomeSuccess}},
			{Op: OpState, Node: "b", Epoch: 2, State: HolderMounting}},
		{{Op: OpState, Node: "b", Epoch: 2, State: "bogus"}, {Op: OpState, Node: "a", Epoch: 1, State: HolderMounted}},
		{{Op: OpRecord, Record: &fencing.Record{ID: 1 << 63, Kind: fencing.KindConfirm, Target: "a", Outcome: fencing.OutcomeSuccess}}},
		{{Op: OpAcquire}, {Op: OpRecord}, {Op: "nope"}},
	} {
		var buf bytes.Buffer
		for _, c := range seed {
			b, _ := json.Marshal(c)
			buf.Write(b)
			buf.WriteByte('\n')
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte("{\"op\":\"acquire\",\"node\":\"a\",\"epoch\":18446744073709551615}\n{]\n\n{\"op\":\"record\",\"record\":{\"id\":\"x\"}}"))
	f.Fuzz(func(t *testing.T, input []byte) {
		entries := bytes.Split(input, []byte("\n"))
		if len(entries) > 32 {
			entries = entries[:32]
		}
		a, b := fuzzFSM(t), fuzzFSM(t)
		epoch := a.State().Epoch
		for i, e := range entries {
			l := &raft.Log{Index: uint64(100 + i), Data: e}
			before := stateJSON(t, a)
			res := a.Apply(l)
			b.Apply(l)
			after := stateJSON(t, a)
			if err, ok := res.(error); ok && after != before {
				t.Fatalf("entry %q refused (%v) but the state changed:\n%s\n→\n%s", e, err, before, after)
			}
			s := a.State()
			if s.Epoch < epoch {
				t.Fatalf("entry %q: epoch %d → %d", e, epoch, s.Epoch)
			}
			epoch = s.Epoch
			if len(s.History) > a.limit {
				t.Fatalf("history of %d records, limit %d", len(s.History), a.limit)
			}
			for _, r := range s.History {
				if r.ID == 0 || r.ID >= s.NextID {
					t.Fatalf("record id %d, next %d", r.ID, s.NextID)
				}
			}
			if s.Epoch > 0 && s.Holder == "" {
				t.Fatalf("entry %q: epoch %d held by nobody", e, s.Epoch)
			}
		}
		if x, y := stateJSON(t, a), stateJSON(t, b); x != y {
			t.Fatalf("same entries, different states:\n%s\n%s", x, y)
		}
		if (a.Halted() == nil) != (b.Halted() == nil) {
			t.Fatalf("same entries, one halted: %v, %v", a.Halted(), b.Halted())
		}
		if a.Halted() != nil {
			// It stopped at an entry of a newer version: no snapshot.
			if _, err := a.Snapshot(); err == nil {
				t.Fatal("a halted FSM took a snapshot")
			}
			return
		}
		snap, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sink := &memSink{}
		if err := snap.Persist(sink); err != nil {
			t.Fatal(err)
		}
		c := NewFSM(a.limit)
		if err := c.Restore(nopCloser{bytes.NewReader(sink.Bytes())}); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if x, y := stateJSON(t, a), stateJSON(t, c); x != y {
			t.Fatalf("snapshot restored differently:\n%s\n%s", x, y)
		}
	})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// TestRefusedCommandsChangeNothing: commands no node ever commits are
// refused, and leave the state as it was.
func TestRefusedCommandsChangeNothing(t *testing.T) {
	for _, c := range []Command{
		{Op: OpAcquire},
		{Op: OpState, Epoch: 2, State: HolderMounted},
		{Op: OpState, Node: "b", Epoch: 2, State: "bogus"},
		{Op: OpRelease, Epoch: 2},
		{Op: OpStandby, Flag: true},
		{Op: OpRecord},
		{Op: OpRecord, Record: &fencing.Record{ID: 1 << 63, Kind: fencing.KindConfirm, Target: "a", Outcome: fencing.OutcomeSuccess}},
		{Op: OpState, Node: "a", Epoch: 1, State: HolderMounted}, // stale
		{Op: "nope"},
	} {
		f := fuzzFSM(t)
		before := stateJSON(t, f)
		data, _ := json.Marshal(c)
		if _, ok := f.Apply(&raft.Log{Index: 100, Data: data}).(error); !ok {
			t.Errorf("%+v applied", c)
		}
		if after := stateJSON(t, f); after != before {
			t.Errorf("%+v refused but changed the state", c)
		}
	}
}

// FuzzGossipFrame runs the guard's checks on arbitrary first bytes of a
// stream and of a datagram: no panic; an accepted stream announces a
// length within the limits, and memberlist can read from it the header
// and at most that many bytes more, however many follow; an accepted
// datagram can be an encrypted memberlist packet.
func FuzzGossipFrame(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0, 29, 1, 2, 3})
	f.Add([]byte{10, 0, 0x40, 0, 0})
	f.Add([]byte{10, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{244, 3, 'a', 'b', 'c', 10, 0, 0, 0, 40})
	f.Add([]byte{6, 0x83, 0xa4})
	f.Add(append([]byte{1}, bytes.Repeat([]byte{0}, 40)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := checkGossipPacket(b); err == nil && (len(b) < minGossipFrame || b[0] > 1) {
			t.Fatalf("datagram %x accepted", b)
		}
		head, n, err := readGossipHeader(bytes.NewReader(b))
		if err != nil {
			return
		}
		if n < minGossipFrame || n > maxGossipFrame || !bytes.Equal(head, b[:5]) || b[0] != gossipEncryptMsg {
			t.Fatalf("header %x accepted as %x, length %d", b[:5], head, n)
		}
		// What memberlist reads through the screened stream.
		client, server := net.Pipe()
		go func() {
			client.Write(b[5:])
			client.Close()
		}()
		sc := &screenedConn{Conn: server, head: head, left: int64(n), budget: newByteBudget(1 << 30), release: func() {}}
		got, _ := io.ReadAll(sc)
		sc.Close()
		if want := 5 + min(len(b)-5, int(n)); len(got) != want || !bytes.Equal(got, b[:want]) {
			t.Fatalf("read %d bytes through the screened stream, want %d", len(got), want)
		}
		if sc.budget.left != 1<<30 {
			t.Fatalf("budget not given back: %d left", sc.budget.left)
		}
	})
}
