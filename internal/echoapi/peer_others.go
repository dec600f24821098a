//go:build !linux

package echoapi

import (
	"context"
	"net"
)

// peerOf names a Unix socket's caller "unix": only Linux's SO_PEERCRED is read.
func peerOf(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*net.UnixConn); ok {
		return context.WithValue(ctx, peerKey, "unix")
	}
	return ctx
}
