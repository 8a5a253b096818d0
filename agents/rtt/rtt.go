// Package rtt estimates how long a fence device takes to answer a request,
// so that an agent's request timeouts follow the device: the smoothed
// round-trip time and its variation of RFC 6298 (§2), and the back-off of a
// request that got no answer (§5.5) until the device answers again. It is
// shared by the agents that time their requests (ipmi, redfish); each picks
// the timeout its protocol needs from an Estimate.
package rtt

import (
	"sync"
	"time"
)

// Estimator is one device's round-trip estimate, fed by every request an
// agent times. The zero Estimator has seen no answer; it is safe for
// concurrent use.
type Estimator struct {
	mu sync.Mutex
	e  Estimate
}

// Sample adds one measured round trip (RFC 6298 §2.2, §2.3: the first sets
// the smoothed time and half of it as the variation, each later one moves
// them by 1/8 and 1/4). An answer ends any back-off.
func (m *Estimator) Sample(r time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &m.e
	if e.Samples == 0 {
		e.SRTT, e.RTTVar = r, r/2
	} else {
		d := e.SRTT - r
		if d < 0 {
			d = -d
		}
		e.RTTVar = (3*e.RTTVar + d) / 4
		e.SRTT = (7*e.SRTT + r) / 8
	}
	e.Samples++
	e.Backoff = 0
}

// Expired records a request given up without an answer after waited: the
// device is slower than that, so until it answers no timeout is shorter
// than twice the longest such wait (RFC 6298 §5.5).
func (m *Estimator) Expired(waited time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.e.Backoff = max(m.e.Backoff, 2*waited)
}

// Estimate returns the current estimate, all of it read at once.
func (m *Estimator) Estimate() Estimate {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e
}

// Estimate is a snapshot of an Estimator.
type Estimate struct {
	SRTT    time.Duration // smoothed round-trip time; 0 before any answer
	RTTVar  time.Duration // its variation
	Samples int           // answers measured
	Backoff time.Duration // twice the longest wait given up since the last answer
}

// Answered reports whether the device has answered a timed request.
func (e Estimate) Answered() bool { return e.Samples > 0 }

// Retransmit is the timeout after which a request without an answer is
// sent again, for a protocol that resends (IPMI over UDP): initial until
// the device has answered, then srtt + max(4·rttvar, srtt/4) (the srtt/4
// keeps a steady device from being resent to as soon as it is a little
// slower than usual), or the back-off when longer; never less than floor,
// never more than ceiling (which wins).
func (e Estimate) Retransmit(initial, floor, ceiling time.Duration) time.Duration {
	t := initial
	if e.Answered() {
		t = e.SRTT + max(4*e.RTTVar, e.SRTT/4)
	}
	return min(max(t, e.Backoff, floor), ceiling)
}

// Deadline bounds n requests in a row, for a protocol where a request cut
// short may still be carried out and whose requests vary in length with
// what they ask (Redfish over HTTP: a reset takes many times a GET): n
// times the longer of four smoothed round trips (once the device has
// answered) and the back-off, never less than floor (the configured
// timeout: a deadline only grows with the device's latency), never more
// than ceiling (which wins).
func (e Estimate) Deadline(n int, floor, ceiling time.Duration) time.Duration {
	per := e.Backoff
	if e.Answered() {
		per = max(per, 4*e.SRTT)
	}
	return min(max(time.Duration(n)*per, floor), ceiling)
}
