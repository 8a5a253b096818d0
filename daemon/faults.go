//go:build faultinject

package daemon

import (
	"os"
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

// injectedStall blocks the calling loop for good once the configured stall
// time has passed.
func (d *Daemon) injectedStall() {
	if d.stallAfter > 0 && quorum.Since(d.started) > d.stallAfter {
		if d.stalled.CompareAndSwap(false, true) {
			d.log.Error("FAULT INJECTION: main loop stalled", "env", FaultStallEnv)
		}
		select {} // stuck for good
	}
}
