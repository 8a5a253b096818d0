#!/bin/sh
# /var/lib/fenced is left alone, even on purge, unless empty (the package
# manager removes it then): it holds this node's raft log, and a node that
# silently forgets its vote could vote twice in one term. Delete it by hand
# once the node is out of the cluster. The rpm's; Debian's (deb-postrm.sh)
# also removes the group on purge. An rpm erase keeps it, as Fedora's
# guidelines ask: files may still name it.
set -e
case "$1" in
remove | purge | 0)
	rmdir /run/fenced 2>/dev/null || true
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
esac
