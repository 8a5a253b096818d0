package quorum

import (
	"context"
	"net"
	"time"
)

// A new raft connection is needed exactly when it matters most: a candidate
// dials the voters it never talked to as a follower (followers exchange
// nothing), and a new leader dials its followers for the first
// AppendEntries, which carries its grant. Under packet loss one dial is
// slow for a reason TCP cannot help: a lost SYN or SYN-ACK is resent only
// after 1 s, then 3 s, and a connection whose handshake needed a resend
// starts with a 3 s retransmission timeout for its data (RFC 6298 §5.7;
// Linux does so), so a TLS handshake on it stalls too. At 33 % loss each
// way a handshake round trip gets through only 45 % of the time: the vote
// request missed raft's 2 s dial timeout, and the candidate waited a whole
// election timeout to ask again.
//
// hedgedDial starts a further attempt every `every` while none has
// completed, at most `most` in all, and returns the first that completes
// (TCP and TLS handshake both); the others are closed when they complete.
// On a clean network the first attempt completes within a round trip and
// no other starts. The peer sees the losers as connections closed before
// any RPC, which raft's accept loop discards quietly.
//
// When every attempt started has failed it returns the error that came
// back first.
func hedgedDial(timeout, every time.Duration, most int, dial func(ctx context.Context) (net.Conn, error)) (net.Conn, error) {
	// The attempts share one deadline, and the losers may finish their
	// handshake after the winner has returned: cut off mid-handshake, they
	// would look to the peer like a stranger that gave up.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	type result struct {
		c   net.Conn
		err error
	}
	results := make(chan result, most)
	start := func() {
		go func() {
			c, err := dial(ctx)
			results <- result{c, err}
		}()
	}
	start()
	started, finished := 1, 0
	var firstErr error
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case r := <-results:
			finished++
			if r.err == nil {
				// Close the losers as they come back, off this path.
				go func(n int) {
					defer cancel()
					for range n {
						if l := <-results; l.err == nil {
							l.c.Close()
						}
					}
				}(started - finished)
				return r.c, nil
			}
			if firstErr == nil {
				firstErr = r.err
			}
			if finished == started {
				cancel()
				return nil, firstErr
			}
		case <-tick.C:
			if started < most && ctx.Err() == nil {
				start()
				started++
			}
		}
	}
}

// Raft's dials are hedged every dialHedgeEvery, at most dialHedgeMost
// attempts in all: a fifth of the 1 s SYN timeout, so that a loss costs a
// fifth of a second rather than a second or three, and spread over most of
// raft's 2 s dial timeout, so that an attempt started late can still win
// (at 33 % loss each way a SYN and its answer both get through 45 % of the
// time: six attempts all lose theirs 3 % of the time). A refusal (a peer
// without this node's key) comes back at once and starts no other.
const (
	dialHedgeEvery = 200 * time.Millisecond
	dialHedgeMost  = 6
)
