package quorum

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestShutdownEndsForwardedHandlers: a forwarded request's handler runs
// under a context that Shutdown cancels, and Shutdown waits for it (a
// handler left running would outlive the daemon; before, Shutdown could
// wait up to 5 minutes for it).
func TestShutdownEndsForwardedHandlers(t *testing.T) {
	peers := []Peer{{Name: "a", Gossip: freeGossipAddr(t)}, {Name: "b", Gossip: freeGossipAddr(t)}}
	started := make(chan struct{})
	ended := make(chan error, 1)
	handler := func(ctx context.Context, from, method string, body []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	}
	log := slog.New(slog.DiscardHandler)
	a, err := JoinMembership(MembershipOptions{Self: "a", Peers: peers, Key: keyA, Logger: log}, Meta{Role: "secondary"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := JoinMembership(MembershipOptions{Self: "b", Peers: peers, Key: keyA, Logger: log, Handler: handler}, Meta{Role: "secondary"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); a.ml.NumMembers() < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the two nodes did not meet")
		}
		time.Sleep(20 * time.Millisecond)
	}
	body, _ := json.Marshal(1)
	go a.Call(context.Background(), "b", "block", body)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
	t0 := time.Now()
	b.Shutdown()
	if took := time.Since(t0); took > 5*time.Second {
		t.Fatalf("Shutdown took %s", took)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("handler context not cancelled")
		}
	default:
		t.Fatal("Shutdown returned while the handler still ran")
	}
	// After Shutdown, no handler starts.
	b.handleMsg([]byte(`{"id":99,"from":"a","method":"block"}`))
}

// TestReplyFromTheNodeAsked: a call takes its answer only from the node it
// asked (a reply with its ID from another node is refused), and call IDs
// start at a random point, so a late reply to an earlier run's call
// matches none of this run's.
func TestReplyFromTheNodeAsked(t *testing.T) {
	peers := []Peer{{Name: "a", Gossip: freeGossipAddr(t)}, {Name: "b", Gossip: freeGossipAddr(t)}}
	release := make(chan struct{})
	handler := func(ctx context.Context, from, method string, body []byte) ([]byte, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return json.Marshal("from b")
	}
	log := slog.New(slog.DiscardHandler)
	a, err := JoinMembership(MembershipOptions{Self: "a", Peers: peers, Key: keyA, Logger: log}, Meta{Role: "secondary"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := JoinMembership(MembershipOptions{Self: "b", Peers: peers, Key: keyA, Logger: log, Handler: handler}, Meta{Role: "secondary"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	if a.seq.Load() < 1<<20 && b.seq.Load() < 1<<20 {
		t.Fatalf("call ids start at %d and %d: not at a random point", a.seq.Load(), b.seq.Load())
	}
	for deadline := time.Now().Add(10 * time.Second); a.ml.NumMembers() < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the two nodes did not meet")
		}
		time.Sleep(20 * time.Millisecond)
	}
	type answer struct {
		body []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		out, err := a.Call(context.Background(), "b", "slow", nil)
		got <- answer{out, err}
	}()
	var id uint64
	for deadline := time.Now().Add(5 * time.Second); id == 0; time.Sleep(5 * time.Millisecond) {
		a.mu.Lock()
		for k := range a.pending {
			id = k
		}
		a.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the call never started")
		}
	}
	forged, _ := json.Marshal(rpcMsg{ID: id, Reply: true, From: "c", Body: json.RawMessage(`"from c"`)})
	a.handleMsg(forged)
	select {
	case r := <-got:
		t.Fatalf("the call took a reply from a node it did not ask: %s %v", r.body, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case r := <-got:
		if r.err != nil || string(r.body) != `"from b"` {
			t.Fatalf("answer %s %v", r.body, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer from b")
	}
}
