//go:build linux

package probes_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

type retransmitRecorder struct {
	discard
	mu     sync.Mutex
	events []probes.TCPRetransmit
}

func (r *retransmitRecorder) TCPRetransmit(ev *probes.TCPRetransmit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, *ev)
}

// inNetns runs f on an OS thread that has joined network namespace ns: sockets are
// created in the namespace of the thread that creates them. The thread is not handed
// back to the scheduler.
func inNetns(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// A TCP connection between two network namespaces joined by a veth pair; the peer's
// end of the link goes down while data is in flight, so the sender's retransmit timer
// fires, and each retransmit must be reported with the connection's family, addresses,
// ports and socket inode (which names the process that holds it).
func TestTCPRetransmitsAreReportedForIPv4AndIPv6(t *testing.T) {
	privtest.Require(t)
	p, err := probes.Load(probes.Options{TraceAllCUDA: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.AttachHost(); err != nil {
		t.Fatal(err)
	}
	rec := &retransmitRecorder{}
	stop := runReader(t, p, rec)
	defer stop()

	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	client, server := fmt.Sprintf("fathom-c%d", os.Getpid()), fmt.Sprintf("fathom-s%d", os.Getpid())
	for _, c := range []struct {
		network, clientAddr, serverAddr, prefix string
		family                                  uint16
	}{
		{"tcp4", "10.99.0.1", "10.99.0.2", "/24", unix.AF_INET},
		{"tcp6", "fd99::1", "fd99::2", "/64", unix.AF_INET6},
	} {
		t.Run(c.network, func(t *testing.T) {
			ip("netns", "add", client)
			defer exec.Command("ip", "netns", "del", client).Run()
			ip("netns", "add", server)
			defer exec.Command("ip", "netns", "del", server).Run()
			ip("link", "add", "fathom-c", "netns", client, "type", "veth", "peer", "name", "fathom-s", "netns", server)
			ip("-n", client, "addr", "add", c.clientAddr+c.prefix, "dev", "fathom-c", "nodad")
			ip("-n", server, "addr", "add", c.serverAddr+c.prefix, "dev", "fathom-s", "nodad")
			ip("-n", client, "link", "set", "fathom-c", "up")
			ip("-n", server, "link", "set", "fathom-s", "up")

			var l net.Listener
			if err := inNetns(server, func() (err error) {
				l, err = net.Listen(c.network, net.JoinHostPort(c.serverAddr, "0"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var conn net.Conn
			if err := inNetns(client, func() (err error) {
				d := net.Dialer{Timeout: 5 * time.Second}
				conn, err = d.Dial(c.network, l.Addr().String())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The socket's inode, as /proc/PID/fd shows it: what names its owner.
			var ino uint64
			raw, err := conn.(*net.TCPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if err := raw.Control(func(fd uintptr) {
				var st unix.Stat_t
				if unix.Fstat(int(fd), &st) == nil {
					ino = st.Ino
				}
			}); err != nil || ino == 0 {
				t.Fatalf("socket inode %d: %v", ino, err)
			}
			ip("-n", server, "link", "set", "fathom-s", "down")
			if _, err := conn.Write(make([]byte, 4096)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second) // the first retransmit comes after one RTO, the next after twice that

			sport, dport := conn.LocalAddr().(*net.TCPAddr).Port, l.Addr().(*net.TCPAddr).Port
			want := net.ParseIP(c.serverAddr)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			n := 0
			for _, ev := range rec.events {
				daddr := net.IP(ev.Daddr[:16])
				if c.family == unix.AF_INET {
					daddr = net.IP(ev.Daddr[:4])
				}
				if ev.Family == c.family && int(ev.Sport) == sport && int(ev.Dport) == dport && daddr.Equal(want) {
					n++
					if ev.SockIno != ino {
						t.Errorf("retransmit of socket inode %d, want %d", ev.SockIno, ino)
					}
				}
			}
			if n < 1 {
				t.Fatalf("%d retransmits of %s :%d -> %s:%d seen, want at least one in 2 s (events: %d)", n, c.network, sport, c.serverAddr, dport, len(rec.events))
			}
			t.Logf("%s: %d retransmits of :%d -> %s:%d", c.network, n, sport, c.serverAddr, dport)
		})
	}
}
