package main

import (
	"log/slog"

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
