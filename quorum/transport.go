package quorum

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// kickTransport wraps raft's transport so that this node can hand its own
// raft a TimeoutNow: what a leader sends the node it transfers leadership
// to. raft then stands for election at once, without the pre-vote, and its
// vote requests say so, so voters that still believe in the old leader
// grant them. The Detector uses it once a majority agrees the leader is
// silent (see Detector.watch); raft's safety (one leader a term, a majority
// of votes) is untouched.
type kickTransport struct {
	raft.Transport
	id   string // this node's raft ID
	in   chan raft.RPC
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func newKickTransport(t raft.Transport, id string) *kickTransport {
	k := &kickTransport{Transport: t, id: id, in: make(chan raft.RPC), stop: make(chan struct{})}
	k.wg.Add(1)
	go k.forward()
	return k
}

// forward passes the real RPCs on.
func (k *kickTransport) forward() {
	defer k.wg.Done()
	src := k.Transport.Consumer()
	for {
		select {
		case <-k.stop:
			return
		case rpc, ok := <-src:
			if !ok {
				return
			}
			select {
			case k.in <- rpc:
			case <-k.stop:
				rpc.Respond(nil, raft.ErrTransportShutdown)
				return
			}
		}
	}
}

// Consumer implements raft.Transport.
func (k *kickTransport) Consumer() <-chan raft.RPC { return k.in }

// RequestPreVote keeps the inner transport's pre-vote (raft disables its
// pre-vote for transports without it).
func (k *kickTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if p, ok := k.Transport.(raft.WithPreVote); ok {
		return p.RequestPreVote(id, target, args, resp)
	}
	return errors.New("transport without pre-vote")
}

// kick hands this node's raft a TimeoutNow and waits for it to be taken.
func (k *kickTransport) kick(timeout time.Duration) error {
	resp := make(chan raft.RPCResponse, 1)
	// The header a peer of this protocol version sends (raft refuses the
	// request without it).
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(k.id), Addr: k.Transport.EncodePeer(raft.ServerID(k.id), k.Transport.LocalAddr())}
	rpc := raft.RPC{Command: &raft.TimeoutNowRequest{RPCHeader: hdr}, RespChan: resp}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case k.in <- rpc:
	case <-t.C:
		return errors.New("raft did not take the election request")
	case <-k.stop:
		return raft.ErrTransportShutdown
	}
	select {
	case r := <-resp:
		return r.Error
	case <-t.C:
		return errors.New("raft did not answer the election request")
	case <-k.stop:
		return raft.ErrTransportShutdown
	}
}

// Close stops forwarding (the inner transport is closed by its owner).
func (k *kickTransport) Close() error {
	k.once.Do(func() { close(k.stop) })
	k.wg.Wait()
	return nil
}
