#!/bin/sh
# Never enables or starts the service: the sample configuration must be
# edited first. Never restarts it on upgrade either: on the primary that is a
# failover; upgrade node by node (fencectl transfer, then restart).
set -e
if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create /usr/lib/tmpfiles.d/fenced.conf || true
fi
if [ ! -d /run/fenced ]; then
	mkdir -m 0755 /run/fenced
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
