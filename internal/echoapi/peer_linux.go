package echoapi

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerOf names a Unix socket's caller by the credentials the kernel recorded at
// connect; other connections are named by their address as before.
func peerOf(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil || cred == nil {
		return context.WithValue(ctx, peerKey, "unix")
	}
	return context.WithValue(ctx, peerKey, fmt.Sprintf("unix uid=%d pid=%d", cred.Uid, cred.Pid))
}
