//go:build linux

package probes_test

import (
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// ncclRecorder keeps copies of the NCCL calls and verbs events of a set of processes.
type ncclRecorder struct {
	recorder
	mu    sync.Mutex
	pids  map[uint32]bool
	calls map[uint32][]probes.NCCLCall // by pid
	rdma  []probes.RDMAAsyncEvent
	qps   []probes.RDMAQueuePair
}

func newNCCLRecorder() *ncclRecorder {
	return &ncclRecorder{pids: map[uint32]bool{}, calls: map[uint32][]probes.NCCLCall{}}
}

func (r *ncclRecorder) watch(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pids[uint32(pid)] = true
}

func (r *ncclRecorder) NCCLCall(ev *probes.NCCLCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pids == nil || r.pids[ev.Hdr.Pid] {
		r.calls[ev.Hdr.Pid] = append(r.calls[ev.Hdr.Pid], *ev)
	}
}

func (r *ncclRecorder) RDMAAsync(ev *probes.RDMAAsyncEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pids == nil || r.pids[ev.Hdr.Pid] {
		r.rdma = append(r.rdma, *ev)
	}
}

func (r *ncclRecorder) RDMAQueuePair(ev *probes.RDMAQueuePair) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pids == nil || r.pids[ev.Hdr.Pid] {
		r.qps = append(r.qps, *ev)
	}
}

// of returns pid's calls of one API, in entry order.
func (r *ncclRecorder) of(pid int, api uint32) []probes.NCCLCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []probes.NCCLCall
	for _, c := range r.calls[uint32(pid)] {
		if c.Api == api {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hdr.TsNs < out[j].Hdr.TsNs })
	return out
}

func loadNCCL(t *testing.T, paths fakegpu.Paths, traceAll bool) *probes.Probes {
	t.Helper()
	p, err := probes.Load(probes.Options{TraceAllCUDA: traceAll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	att, isNew, err := p.AttachLibrary(paths.NCCL, probes.LibNCCL)
	if err != nil || !isNew {
		t.Fatalf("attach libnccl: new=%v err=%v", isNew, err)
	}
	if len(att.Missing) != 0 || len(att.APIs) != len(probes.NCCLAPIs) {
		t.Fatalf("libnccl: probed %v, missing %v", att.APIs, att.Missing)
	}
	return p
}

// traceDDP traces run's ranks, lets them go, and returns their NCCL calls and their
// reports once they are done.
func traceDDP(t *testing.T, p *probes.Probes, run *fakegpu.DDPRun) (*ncclRecorder, []fakegpu.DDPRank) {
	t.Helper()
	rec := newNCCLRecorder()
	for _, r := range run.Ranks {
		rec.watch(r.Pid)
		trace(t, p, r.Pid)
	}
	stop := runReader(t, p, rec)
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	reports, err := run.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	return rec, reports
}

// commHashOf is what every rank's probes must report: FNV-1a 64 of the 128 bytes of
// the ncclUniqueId the ranks were given.
func commHashOf(t *testing.T, uniqueIDHex string) uint64 {
	t.Helper()
	raw, err := hex.DecodeString(uniqueIDHex)
	if err != nil || len(raw) != 128 {
		t.Fatalf("unique id %q: %d bytes, %v", uniqueIDHex, len(raw), err)
	}
	h := fnv.New64a()
	h.Write(raw)
	return h.Sum64()
}

// 8 ranks x 200 steps, each an all-reduce and a grouped send/recv ring: every call is
// seen exactly once, on the right communicator, rank, size, bytes and sequence, and
// inside the time the rank itself measured around it.
func TestNCCLEightRanksEveryCallExact(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadNCCL(t, paths, traceNamed)
	const ranks, steps, bucket, ring = 8, 200, 64 << 10, 4096
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: steps, BucketBytes: bucket, RingBytes: ring, KernelTime: 10 * time.Microsecond, Gate: true,
	})
	rec, reports := traceDDP(t, p, run)
	if len(reports) != ranks {
		t.Fatalf("%d rank reports", len(reports))
	}
	want := commHashOf(t, reports[0].UniqueID)
	for _, r := range reports {
		inits := rec.of(r.Pid, probes.NCCLCommInitRank)
		if len(inits) != 1 {
			t.Fatalf("rank %d: %d ncclCommInitRank calls seen", r.Rank, len(inits))
		}
		init := inits[0]
		// rank is read from %edx: the unique id went on the stack, not in registers.
		if init.CommHash != want || init.Rank != int32(r.Rank) || init.Nranks != ranks || init.Comm == 0 || init.Ret != 0 {
			t.Fatalf("rank %d init: hash %#x (want %#x) rank %d nranks %d comm %#x ret %d",
				r.Rank, init.CommHash, want, init.Rank, init.Nranks, init.Comm, init.Ret)
		}
		ars := rec.of(r.Pid, probes.NCCLAllReduce)
		if len(ars) != steps {
			t.Fatalf("rank %d: %d all-reduces seen, made %d", r.Rank, len(ars), steps)
		}
		for s, c := range ars {
			if c.CommHash != want || c.Rank != int32(r.Rank) || c.Nranks != ranks || c.Comm != init.Comm ||
				c.Seq != uint64(s) || c.HasSeq != 1 || c.Bytes != bucket || c.Count != bucket/4 ||
				probes.NCCLDataType(c.Datatype) != "float32" || probes.NCCLRedOp(c.Redop) != "sum" ||
				c.Stream == 0 || c.Stream != ars[0].Stream || c.Peer != -1 || c.GroupDepth != 0 || c.Ret != 0 {
				t.Fatalf("rank %d all-reduce %d: %+v", r.Rank, s, c)
			}
			// The rank timed the call from outside; the probes' entry and return lie within.
			if int64(c.Hdr.TsNs) < r.AllReduceEntryNS[s] || int64(c.Hdr.TsNs+c.DurationNs) > r.AllReduceExitNS[s] {
				t.Fatalf("rank %d step %d: probes saw [%d, %d], the rank timed [%d, %d]", r.Rank, s,
					c.Hdr.TsNs, c.Hdr.TsNs+c.DurationNs, r.AllReduceEntryNS[s], r.AllReduceExitNS[s])
			}
		}
		for _, dir := range []struct {
			api  uint32
			peer int
		}{{probes.NCCLSend, (r.Rank + 1) % ranks}, {probes.NCCLRecv, (r.Rank + ranks - 1) % ranks}} {
			calls := rec.of(r.Pid, dir.api)
			if len(calls) != steps {
				t.Fatalf("rank %d: %d %s seen, made %d", r.Rank, len(calls), probes.NCCLAPIName(dir.api), steps)
			}
			for s, c := range calls {
				if c.Peer != int32(dir.peer) || c.Seq != uint64(s) || c.Bytes != ring || probes.NCCLDataType(c.Datatype) != "uint8" ||
					c.CommHash != want || c.Rank != int32(r.Rank) || c.GroupDepth != 1 || c.Ret != 0 {
					t.Fatalf("rank %d %s %d: %+v, want peer %d", r.Rank, probes.NCCLAPIName(dir.api), s, c, dir.peer)
				}
			}
		}
		for api, depth := range map[uint32]uint32{probes.NCCLGroupStart: 0, probes.NCCLGroupEnd: 1} {
			calls := rec.of(r.Pid, api)
			if len(calls) != steps {
				t.Fatalf("rank %d: %d %s seen, made %d", r.Rank, len(calls), probes.NCCLAPIName(api), steps)
			}
			for _, c := range calls {
				if c.GroupDepth != depth || c.CommHash != 0 {
					t.Fatalf("rank %d %s: %+v", r.Rank, probes.NCCLAPIName(api), c)
				}
			}
		}
		if d := rec.of(r.Pid, probes.NCCLCommDestroy); len(d) != 1 || d[0].CommHash != want || d[0].Comm != init.Comm {
			t.Fatalf("rank %d destroy: %+v", r.Rank, d)
		}
		if n := len(rec.calls[uint32(r.Pid)]); n != 1+5*steps+1 {
			t.Errorf("rank %d: %d NCCL calls seen, want %d", r.Rank, n, 1+5*steps+1)
		}
	}
	drops, err := p.Drops()
	if err != nil || drops["ringbuf_full"] != 0 || drops["entry_missing"] != 0 {
		t.Errorf("drops %v err %v", drops, err)
	}
}

// Rank 5 sleeps 40 ms before every all-reduce. From the probes' per-call records alone
// (matched across ranks by communicator hash and sequence) rank 5 enters last. With
// asynchronous collectives, as NCCL has them, every call returns at once on every rank
// (the others wait for rank 5 in their next stream sync, which this test does not
// probe); with the blocking fake the others wait for it inside the call.
func TestNCCLSlowRankShowsInPerCallRecords(t *testing.T) {
	for _, mode := range []string{fakegpu.NCCLAsync, fakegpu.NCCLBlocking} {
		t.Run(mode, func(t *testing.T) { testNCCLSlowRankPerCall(t, mode) })
	}
}

func testNCCLSlowRankPerCall(t *testing.T, mode string) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadNCCL(t, paths, traceNamed)
	const ranks, steps, slow, delay = 8, 100, 5, 40 * time.Millisecond
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: steps, BucketBytes: 64 << 10, KernelTime: 10 * time.Microsecond, Gate: true, NCCLMode: mode,
		Slow: &fakegpu.Slowness{Rank: slow, Delay: delay, Mode: "stall"},
	})
	rec := newNCCLRecorder()
	for _, r := range run.Ranks {
		rec.watch(r.Pid)
		trace(t, p, r.Pid)
	}
	stop := runReader(t, p, rec)
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	stop()

	// Group by (communicator, sequence), as the gateway does; ranks come from the records.
	type instance struct{ comm, seq uint64 }
	byInstance := map[instance]map[int32]probes.NCCLCall{}
	for _, r := range run.Ranks {
		for _, c := range rec.of(r.Pid, probes.NCCLAllReduce) {
			k := instance{c.CommHash, c.Seq}
			if byInstance[k] == nil {
				byInstance[k] = map[int32]probes.NCCLCall{}
			}
			byInstance[k][c.Rank] = c
		}
	}
	if len(byInstance) != steps {
		t.Fatalf("%d collective instances, want %d", len(byInstance), steps)
	}
	slowLast := 0
	var slowSum, othersSum float64
	for k, calls := range byInstance {
		if len(calls) != ranks {
			t.Fatalf("instance %+v seen on %d ranks", k, len(calls))
		}
		last := int32(-1)
		var lastEntry uint64
		for rank, c := range calls {
			if c.Hdr.TsNs > lastEntry {
				last, lastEntry = rank, c.Hdr.TsNs
			}
			if rank == slow {
				slowSum += float64(c.DurationNs)
			} else {
				othersSum += float64(c.DurationNs)
			}
		}
		if last == slow {
			slowLast++
		}
	}
	slowMean := slowSum / steps / 1e6
	othersMean := othersSum / steps / (ranks - 1) / 1e6
	t.Logf("rank %d entered last in %d/%d all-reduces; mean duration: rank %d %.2f ms, others %.2f ms", slow, slowLast, steps, slow, slowMean, othersMean)
	if slowLast*100 < 95*steps {
		t.Errorf("rank %d entered last in only %d of %d all-reduces", slow, slowLast, steps)
	}
	d := othersMean - slowMean
	if mode == fakegpu.NCCLBlocking && (d < 30 || d > 50) {
		t.Errorf("others' all-reduces last %.2f ms longer than rank %d's, want 30-50 ms", d, slow)
	}
	// A call that waited for rank 5 would take its 40 ms. One that did not still shares
	// this machine's two cores with seven peers: rank 5's enqueue wakes all seven from
	// their wait for it, and they can take its CPU before its call returns (CI saw rank
	// 5's mean at 1.56 ms). A quarter of the delay tells the two apart with room.
	if limit := float64(delay/time.Millisecond) / 4; mode == fakegpu.NCCLAsync && (othersMean > limit || slowMean > limit) {
		t.Errorf("all-reduces last %.2f ms (others) and %.2f ms (rank %d) on average: they wait for peers", othersMean, slowMean, slow)
	}
}

// Every entry program reads its arguments where x86-64 SysV puts them: one call of each
// probed function with distinctive counts, types, ops, roots and streams.
func TestNCCLEveryLayoutDecoded(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadNCCL(t, paths, traceAllCUDA)
	bin := filepath.Join(t.TempDir(), "nccl-ops")
	src := filepath.Join("testdata", "nccl_ops.c")
	cc := exec.Command("cc", "-O2", "-o", bin, src, "-I", filepath.Join(fakegpu.RepoRoot(), "internal", "fakegpu", "c"),
		"-L", paths.LibDir, "-l:libnccl.so.2", "-Wl,-rpath,"+paths.LibDir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	rec := newNCCLRecorder()
	stop := runReader(t, p, rec)
	cmd := exec.Command(bin)
	// The streams nccl-ops passes are made-up values that show where each argument is
	// read from; the asynchronous fake enqueues on real streams and would refuse them.
	// The blocking fake ignores the stream, so every call runs.
	cmd.Env = append(os.Environ(), "FAKENCCL_MODE="+fakegpu.NCCLBlocking)
	rec.pids = nil // record every process: the pid is known only once it runs
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nccl-ops: %v", err)
	}
	stop()
	var got struct {
		Comm, Split    uint64
		ConfigComm     uint64 `json:"config_comm"`
		All            []uint64
		UniqueID       string `json:"unique_id"`
		ConfigUniqueID string `json:"config_unique_id"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("nccl-ops output %q: %v", out, err)
	}
	calls := rec.calls[uint32(cmd.Process.Pid)]
	byAPI := map[string][]probes.NCCLCall{}
	for _, c := range calls {
		byAPI[probes.NCCLAPIName(c.Api)] = append(byAPI[probes.NCCLAPIName(c.Api)], c)
	}
	hash := commHashOf(t, got.UniqueID)
	one := func(api string) probes.NCCLCall {
		t.Helper()
		if len(byAPI[api]) == 0 {
			t.Fatalf("no %s seen; saw %d calls", api, len(calls))
		}
		return byAPI[api][0]
	}
	type want struct {
		count, stream uint64
		dtype, op     string
		peer          int32
		seq           uint64
	}
	for api, w := range map[string]want{
		"ncclAllReduce":     {11, 0x5001, "float32", "max", -1, 0},
		"ncclAllGather":     {12, 0x5002, "int64", "", -1, 1},
		"ncclReduceScatter": {13, 0x5003, "float16", "min", -1, 2},
		"ncclBroadcast":     {14, 0x5004, "bfloat16", "", 0, 3},
		"ncclBcast":         {15, 0x5005, "uint8", "", 0, 4},
		"ncclReduce":        {16, 0x5006, "float64", "prod", 0, 5},
		"ncclSend":          {17, 0x5007, "int32", "", 0, 0},
		"ncclRecv":          {17, 0x5008, "int32", "", 0, 0},
	} {
		c := one(api)
		sizes := map[string]uint64{"float32": 4, "int64": 8, "float16": 2, "bfloat16": 2, "uint8": 1, "float64": 8, "int32": 4}
		if c.Count != w.count || c.Stream != w.stream || probes.NCCLDataType(c.Datatype) != w.dtype ||
			probes.NCCLRedOp(c.Redop) != w.op || c.Peer != w.peer || c.Seq != w.seq || c.Bytes != w.count*sizes[w.dtype] ||
			c.Comm != got.Comm || c.CommHash != hash || c.Rank != 0 || c.Nranks != 1 {
			t.Errorf("%s: %+v, want %+v on comm %#x", api, c, w, got.Comm)
		}
	}
	if len(byAPI["ncclAllReduce"]) != 2 {
		t.Fatalf("%d all-reduces, want 2", len(byAPI["ncclAllReduce"]))
	}
	onSplit := byAPI["ncclAllReduce"][1]
	split := one("ncclCommSplit")
	// The split's own record cannot know rank and size; the all-reduce after the program
	// asked ncclCommUserRank and ncclCommCount does.
	if split.Comm != got.Split || split.CommHash == 0 || split.CommHash == hash || split.Rank != -1 || onSplit.Comm != got.Split ||
		onSplit.CommHash != split.CommHash || onSplit.Seq != 0 || onSplit.Count != 18 || onSplit.Rank != 0 || onSplit.Nranks != 1 {
		t.Errorf("split: %+v; all-reduce on it: %+v", split, onSplit)
	}
	cfg := one("ncclCommInitRankConfig")
	if cfg.Comm != got.ConfigComm || cfg.CommHash != commHashOf(t, got.ConfigUniqueID) || cfg.Rank != 0 || cfg.Nranks != 1 {
		t.Errorf("ncclCommInitRankConfig: %+v", cfg)
	}
	if a := one("ncclCommAbort"); a.CommHash != cfg.CommHash {
		t.Errorf("ncclCommAbort: %+v", a)
	}
	all := one("ncclCommInitAll")
	if all.Comm != got.All[0] || all.Nranks != 2 || all.CommHash == 0 {
		t.Errorf("ncclCommInitAll: %+v", all)
	}
	destroys := byAPI["ncclCommDestroy"]
	if len(destroys) != 4 {
		t.Fatalf("%d destroys, want 4", len(destroys))
	}
	for i, d := range destroys[1:3] { // all[0], all[1]: the ranks of ncclCommInitAll
		if d.CommHash != all.CommHash || d.Rank != int32(i) || d.Nranks != 2 {
			t.Errorf("destroy of InitAll rank %d: %+v", i, d)
		}
	}
}

// A port error injected into the fake libibverbs reaches the process's verbs event
// thread as one async event; the probes see exactly that one, with its type, port and
// device. The queue pair the rank creates on its NIC is seen once, with the NIC.
func TestRDMAAsyncPortErrorSeenOnce(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p, err := probes.Load(probes.Options{TraceAllCUDA: traceNamed})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	att, _, err := p.AttachLibrary(paths.IBVerbs, probes.LibIBVerbs)
	if err != nil || len(att.APIs) != 2 || len(att.Missing) != 0 {
		t.Fatalf("attach libibverbs: %+v %v", att, err)
	}
	fifo := filepath.Join(t.TempDir(), "ibv-events")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read-write: never blocks in open, whoever opens first.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: 1, Steps: 400, BucketBytes: 4096, KernelTime: 100 * time.Microsecond, IB: true, Gate: true,
		Env: []string{"FAKEIBV_EVENT_FIFO=" + fifo},
	})
	rec := newNCCLRecorder()
	rec.watch(run.Ranks[0].Pid)
	trace(t, p, run.Ranks[0].Pid)
	stop := runReader(t, p, rec)
	// Written before the gate opens: the FIFO holds the line until the rank's event
	// thread, started after the gate, parks in ibv_get_async_event and reads it. Written
	// 100 ms after the release, it came after the whole job once in CI: 400 steps of
	// 10 us kernels can end sooner than that. The 100 us kernels keep the job running
	// (over 40 ms of device time) long after the thread has read it.
	if _, err := w.WriteString("10 1\n"); err != nil {
		t.Fatal(err)
	}
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	reports, err := run.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if reports[0].IBEvents != 1 || reports[0].IBLastEvent != 10 {
		t.Fatalf("the rank got %d events, last %d", reports[0].IBEvents, reports[0].IBLastEvent)
	}
	if len(rec.rdma) != 1 {
		t.Fatalf("%d verbs events seen, want 1", len(rec.rdma))
	}
	ev := rec.rdma[0]
	if probes.IBVEventName(ev.EventType) != "PORT_ERR" || !probes.IBVFabricError(ev.EventType) || ev.Port != 1 || ev.DeviceName() != "mlx5_0" {
		t.Errorf("event %s port %d device %q", probes.IBVEventName(ev.EventType), ev.Port, ev.DeviceName())
	}
	// The fake numbers queue pairs from 0x100; IBV_QPT_RC is 2.
	if len(rec.qps) != 1 || rec.qps[0].DeviceName() != "mlx5_0" || rec.qps[0].QpNum != 0x100 || rec.qps[0].QpType != 2 {
		t.Errorf("queue pairs seen: %+v, want one RC pair 0x100 on mlx5_0", rec.qps)
	}
}

// A collective's host lead is measured from the last device wait of any thread of its
// process: kept by the process's statistics slot, or by tgid for a process that found
// every slot taken. Here there is one slot for two ranks, so one rank's waits go each
// way; the collectives come from the autograd-like thread, the syncs from the main
// thread. Each all-reduce is entered at least the step's host work after the previous
// step's sync, so a rank's leads add up to at least that, on either path.
func TestHostLeadWithAndWithoutAStatsSlot(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p, err := probes.Load(probes.Options{TraceAllCUDA: traceNamed, ProcSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for lib, file := range map[probes.Library]string{probes.LibNCCL: paths.NCCL, probes.LibCUDART: filepath.Join(paths.LibDir, "libcudart.so.12")} {
		if _, _, err := p.AttachLibrary(file, lib); err != nil {
			t.Fatal(err)
		}
	}
	const ranks, steps, buckets = 2, 60, 2
	host := 3 * time.Millisecond
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: steps, Buckets: buckets, BucketBytes: 16 << 10, KernelTime: 10 * time.Microsecond,
		HostCompute: host, HostComputeSleeps: true, Threads: fakegpu.ThreadsPyTorch, Gate: true,
	})
	rec, reports := traceDDP(t, p, run)
	stats, err := p.ReadCallStats(nil)
	if err != nil {
		t.Fatal(err)
	}
	withSlot := map[uint32]bool{}
	for _, s := range stats {
		withSlot[s.PID] = true
	}
	slotted := 0
	for _, r := range reports {
		if withSlot[uint32(r.Pid)] {
			slotted++
		}
		var lead time.Duration
		calls := rec.of(r.Pid, probes.NCCLAllReduce)
		for _, c := range calls {
			lead += time.Duration(c.HostLeadNs)
		}
		floor := time.Duration((steps-1)*buckets) * host
		ceiling := time.Duration(buckets * (r.EndNS - r.StartNS))
		t.Logf("rank %d (pid %d, statistics slot %v): %d all-reduces, host lead %v", r.Rank, r.Pid, withSlot[uint32(r.Pid)], len(calls), lead)
		if len(calls) != steps*buckets {
			t.Errorf("rank %d: %d all-reduces seen, want %d", r.Rank, len(calls), steps*buckets)
		}
		if lead < floor || lead > ceiling {
			t.Errorf("rank %d: host lead %v over its all-reduces, want between %v and %v", r.Rank, lead, floor, ceiling)
		}
	}
	if slotted != 1 {
		t.Errorf("%d of %d ranks had a statistics slot, want 1 (both paths tried)", slotted, ranks)
	}
}
