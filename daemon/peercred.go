package daemon

import (
	"context"
	"net"
	"os/user"
	"strconv"

	"golang.org/x/sys/unix"
)

type peerKey struct{}

// peerContext records who is on the other end of an API connection (the
// kernel's SO_PEERCRED for the unix socket), so the history can say which
// user asked for a fence or a confirmation.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cred == nil {
		return ctx
	}
	name := strconv.Itoa(int(cred.Uid))
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return context.WithValue(ctx, peerKey{}, name)
}

// peerUser is the API caller's user name ("" if unknown).
func peerUser(ctx context.Context) string {
	s, _ := ctx.Value(peerKey{}).(string)
	return s
}
