package main

import (
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// systemdNotifier sends sd_notify states when NOTIFY_SOCKET is set.
func systemdNotifier(log *slog.Logger) func(string) {
	return func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			log.Warn("sd_notify", "state", state, "err", err)
		}
	}
}

// watchdogInterval is systemd's WatchdogSec for this process, or 0.
func watchdogInterval() time.Duration {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d
}
