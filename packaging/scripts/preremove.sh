#!/bin/sh
# The rpm's preremove (Debian's is deb-prerm.sh). When the last version goes
# ($1 = 0), disable and stop the daemon gracefully, as %systemd_preun does:
# it releases the storage and hands primacy over. Not on upgrade: see
# postinstall.
set -e
if [ "$1" = 0 ] && [ -d /run/systemd/system ]; then
	systemctl --no-reload disable --now fenced.service >/dev/null 2>&1 || true
fi
