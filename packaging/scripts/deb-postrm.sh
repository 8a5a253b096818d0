#!/bin/sh
# Debian's postrm (the rpm's is postremove.sh). /var/lib/fenced is left
# alone, even on purge, unless empty (dpkg removes it then): it holds this
# node's raft log, and a node that silently forgets its vote could vote
# twice in one term. Delete it by hand once the node is out of the cluster.
#
# A purge removes the group preinstall created: a system group nobody was
# put in. One an administrator made (a gid outside the system range) or
# added users to stays: it is in use beyond this package.
set -e
case "$1" in
remove | purge)
	rmdir /run/fenced 2>/dev/null || true
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
esac
if [ "$1" = purge ] && entry=$(getent group fenced); then
	gid=$(echo "$entry" | cut -d: -f3)
	members=$(echo "$entry" | cut -d: -f4)
	if [ "$gid" -lt 1000 ] && [ -z "$members" ]; then
		groupdel fenced || true
	fi
fi
