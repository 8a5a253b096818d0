//go:build faultinject

package daemon

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/quorum"
)

// Fault injection for tests, compiled only with the faultinject build tag:
// the packaged daemon has none of it.

// FaultStallEnv names a test-only fault: after the given duration
// (e.g. "3s") the daemon's main loop stops making progress, as if it were
// stuck, so tests can see the service watchdog stop being fed.
const FaultStallEnv = "FENCED_FAULT_STALL_AFTER"

func stallFromEnv() time.Duration {
	v := os.Getenv(FaultStallEnv)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

var stalled atomic.Bool

// injectedStall blocks the calling loop for good once the configured stall
// time has passed.
func (d *Daemon) injectedStall() {
	if d.life.stallAfter > 0 && quorum.Since(d.life.started) > d.life.stallAfter {
		if stalled.CompareAndSwap(false, true) {
			d.log.Error("FAULT INJECTION: main loop stalled", "env", FaultStallEnv)
		}
		select {} // stuck for good
	}
}

// FaultSysrqEnv names a test-only setting: the file a self-fence writes its
// sysrq request to instead of /proc/sysrq-trigger (a stand-in the test
// watches; a test must never reboot the machine it runs on). Unset, the
// test build refuses the reboot.
const FaultSysrqEnv = "FENCED_FAULT_SYSRQ"

func sysrqReboot() error {
	path := os.Getenv(FaultSysrqEnv)
	if path == "" {
		return errors.New("sysrq refused (test build, " + FaultSysrqEnv + " unset)")
	}
	return os.WriteFile(path, []byte("b"), 0)
}
