package daemon

import (
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/watchdog"
)

// The node's watchdog (watchdog.device): armed just before the mount intent
// is committed, so the advertisement in the replicated state is true from
// the moment the storage may start; fed only while the lease is valid; and
// disarmed once the storage stopped after a demotion. A node that cannot
// renew its lease stops feeding it at lease − margin and is reset at most
// the timeout later, which is what the watchdog fence level counts on.

// armWatchdog arms the watchdog if one is configured and returns the
// timeout to advertise (0: none). An armed watchdog is advertised only when
// its timer keeps counting after the daemon dies (watchdog.Keeps): the
// watchdog fence level counts on it resetting a node whose daemon was
// killed, not only one whose daemon stopped feeding it. One that would not
// still resets a node whose daemon hangs.
func (d *Daemon) armWatchdog() time.Duration {
	w := d.cfg.Watchdog
	if w.Device == "" {
		return 0
	}
	d.wdog.mu.Lock()
	defer d.wdog.mu.Unlock()
	if d.wdog.dev == nil {
		dev, err := watchdog.Arm(w.Device, w.Timeout.D())
		if err != nil {
			d.wdog.why = "not armed: " + err.Error()
			d.log.Error("watchdog not armed: it will not be advertised", "err", err)
			return 0
		}
		d.wdog.dev = dev
		d.life.tasks.Go(func() { d.feedWatchdog(dev) })
		keeps, why := dev.Keeps()
		d.wdog.why = why
		if keeps {
			d.log.Info("watchdog armed", "device", w.Device, "timeout", dev.Timeout(), "why_trusted", why)
		} else {
			d.log.Error("watchdog armed but not advertised: the watchdog fence level cannot count on it", "device", w.Device, "why", why)
		}
	}
	if keeps, _ := d.wdog.dev.Keeps(); !keeps {
		return 0
	}
	return d.wdog.dev.Timeout()
}

// watchdogStatus is the watchdog's state for status.
func (d *Daemon) watchdogStatus() *api.WatchdogStatus {
	w := d.cfg.Watchdog
	if w.Device == "" {
		return nil
	}
	d.wdog.mu.Lock()
	defer d.wdog.mu.Unlock()
	st := &api.WatchdogStatus{Device: w.Device, Note: d.wdog.why}
	if d.wdog.dev != nil {
		st.Armed = true
		st.TimeoutSec = d.wdog.dev.Timeout().Seconds()
		st.Advertised, _ = d.wdog.dev.Keeps()
	}
	return st
}

// feedWatchdog feeds dev while this node's lease is valid, until it is
// disarmed or abandoned.
func (d *Daemon) feedWatchdog(dev *watchdog.Device) {
	every := min(d.cfg.Timing.Heartbeat.D(), time.Second)
	if t := dev.Timeout(); t > 0 {
		every = min(every, t/4)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-d.life.hardCtx.Done():
			return
		case <-tick.C:
		}
		d.wdog.mu.Lock()
		armed := d.wdog.dev == dev
		d.wdog.mu.Unlock()
		if !armed {
			return
		}
		if v := d.ctl.view.Load(); v.actingUntil == 0 || d.now() >= v.actingUntil {
			continue // no valid lease: let it run out
		}
		if err := dev.Pet(); err != nil {
			d.log.Error("watchdog", "err", err)
		}
	}
}

// disarmWatchdog disarms the watchdog once nothing held runs any more.
func (d *Daemon) disarmWatchdog() {
	d.wdog.mu.Lock()
	dev := d.wdog.dev
	d.wdog.dev = nil
	d.wdog.mu.Unlock()
	if dev == nil {
		return
	}
	if err := dev.Disarm(); err != nil {
		d.log.Error("watchdog", "err", err)
		return
	}
	d.log.Info("watchdog disarmed: nothing held any more")
}

// holdWatchdog, for a self-fence: arms the watchdog if one is configured
// and not armed, and stops feeding it for good, keeping the device open (a
// driver without magic close stops its timer when the file closes). It
// reports whether one is armed.
func (d *Daemon) holdWatchdog() bool {
	w := d.cfg.Watchdog
	if w.Device == "" {
		return false
	}
	d.wdog.mu.Lock()
	defer d.wdog.mu.Unlock()
	if d.wdog.dev == nil {
		dev, err := watchdog.Arm(w.Device, w.Timeout.D())
		if err != nil {
			d.log.Error("self-fence: watchdog", "err", err)
			return false
		}
		d.wdog.dev = dev
	}
	d.wdog.dev.Halt()
	return true
}
