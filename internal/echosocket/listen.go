// Package echosocket is the Echo API's Unix socket, both ends: the listener a
// standalone collector serves on, made so that nobody reaches it before it has its
// mode, and the HTTP client that `fathom mcp --socket` and tests call it with. Its
// errors name the echo setting (server.unix_socket.path), since that is what the
// operator typed.
package echosocket

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Listener is the Echo API's socket. It removes its own file on close, and only its
// own: a socket a later collector put at the same path is left alone.
type Listener struct {
	*net.UnixListener
	path  string
	inode uint64
}

// Listen binds the socket with its mode already set before anyone can reach
// it. A socket takes its mode from the umask at bind(), and a chmod() after it leaves
// a moment when the socket is open to whatever the umask allowed, and the umask is the
// whole process's, not one goroutine's. So the socket is bound in a private directory
// (0700) beside the final path, given its mode there, and renamed into place: nobody
// but the collector can reach it before it has its mode.
func Listen(path string, mode os.FileMode) (*Listener, error) {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("server.unix_socket.path %s: its directory %s: %w (create it first, e.g. systemd's RuntimeDirectory=fathom or a hostPath volume)", path, dir, err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("server.unix_socket.path %s: %s is not a directory", path, dir)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	private, err := os.MkdirTemp(dir, ".echo-sock-")
	if err != nil {
		return nil, fmt.Errorf("server.unix_socket.path %s: %w", path, err)
	}
	defer os.RemoveAll(private)
	staging := filepath.Join(private, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: staging, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("server.unix_socket.path %s: %w", path, err)
	}
	// The file is removed by close() below, by its final name.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(staging, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("server.unix_socket.path %s: mode %#o: %w", path, mode, err)
	}
	if err := os.Rename(staging, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("server.unix_socket.path %s: %w", path, err)
	}
	var inode uint64
	if st, err := os.Lstat(path); err == nil {
		inode = st.Sys().(*syscall.Stat_t).Ino
	}
	return &Listener{UnixListener: l, path: path, inode: inode}, nil
}

// removeStaleSocket clears the path for a new socket: a socket nobody answers on is
// what a collector that was killed leaves, and is removed; a socket someone answers on
// is another collector's store (two collectors must not serve one path), and any other
// file is not ours to delete.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("server.unix_socket.path %s: %w", path, err)
	}
	if st.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("server.unix_socket.path %s exists and is not a socket (%s); remove it or choose another path", path, st.Mode().Type())
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("server.unix_socket.path %s: another process is serving on this socket (a second collector?); stop it or choose another path", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("server.unix_socket.path %s: cannot tell whether the socket there is stale: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("server.unix_socket.path %s: removing a stale socket: %w", path, err)
	}
	return nil
}

// Close stops accepting and removes the socket file if it is still this listener's.
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	if st, serr := os.Lstat(l.path); serr == nil && st.Sys().(*syscall.Stat_t).Ino == l.inode {
		_ = os.Remove(l.path)
	}
	return err
}
