//go:build linux

package gpuebpfreceiver_test

import (
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/cgrouptest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// A rank streams to a peer over TCP, as NCCL's socket transport does, and for 700 ms
// every packet reaching its cgroup is dropped (a cgroup BPF program on ingress, so the
// ACKs are lost as on a flapping link; dropped on egress, TCP would know the segment
// never left and would not retransmit it). The kernel retransmits from a timer, in
// whatever task was running, yet every retransmit the node counts lands on that rank's
// own series, found by its socket's inode, and none on a rank that sends nothing.
func TestTCPRetransmitsLandOnTheRankThatOwnsTheSocket(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	peer, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	go func() {
		for {
			c, err := peer.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	cg := cgrouptest.Make(t, cgrouptest.Root(t), "fathom-tcp-e2e")
	start := func(opts fakegpu.Options) *fakegpu.Workload {
		opts.Gate, opts.Steps, opts.Launches, opts.StepGap = true, 600, 600, 10*time.Millisecond
		return fakegpu.Start(t, paths, opts)
	}
	sender := start(fakegpu.Options{TCPSend: peer.Addr().String(), TCPBytes: 8192, Env: []string{"RANK=0"}})
	quiet := start(fakegpu.Options{Env: []string{"RANK=1"}})
	// The socket is made after the gate, in the sender's cgroup: its packets are that
	// cgroup's.
	cgrouptest.Move(t, cg, sender.Pid)

	sink, _ := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none", false))
	for _, w := range []*fakegpu.Workload{sender, quiet} {
		if err := w.Release(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = w.Wait(time.Minute) })
	}
	rank := seriesKey(semconv.MetricRankTCPRetransmits, attrs())
	waitFor(t, sink, sender.Pid, "its retransmit series", func(v processView) bool { _, ok := v.series[rank]; return ok })
	node := seriesKey(semconv.MetricTCPRetransmits, attrs(semconv.NetworkType, "ipv4"))
	before := hostView(sink).series[node].value

	drop, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.CGroupSKB, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer drop.Close()
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupInetIngress, Program: drop})
	if err != nil {
		t.Fatal(err)
	}
	kernelBefore := retransSegs(t)
	time.Sleep(700 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Backed off, the last retransmit comes up to a few seconds after the link is back.
	var got, counted int64
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		got, counted = view(sink, sender.Pid).series[rank].value, hostView(sink).series[node].value-before
		if got > 0 && got == counted {
			break
		}
	}
	if got < 1 || got != counted {
		t.Fatalf("the sending rank carries %d retransmits; the node counted %d since the drop began", got, counted)
	}
	if v := view(sink, quiet.Pid).series[rank].value; v != 0 {
		t.Errorf("the rank that sends nothing carries %d retransmits", v)
	}
	t.Logf("%d retransmits, all on the sending rank; the kernel's RetransSegs rose by %d", got, retransSegs(t)-kernelBefore)
}

// retransSegs is the kernel's own count of retransmitted TCP segments (/proc/net/snmp).
func retransSegs(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(strings.TrimPrefix(line, "Tcp:"))
		if !strings.HasPrefix(line, "Tcp:") {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, name := range names {
			if name == "RetransSegs" && i < len(fields) {
				n, _ := strconv.ParseInt(fields[i], 10, 64)
				return n
			}
		}
	}
	t.Fatal("no RetransSegs in /proc/net/snmp")
	return 0
}
