package sim

import (
	"time"
)

// network carries messages between node processes: each one is delayed
// independently (so messages reorder), may be lost, and is dropped when
// its link is cut at sending or at arrival, or when the receiving process
// is not the one it was sent to (it crashed or restarted meanwhile: the
// connection broke).
type network struct {
	w   *World
	n   int
	cut []bool // cut[from*n+to]: messages from → to are dropped
	// stall[from*n+to]: raft's stream from → to is stalled (its messages
	// are dropped, as TCP retransmitting under heavy loss delays them past
	// use); datagrams (beacons, renewal rounds, gossip calls) still pass.
	stall []bool
	loss  int // per mille
	slow  time.Duration
}

func newNetwork(w *World, n int) network {
	return network{w: w, n: n, cut: make([]bool, n*n), stall: make([]bool, n*n)}
}

func (nw *network) connected(from, to int) bool { return from == to || !nw.cut[from*nw.n+to] }

func (nw *network) delay() time.Duration {
	w := nw.w
	if w.sc.Quiet {
		return 500*time.Microsecond + uniform(w.rng, 0, nw.slow)
	}
	d := uniform(w.rng, 50*time.Microsecond, time.Millisecond)
	if w.rng.IntN(100) < 3 {
		d += uniform(w.rng, time.Millisecond, 30*time.Millisecond)
	}
	return d + uniform(w.rng, 0, nw.slow)
}

// send delivers fn to the process of node `to` that runs when the message
// is sent. extra is time the sender spends before the message leaves (a
// disk write, say).
func (nw *network) send(from, to int, extra time.Duration, fn func(p *proc)) {
	w := nw.w
	dst := w.nodes[to]
	p := dst.live()
	if p == nil || !nw.connected(from, to) {
		return
	}
	if nw.loss > 0 && w.rng.IntN(1000) < nw.loss {
		return
	}
	inc := p.inc
	w.after(extra+nw.delay(), func() {
		if !nw.connected(from, to) {
			return
		}
		dst.exec(inc, func() { fn(dst.proc) })
	})
}

// sendRaft is send for raft's own messages (its TCP streams), which a
// stall drops.
func (nw *network) sendRaft(from, to int, extra time.Duration, fn func(p *proc)) {
	if nw.stall[from*nw.n+to] {
		return
	}
	nw.send(from, to, extra, func(p *proc) {
		if !nw.stall[from*nw.n+to] {
			fn(p)
		}
	})
}

// stallLinks stalls raft's stream on each directed link whose bit in mask
// is set (randomCuts' order), and no other.
func (nw *network) stallLinks(mask uint64) { nw.setLinks(nw.stall, mask) }

// heal reconnects every link.
func (nw *network) heal() {
	clear(nw.cut)
}

// partition cuts the links between nodes in different groups (group[i] is
// node i's group).
func (nw *network) partition(group []int) {
	for a := range nw.n {
		for b := range nw.n {
			nw.cut[a*nw.n+b] = group[a] != group[b]
		}
	}
}

// bridge: the bridge node sees everyone; the others see only their own
// side (side[i]).
func (nw *network) bridge(bridge int, side []int) {
	for a := range nw.n {
		for b := range nw.n {
			nw.cut[a*nw.n+b] = a != bridge && b != bridge && side[a] != side[b]
		}
	}
}

// oneWay drops messages from → to only.
func (nw *network) oneWay(from, to int) {
	nw.cut[from*nw.n+to] = true
}

// randomCuts cuts each directed link whose bit is set in mask.
func (nw *network) randomCuts(mask uint64) { nw.setLinks(nw.cut, mask) }

// setLinks sets links[from*n+to] for each directed link, in order, to its
// bit of mask.
func (nw *network) setLinks(links []bool, mask uint64) {
	k := 0
	for a := range nw.n {
		for b := range nw.n {
			if a == b {
				continue
			}
			links[a*nw.n+b] = mask&(1<<(k%64)) != 0
			k++
		}
	}
}
