package daemon

import (
	"log/slog"
	"os"
	"strings"
	"time"
)

// exitSelfFenceFailed is the daemon's exit status after a self-fence that
// could not reset the node: the service manager starts it again, and the
// probe at its start tries the stop again (see driver.cannotReset).
const exitSelfFenceFailed = 70

// selfFence resets this node because it may still hold the storage and can
// no longer prove it stopped. It holds the watchdog (armed now if it was
// not) and stops feeding it, keeping the device open — a driver without
// magic close stops its timer when the file closes — then asks the kernel
// for an immediate reboot (sysrq). It reports whether a reset is under way:
// sysrq took the request (the machine reboots at once), or a watchdog is
// armed and will fire. Without either the machine keeps running, and the
// caller makes sure the cluster never takes that for stopped.
func (d *Daemon) selfFence(reason string) bool {
	device := d.cfg.Watchdog.Device
	d.log.Error("SELF-FENCE", "reason", reason, "watchdog", device)
	armed := d.holdWatchdog()
	if err := sysrqReboot(); err != nil {
		d.log.Error("self-fence: sysrq reboot refused", "err", err)
	} else {
		time.Sleep(time.Second) // the reboot is immediate; the watchdog, if any, follows
		return true
	}
	if armed {
		d.log.Error("self-fence: waiting for the watchdog to reset this node", "device", device)
		return true
	}
	d.log.Error("SELF-FENCE IMPOSSIBLE: no watchdog device and sysrq refused; this node stays listed as possibly running the group " +
		"until a fence that removes its power, or `fencectl confirm`")
	return false
}

// readBootID reads this machine's boot ID ("" when it cannot be read:
// fences of this node then count as of this boot, see driver.unfenceRule).
func readBootID(log *slog.Logger) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		log.Warn("boot ID unknown: an unfence after a fence will need an admin's consent", "err", err)
		return ""
	}
	return strings.TrimSpace(string(b))
}
