package ipmi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/fenced/fenced/agents/rtt"
)

// Per-request timeouts that follow the BMC's latency.
//
// go-ipmi waits a fixed time for each reply and resends a fixed number of
// times: too short for a loaded BMC (a 300 ms path each way and a one
// second timeout leave little slack; at 2.5 s each way no request is ever
// answered in time), too long for a dead one. So the agent hands go-ipmi a
// UDP connection of its own (go-ipmi's proxy hook), which times every
// request, keeps a smoothed round-trip time and its variation as TCP does
// (RFC 6298, agents/rtt), and resends a request that has no answer after
// the derived timeout, doubling the wait each time, command_retries times
// before it gives up. Until the BMC has answered once the timeout is
// command_timeout; afterwards it is srtt + 4·rttvar (at least srtt/4 over
// srtt), between a floor (rtoFloor, or command_timeout if that is lower)
// and a ceiling (rtoCeiling, or command_timeout if that is higher). A BMC
// that answered in 1 ms is given up after 0.2 + 0.4 + 0.8 s; one that
// answers in 5 s is waited for. A reply to a request that was resent may
// answer any of its copies (Karn's ambiguity). Before the BMC's round trip
// is known, its time since the first copy is taken as the sample (an upper
// bound), so a slow BMC is learnt from its first answer. Once it is known,
// a reply that comes at least half a smoothed round trip after the last
// copy is taken as that copy's answer, and timed from it: timed from the
// first, every lost request would add most of a timeout to the estimate,
// and the next timeouts with it (a 5 ms BMC whose requests were each lost
// once went to a 10 s timeout in 20 requests). One that comes sooner
// answers an earlier copy, and is timed from the first.
const (
	rtoFloor   = 200 * time.Millisecond
	rtoCeiling = 10 * time.Second
	// noDeadline is go-ipmi's own per-request timeout: the connection
	// below gives up first (or the context ends).
	noDeadline = time.Hour
)

// errNoReply ends an exchange whose request was sent 1+retries times
// without an answer. It is deliberately not a timeout (go-ipmi would wait
// on until its own deadline).
var errNoReply = errors.New("no reply from the BMC")

// errInterrupted ends the wait of an exchange that was given up (a
// keep-alive an operation took the session from).
var errInterrupted = errors.New("request given up for another")

// estimator is one BMC's round-trip time (agents/rtt), shared by every
// session of an agent, with the bounds of its request timeout: IPMI over
// UDP resends a request that has no answer, so the timeout is RFC 6298's
// retransmission timeout.
type estimator struct {
	initial, floor, ceiling time.Duration
	rtt                     rtt.Estimator
}

func newEstimator(commandTimeout time.Duration) *estimator {
	return &estimator{initial: commandTimeout, floor: min(rtoFloor, commandTimeout), ceiling: max(rtoCeiling, commandTimeout)}
}

// sample adds one measured round trip.
func (e *estimator) sample(r time.Duration) { e.rtt.Sample(r) }

// rto is the current per-request timeout.
func (e *estimator) rto() time.Duration {
	return e.rtt.Estimate().Retransmit(e.initial, e.floor, e.ceiling)
}

// roundTrip returns srtt and the timeout; ok once a sample was taken.
func (e *estimator) roundTrip() (srtt, rto time.Duration, ok bool) {
	est := e.rtt.Estimate()
	return est.SRTT, est.Retransmit(e.initial, e.floor, e.ceiling), est.Answered()
}

// dialer gives go-ipmi a timedConn for its session's socket.
type dialer struct {
	est     *estimator
	retries int
	guard   *guard // checks the session's replies (integrity.go); nil: none
	made    func(*timedConn)
}

// Dial implements golang.org/x/net/proxy.Dialer, go-ipmi's UDP hook.
func (d dialer) Dial(network, addr string) (net.Conn, error) {
	ua, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		return nil, err
	}
	c, err := net.DialUDP(network, nil, ua)
	if err != nil {
		return nil, err
	}
	tc := &timedConn{UDPConn: c, est: d.est, retries: d.retries, guard: d.guard}
	if d.made != nil {
		d.made(tc)
	}
	return tc, nil
}

// timedConn is the UDP socket of one session: go-ipmi writes a request
// and reads until its reply; the connection resends the request when the
// timeout passes and gives up after the last resend (see the top of this
// file). go-ipmi serialises its exchanges on a socket, so one request is
// outstanding at a time.
type timedConn struct {
	*net.UDPConn
	est     *estimator
	retries int
	guard   *guard

	mu       sync.Mutex
	last     []byte    // the outstanding request
	expect   int       // the RMCP+ payload type that answers it; -1: any
	sentAt   time.Time // its first copy
	lastAt   time.Time // its latest copy
	sends    int
	wait     time.Duration // before the next resend (or giving up)
	next     time.Time
	deadline time.Time // go-ipmi's
	sampled  bool
	reading  bool
	intr     bool
	sid      uint32 // the BMC's ID of the session, from our requests
}

func (c *timedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.last = append(c.last[:0], b...)
	c.expect = replyType(b)
	c.sentAt = time.Now()
	c.lastAt = c.sentAt
	c.sends = 1
	c.wait = c.est.rto()
	c.next = c.sentAt.Add(c.wait)
	c.sampled = false
	c.intr = false
	// An authenticated RMCP+ IPMI request carries the BMC's session ID
	// in clear (session header: auth type, payload type, ID, ...).
	if len(b) >= 10 && b[0] == 0x06 && b[4] == 0x06 && b[5]&0x3f == 0 {
		if id := binary.LittleEndian.Uint32(b[6:10]); id != 0 {
			c.sid = id
		}
	}
	c.mu.Unlock()
	if c.guard != nil {
		c.guard.outbound(b)
	}
	return c.UDPConn.Write(b)
}

// sessionID is the BMC's ID of the session this socket carries, once known.
func (c *timedConn) sessionID() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sid
}

func (c *timedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *timedConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// errTimeout is go-ipmi's own deadline passing: a net timeout, as the
// socket would report it.
var errTimeout = fmt.Errorf("read: %w", os.ErrDeadlineExceeded)

func (c *timedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.reading = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.reading = false
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		if c.intr {
			c.intr = false
			c.mu.Unlock()
			return 0, errInterrupted
		}
		dl, next := c.deadline, c.next
		wake := next
		if !dl.IsZero() && dl.Before(wake) {
			wake = dl
		}
		// Under the lock, so that interrupt's own deadline wins.
		_ = c.UDPConn.SetReadDeadline(wake)
		c.mu.Unlock()

		n, err := c.UDPConn.Read(p)
		now := time.Now()
		if err == nil && c.guard != nil {
			drop, gerr := c.guard.inbound(p[:n])
			if gerr != nil {
				return 0, gerr
			}
			if drop {
				// Refused (integrity.go): as if it had not come.
				continue
			}
		}
		if err == nil {
			c.mu.Lock()
			rt := replyType(p[:n])
			// An RMCP+ request is answered in RMCP+ framing: an IPMI
			// v1.5 datagram then is a late copy of the answer to the
			// login's first request, resent on a cold contact.
			fits := c.expect < 0 || rt == c.expect
			sample := fits && !c.sampled && len(c.last) > 0
			if sample {
				c.sampled = true
			}
			sentAt, lastAt, sends := c.sentAt, c.lastAt, c.sends
			c.mu.Unlock()
			if !fits {
				// A late copy of an earlier answer (session setup replies
				// are not matched by go-ipmi): not ours.
				continue
			}
			if sample {
				// The first datagram after the request; if go-ipmi finds
				// it is a stray, the request keeps being resent.
				r := now.Sub(sentAt)
				if srtt, _, known := c.est.roundTrip(); sends > 1 && known && now.Sub(lastAt) >= srtt/2 {
					r = now.Sub(lastAt)
				}
				c.est.sample(r)
			}
			return n, nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return 0, err
		}
		c.mu.Lock()
		if c.intr {
			c.intr = false
			c.mu.Unlock()
			return 0, errInterrupted
		}
		if !c.deadline.IsZero() && !now.Before(c.deadline) {
			c.mu.Unlock()
			return 0, errTimeout
		}
		if now.Before(c.next) {
			c.mu.Unlock()
			continue
		}
		if c.sends > c.retries || len(c.last) == 0 {
			c.mu.Unlock()
			if c.guard != nil {
				if gerr := c.guard.outcome(); gerr != nil {
					return 0, gerr
				}
			}
			return 0, errNoReply
		}
		c.sends++
		c.wait = min(2*c.wait, c.est.ceiling)
		c.next = now.Add(c.wait)
		c.lastAt = now
		b := append([]byte(nil), c.last...)
		c.mu.Unlock()
		if _, err := c.UDPConn.Write(b); err != nil {
			return 0, err
		}
	}
}

// abandon gives the outstanding request up: it is not sent again, and the
// wait for its answer ends now. go-ipmi returns as soon as its caller's
// context ends, but leaves the exchange running underneath (its goroutine
// reads on), and the connection would go on resending the request until
// its retries ran out: a power command given up (a fence cancelled when
// its target was confirmed stopped) then reached a BMC that answered
// again, and powered off a node brought back since, unrecorded.
func (c *timedConn) abandon() {
	c.mu.Lock()
	c.last = c.last[:0]
	c.mu.Unlock()
	c.interrupt()
}

// interrupt ends the wait of a request in progress, if any.
func (c *timedConn) interrupt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading {
		c.intr = true
		_ = c.UDPConn.SetReadDeadline(time.Now())
	}
}

// replyType returns the RMCP+ payload type that answers the RMCP+ packet b
// (its own type; Open Session and RAKP requests are answered by the next
// one), or -1 for anything else (IPMI v1.5 framing, ASF).
func replyType(b []byte) int {
	// RMCP header: version 6, reserved, sequence, class 7 (IPMI); then
	// the session header, whose auth type 6 means RMCP+ and whose next
	// byte holds the payload type.
	if len(b) < 6 || b[0] != 0x06 || b[3]&0x1f != 0x07 || b[4] != 0x06 {
		return -1
	}
	pt := int(b[5] & 0x3f)
	switch pt {
	case 0x10, 0x12, 0x14: // Open Session request, RAKP 1, RAKP 3
		return pt + 1
	}
	return pt
}
