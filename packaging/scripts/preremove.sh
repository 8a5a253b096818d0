#!/bin/sh
# On removal (deb: "remove"; rpm: $1 = 0, the last version goes), stop the
# daemon gracefully: it releases the storage and hands primacy over. Not on
# upgrade: see postinstall.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl --no-reload disable --now fenced.service >/dev/null 2>&1 || true
	fi
	;;
esac
