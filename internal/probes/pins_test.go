//go:build linux

package probes_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

func loadPinned(t *testing.T, paths fakegpu.Paths, opts probes.Options) *probes.Probes {
	t.Helper()
	p, err := probes.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	for lib, file := range map[probes.Library]string{probes.LibCUDART: paths.Cudart, probes.LibCUDA: paths.Cuda, probes.LibNCCL: paths.NCCL} {
		if _, _, err := p.AttachLibrary(file, lib); err != nil {
			p.Close()
			t.Fatal(err)
		}
	}
	return p
}

// A collector stops in the middle of a 4-rank job and the next one starts while rank 0
// is held before its second all-reduce: the next adopts what the kernel knows. The
// ranks are still traced (they were named, and the new collector never names them),
// and every NCCL call it sees carries the communicator the job set up under the first
// collector, with the sequence numbers running on. Ranks 1-3 wait inside their second
// all-reduce through the restart: the new collector sees those calls return, timed from
// the entry the first one recorded, because the entry lives in adopted task storage and
// the pending return keeps the kernel's uprobe, which the new link joins, alive. The
// job runs the blocking fake NCCL to hold an NCCL call open across the restart: with
// NCCL's asynchronous all-reduce (the fake's default) ranks 1-3 would wait in
// cudaStreamSynchronize instead, and their all-reduces would return before it.
func TestKernelStateOutlivesTheCollector(t *testing.T) {
	privtest.RequireBPFFS(t)
	paths := fakegpu.Build(t)
	opts := probes.Options{PinDir: collectortest.PinDir(t)}
	const ranks, hold = 4, 5 * time.Second

	first := loadPinned(t, paths, opts)
	if first.Adopted() {
		t.Fatal("the first collector adopted state from an empty pin directory")
	}
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: 2, KernelTime: 10 * time.Microsecond, Gate: true, NCCLMode: fakegpu.NCCLBlocking,
		Slow: &fakegpu.Slowness{Rank: 0, Delay: hold, FromStep: 1, Mode: "stall"},
	})
	before, after := newNCCLRecorder(), newNCCLRecorder()
	for _, r := range run.Ranks {
		before.watch(r.Pid)
		after.watch(r.Pid)
		trace(t, first, r.Pid)
	}
	stopFirst := runReader(t, first, before)
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	// Every rank's first all-reduce is done once rank 0 is held.
	deadline := time.Now().Add(30 * time.Second)
	for len(before.of(run.Ranks[0].Pid, probes.NCCLAllReduce)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("rank 0 never finished its first all-reduce")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	stopFirst()
	stoppedAt := time.Now()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := loadPinned(t, paths, opts)
	defer second.Close()
	restart := time.Since(stoppedAt)
	t.Logf("restarted in %s", restart.Round(time.Millisecond))
	if restart > hold/2 {
		t.Fatalf("the restart took %s, too close to rank 0's hold of %s for the test to mean anything", restart, hold)
	}
	if !second.Adopted() {
		t.Fatal("the second collector did not adopt the pinned state")
	}
	for _, r := range run.Ranks {
		if !second.IsTraced(uint32(r.Pid)) {
			t.Errorf("rank pid %d left the traced set across the restart", r.Pid)
		}
	}
	stopSecond := runReader(t, second, after)
	reports, err := run.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stopSecond()
	want := commHashOf(t, reports[0].UniqueID)
	for _, r := range reports {
		inits := before.of(r.Pid, probes.NCCLCommInitRank)
		first := before.of(r.Pid, probes.NCCLAllReduce)
		if len(inits) != 1 || inits[0].CommHash != want || len(first) != 1 || first[0].Seq != 0 || first[0].CommHash != want {
			t.Fatalf("rank %d before the restart: %d inits, all-reduces %+v", r.Rank, len(inits), first)
		}
		if n := len(after.of(r.Pid, probes.NCCLCommInitRank)); n != 0 {
			t.Errorf("rank %d: %d inits after the restart", r.Rank, n)
		}
		seen := after.of(r.Pid, probes.NCCLAllReduce)
		if len(seen) != 1 {
			t.Fatalf("rank %d: %d all-reduces seen after the restart, want its second", r.Rank, len(seen))
		}
		c := seen[0]
		if c.CommHash != want || c.Seq != 1 || c.Rank != int32(r.Rank) || c.Nranks != ranks || c.Comm != inits[0].Comm {
			t.Errorf("rank %d all-reduce after the restart: hash %#x (want %#x) seq %d rank %d nranks %d comm %#x (init %#x)",
				r.Rank, c.CommHash, want, c.Seq, c.Rank, c.Nranks, c.Comm, inits[0].Comm)
		}
		// Inside the time the rank measured around the call; for ranks 1-3 that is
		// the whole of rank 0's hold, entry before the restart included.
		if int64(c.Hdr.TsNs) < r.AllReduceEntryNS[1] || int64(c.Hdr.TsNs+c.DurationNs) > r.AllReduceExitNS[1] {
			t.Errorf("rank %d: probes saw [%d, %d], the rank timed [%d, %d]", r.Rank, c.Hdr.TsNs, c.Hdr.TsNs+c.DurationNs, r.AllReduceEntryNS[1], r.AllReduceExitNS[1])
		}
		if d := time.Duration(c.DurationNs); r.Rank != 0 && d < hold-time.Second {
			t.Errorf("rank %d waited %s in its second all-reduce by the probes, want about rank 0's hold of %s", r.Rank, d, hold)
		}
		destroys := after.of(r.Pid, probes.NCCLCommDestroy)
		if len(destroys) != 1 || destroys[0].CommHash != want || destroys[0].Comm != inits[0].Comm {
			t.Errorf("rank %d: destroys after the restart %+v, want one of communicator %#x", r.Rank, destroys, want)
		}
	}
}

// State of other load options (or another build) is not adopted: it is removed, and
// the new collector starts afresh.
func TestKernelStateOfOtherOptionsIsNotAdopted(t *testing.T) {
	privtest.RequireBPFFS(t)
	paths := fakegpu.Build(t)
	dir := collectortest.PinDir(t)
	first := loadPinned(t, paths, probes.Options{PinDir: dir})
	if err := first.TracePID(uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	first.Close()
	old, err := os.ReadDir(dir)
	if err != nil || len(old) != 1 {
		t.Fatalf("pin directory holds %v (%v), want one build's state", old, err)
	}
	second := loadPinned(t, paths, probes.Options{PinDir: dir, TraceAllCUDA: true})
	defer second.Close()
	if second.Adopted() || second.IsTraced(uint32(os.Getpid())) {
		t.Errorf("state of other options was adopted (adopted %v)", second.Adopted())
	}
	if _, err := os.Stat(filepath.Join(dir, old[0].Name())); !os.IsNotExist(err) {
		t.Errorf("the other options' state %s is still there (%v)", old[0].Name(), err)
	}
	if _, err := probes.Load(probes.Options{PinDir: t.TempDir()}); err == nil {
		t.Error("a pin directory outside bpffs was accepted")
	}
}
