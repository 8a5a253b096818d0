#!/bin/sh
# Before unpacking, so /etc/fenced and friends can name the group.
# Members of group fenced may use the control socket (api.group in
# /etc/fenced/fenced.yaml), i.e. fencectl without sudo.
set -e
if ! getent group fenced >/dev/null 2>&1; then
	groupadd --system fenced
fi
