#!/bin/sh
# Debian's preremove (the rpm's is preremove.sh). On removal, stop the daemon
# gracefully: it releases the storage and hands primacy over. Not on upgrade:
# see postinstall. deb-systemd-invoke (init-system-helpers, essential)
# honours policy-rc.d, as Debian asks of maintainer scripts. Whether the
# service is enabled is the admin's state and is kept, as Debian keeps it
# for every package: a reinstall comes back as it was.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	deb-systemd-invoke stop fenced.service >/dev/null || true
fi
