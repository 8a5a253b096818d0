package daemon

import (
	"log/slog"
	"os"
	"time"
)

// selfFence resets this node because it may still hold the storage and can
// no longer prove it stopped. With a watchdog device configured, it opens the
// device and stops feeding it, then asks the kernel for an immediate reboot
// (sysrq) so the reset does not wait for the watchdog's timeout. Without
// one, the process exits hard; systemd's watchdog or restart then applies.
//
// armed means the daemon's own handle on the watchdog is armed and no
// longer fed: it fires by itself.
func selfFence(device string, armed bool, log *slog.Logger, reason string) {
	log.Error("SELF-FENCE", "reason", reason, "watchdog", device, "armed", armed)
	if device != "" {
		if armed {
			// Already armed and no longer fed: it fires by itself.
		} else if f, err := os.OpenFile(device, os.O_WRONLY, 0); err == nil {
			// Opening arms the watchdog; never writing to it (nor the magic
			// close character) lets it fire.
			_ = f
		} else {
			log.Error("self-fence: watchdog", "err", err)
		}
		if err := os.WriteFile("/proc/sysrq-trigger", []byte("b"), 0); err != nil {
			log.Error("self-fence: sysrq reboot", "err", err)
		}
		time.Sleep(time.Second)
	}
	os.Exit(70)
}
