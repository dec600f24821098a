package procinfo

import (
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
)

// This process's own listening socket is found among its sockets by the inode the
// kernel gives it, and a process that does not exist has none.
func TestSocketInodesFindsThisProcesssSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	got := SocketInodes("/proc", uint32(os.Getpid()))
	if !slices.Contains(got, st.Ino) {
		t.Errorf("sockets %v do not hold the listener's inode %d", got, st.Ino)
	}
	if got := SocketInodes("/proc", 0x7fffffff); got != nil {
		t.Errorf("a process that does not exist holds sockets %v", got)
	}
}
