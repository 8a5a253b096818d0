package sim

import (
	"time"
)

// simWatchdog is a node's watchdog device: armed by the daemon (opening
// it), fed while the daemon's lease is valid, and it resets the machine
// when it has not been fed for its timeout. Closing it with the magic
// character disarms it; closing it without, on a driver without magic
// close, disarms it too (the process exiting closes it).
type simWatchdog struct {
	n       *Node
	timeout time.Duration
	magic   bool
	armed   bool
	halted  bool  // a self-fence stopped feeding it for good
	fedAt   int64 // true time of the last feed
	tok     int
}

func newSimWatchdog(n *Node) *simWatchdog {
	t := n.timing()
	// Longer than grace (fenced validate requires it), within a lease.
	timeout := t.Grace + (t.Lease-t.Grace)/2
	return &simWatchdog{n: n, timeout: timeout, magic: !has(n.w.sc.NoMagic, n.id)}
}

// arm opens the device (or, already armed, feeds it).
func (wd *simWatchdog) arm() {
	if !wd.armed {
		wd.n.w.tracef("%s watchdog armed (timeout %s, magic close %t)", wd.n.name, wd.timeout, wd.magic)
		wd.halted = false
	}
	wd.armed = true
	wd.feed()
}

// feed restarts the timer.
func (wd *simWatchdog) feed() {
	if !wd.armed || wd.halted {
		return
	}
	w := wd.n.w
	wd.fedAt = w.now
	wd.tok++
	tok := wd.tok
	w.at(w.now+int64(wd.n.trueDur(wd.timeout)), func() {
		if wd.armed && wd.tok == tok && wd.n.on {
			wd.armed = false
			wd.n.reset("watchdog")
		}
	})
}

// disarm is the magic close.
func (wd *simWatchdog) disarm() {
	if wd.armed {
		wd.n.w.tracef("%s watchdog disarmed", wd.n.name)
	}
	wd.armed = false
	wd.tok++
}
