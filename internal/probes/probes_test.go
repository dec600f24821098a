//go:build linux

package probes_test

import (
	"context"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// recorder keeps copies of the CUDA calls of one process.
type recorder struct {
	mu      sync.Mutex
	pid     uint32
	calls   []probes.CUDACall
	threads []uint32
	exits   int
	// executables are the names in the process's identity records.
	executables []string
}

func (r *recorder) CUDACall(ev *probes.CUDACall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Pid == r.pid {
		r.calls = append(r.calls, *ev)
	}
}
func (r *recorder) CUDAThread(h *probes.EventHeader) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.Pid == r.pid {
		r.threads = append(r.threads, h.Tid)
	}
}
func (r *recorder) Sched(*probes.SchedSwitchIn) {}
func (r *recorder) Process(kind probes.EventKind, ev *probes.ProcessEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if kind == probes.KindExit && ev.Hdr.Pid == r.pid {
		r.exits++
	}
}
func (r *recorder) BlockIO(*probes.BlockIO)             {}
func (r *recorder) TCPRetransmit(*probes.TCPRetransmit) {}
func (r *recorder) identities() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.executables)
}

func (r *recorder) Identity(ev *probes.ProcessIdentity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Pid == r.pid {
		r.executables = append(r.executables, ev.Executable())
	}
}
func (r *recorder) NCCLCall(*probes.NCCLCall)        {}
func (r *recorder) RDMAAsync(*probes.RDMAAsyncEvent) {}

// Which processes a test's probes trace.
const (
	// traceNamed traces only the processes a test names with trace. Other packages'
	// tests run the same fake libraries at the same time, and their calls must not
	// reach node-wide counters such as drops.
	traceNamed = false
	// traceAllCUDA traces every process that calls CUDA, as a node collector does by
	// default: for processes known only once they run, and for the identity event the
	// kernel sends when it starts tracing a process itself.
	traceAllCUDA = true
)

func loadAndAttach(t *testing.T, paths fakegpu.Paths, traceAll bool) *probes.Probes {
	t.Helper()
	return loadAndAttachWith(t, paths, probes.Options{TraceAllCUDA: traceAll})
}

func loadAndAttachWith(t *testing.T, paths fakegpu.Paths, opts probes.Options) *probes.Probes {
	t.Helper()
	p, err := probes.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.AttachHost(); err != nil {
		t.Fatal(err)
	}
	for lib, name := range map[probes.Library]string{probes.LibCUDART: "libcudart.so.12", probes.LibCUDA: "libcuda.so.1", probes.LibHIP: "libamdhip64.so.5"} {
		att, isNew, err := p.AttachLibrary(filepath.Join(paths.LibDir, name), lib)
		if err != nil || !isNew {
			t.Fatalf("attach %s: new=%v err=%v", name, isNew, err)
		}
		if len(att.Missing) != 0 {
			t.Fatalf("%s lacks %v", name, att.Missing)
		}
	}
	return p
}

func runReader(t testing.TB, p *probes.Probes, h probes.Handler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx, h, func(err error) { t.Errorf("decode: %v", err) }); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	return func() {
		time.Sleep(50 * time.Millisecond) // let the reader drain what the last calls wrote
		cancel()
		<-done
	}
}

// trace adds processes to the kernel's traced set.
func trace(t *testing.T, p *probes.Probes, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if err := p.TracePID(uint32(pid)); err != nil {
			t.Fatal(err)
		}
	}
}

// traceWorkload releases a workload waiting at its gate, hands the events to h while
// it runs, and returns its report once it has exited and the reader has drained.
func traceWorkload(t *testing.T, p *probes.Probes, w *fakegpu.Workload, h probes.Handler) fakegpu.Result {
	t.Helper()
	stop := runReader(t, p, h)
	defer stop()
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return report
}

// Every API is seen exactly as often as the workload called it, with its arguments
// decoded from the real x86-64 SysV layout: dim3 by value in register pairs, stream
// on the stack, launch configs read through their pointer, copy kinds and sizes.
// Both ways of attaching: uprobe_multi links (Linux 6.6+), and one link per probe.
func TestEveryAPICallIsSeenOnceWithItsArguments(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	for name, perProbe := range map[string]bool{"uprobe_multi": false, "per_probe_links": true} {
		t.Run(name, func(t *testing.T) {
			everyAPICallSeenOnce(t, paths, loadAndAttachWith(t, paths, probes.Options{TraceAllCUDA: traceNamed, PerProbeLinks: perProbe}))
		})
	}
}

func everyAPICallSeenOnce(t *testing.T, paths fakegpu.Paths, p *probes.Probes) {
	if got := p.ProbeCount(); got != 10+2*len(probes.APIs) {
		t.Fatalf("probes attached: %d, want %d", got, 10+2*len(probes.APIs))
	}

	opts := fakegpu.Options{
		Gate: true, Steps: 4, GridBlocks: 96, BlockThreads: 128,
		Launches: 40, LaunchesEx: 8, DriverLaunches: 12, DriverLaunchesPtsz: 4, DriverLaunchesEx: 4,
		H2D: 8, H2DAsync: 4, D2H: 4, D2HAsync: 4, D2D: 4, D2DAsync: 4, H2H: 4, H2DBytes: 4 << 20,
		DriverH2D: 4, DriverH2DAsync: 4, DriverD2H: 4, DriverD2HAsync: 4, DriverD2D: 4, DriverD2DAsync: 4,
		DriverMemcpy: 4, DriverMemcpyAsync: 4,
		Allocs: 4, AsyncAllocs: 4, DriverAllocs: 4, AllocBytes: 3 << 20,
		Syncs: 12, StreamWaits: 4, DriverSyncs: 4,
		GraphCaptures: 2, GraphKernels: 3, GraphReplays: 8, DriverGraphLaunches: 4,
	}
	w := fakegpu.Start(t, paths, opts)
	rec := &recorder{pid: uint32(w.Pid)}
	trace(t, p, w.Pid)
	report := traceWorkload(t, p, w, rec)

	seen := map[string]int64{}
	requestedAllocs := map[string]int{}
	bytesByDir := map[probes.MemcpyKind]uint64{}
	launchStreams := map[string]map[uint64]int{}
	for _, c := range rec.calls {
		name := probes.APIName(c.Api)
		seen[name]++
		if c.Counted != 1 {
			t.Fatalf("%s: a record of a call the kernel did not count", name)
		}
		if c.Hdr.Tid != uint32(report.Tid) {
			t.Fatalf("%s on thread %d, the workload's dispatcher is %d", name, c.Hdr.Tid, report.Tid)
		}
		if c.Ret != 0 {
			t.Errorf("%s returned %d", name, c.Ret)
		}
		switch name {
		case "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx":
			if c.Grid != [3]uint32{96, 1, 1} || c.Block != [3]uint32{128, 1, 1} {
				t.Fatalf("%s grid %v block %v, want [96 1 1] [128 1 1]", name, c.Grid, c.Block)
			}
			if launchStreams[name] == nil {
				launchStreams[name] = map[uint64]int{}
			}
			launchStreams[name][c.Stream]++
		case "cudaMalloc", "cudaMallocAsync", "cuMemAlloc_v2":
			// The handle is the device pointer read back through the out-parameter.
			if c.Bytes == 0 || c.Handle == 0 {
				t.Fatalf("%s bytes %d handle %#x", name, c.Bytes, c.Handle)
			}
			if c.Bytes == 3<<20 {
				requestedAllocs[name]++
			}
		}
		if k := probes.MemcpyKind(c.MemcpyKind); k.Direction() != "" && k != probes.MemcpyNone {
			bytesByDir[k] += c.Bytes
		}
	}
	for api, want := range report.Calls {
		if probes.APIName(apiIDOf(api)) == "unknown" {
			continue // workload helpers that are not probed (cudaEventRecord ...)
		}
		if seen[api] != want {
			t.Errorf("%s: probes saw %d calls, workload made %d", api, seen[api], want)
		}
	}
	// The workload also allocates its own copy buffers; the 3 MiB ones are the test's.
	for _, api := range []string{"cudaMalloc", "cudaMallocAsync", "cuMemAlloc_v2"} {
		if requestedAllocs[api] != 4 {
			t.Errorf("%s: %d allocations of 3 MiB seen, want 4", api, requestedAllocs[api])
		}
	}
	// cuMemcpy/cuMemcpyAsync take unified addresses and name no direction, so their
	// bytes are "default" although the workload copied host to device with them.
	unified := uint64(opts.DriverMemcpy+opts.DriverMemcpyAsync) * uint64(opts.H2DBytes)
	if got := bytesByDir[probes.MemcpyDefault]; got != unified {
		t.Errorf("default-direction bytes %d, want %d", got, unified)
	}
	wantH2D := uint64(report.Bytes.H2D+report.DriverBytes.H2D) - unified
	if bytesByDir[probes.MemcpyHostToDevice] != wantH2D {
		t.Errorf("host_to_device bytes %d, want %d", bytesByDir[probes.MemcpyHostToDevice], wantH2D)
	}
	if got, want := bytesByDir[probes.MemcpyDeviceToHost], uint64(report.Bytes.D2H+report.DriverBytes.D2H); got != want {
		t.Errorf("device_to_host bytes %d, want %d", got, want)
	}
	if got, want := bytesByDir[probes.MemcpyDeviceToDevice], uint64(report.Bytes.D2D+report.DriverBytes.D2D); got != want {
		t.Errorf("device_to_device bytes %d, want %d", got, want)
	}
	// Launches are read from the stack (cudaLaunchKernel, cuLaunchKernel*) or through
	// the launch config (the *Ex forms) at return. The workload issues them all on its
	// compute stream; cudaLaunchKernel also on the capture stream, for graph kernels.
	compute := launchStreams["cudaLaunchKernelExC"]
	if len(compute) != 1 {
		t.Fatalf("cudaLaunchKernelExC on streams %v, want one", compute)
	}
	for stream := range compute {
		if stream == 0 {
			t.Fatal("launch stream read as 0 (the legacy stream); the workload uses its own")
		}
		for _, api := range []string{"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx"} {
			if launchStreams[api][stream] != int(seen[api]) {
				t.Errorf("%s streams %v, want all %d on %#x", api, launchStreams[api], seen[api], stream)
			}
		}
		if n := launchStreams["cudaLaunchKernel"][stream]; n != opts.Launches || len(launchStreams["cudaLaunchKernel"]) != 2 {
			t.Errorf("cudaLaunchKernel streams %v, want %d on %#x and the graph kernels on the capture stream", launchStreams["cudaLaunchKernel"], opts.Launches, stream)
		}
	}
	if len(rec.threads) != 1 || rec.threads[0] != uint32(report.Tid) {
		t.Errorf("threads announced %v, want only the dispatcher %d", rec.threads, report.Tid)
	}
	checkCallStats(t, p, uint32(w.Pid), rec.calls)
	if n := p.InFlightCalls(uint32(report.Tid)); n != 0 {
		t.Errorf("%d calls still in flight after the workload exited", n)
	}
	drops, err := p.Drops()
	if err != nil || drops["ringbuf_full"] != 0 || drops["call_stats_full"] != 0 {
		t.Errorf("drops %v err %v", drops, err)
	}
	// Uprobes run in the calling thread, never in an interrupt, and the host programs
	// were not nested on this quiet a node: no run was skipped.
	if n, ok := drops["program_recursion"]; !ok || n != 0 {
		t.Errorf("program_recursion %d (reported %v), want 0", n, ok)
	}
}

// checkCallStats compares the kernel's statistics of pid with the records of every call
// (threshold 0): per API the same calls and bytes by copy kind, failures and summed
// duration, and a histogram holding each call in the bucket its duration belongs to.
func checkCallStats(t *testing.T, p *probes.Probes, pid uint32, calls []probes.CUDACall) {
	t.Helper()
	got := procStats(t, p, pid)
	if got == nil {
		t.Fatalf("no call statistics for pid %d", pid)
	}
	var want [probes.APICount]probes.CallStats
	bounds := expohisto.UpperBoundsNS(probes.DurationFirstIndex, probes.DurationBuckets-1)
	for _, c := range calls {
		s := &want[c.Api]
		k := probes.CopyKindIndex(probes.MemcpyKind(c.MemcpyKind))
		s.Calls[k]++
		s.Bytes[k] += c.Bytes
		s.DurationNs += c.DurationNs
		if c.Ret != 0 {
			s.Errors++
		}
		s.Buckets[sort.Search(len(bounds), func(i int) bool { return c.DurationNs <= bounds[i] })]++
	}
	for api := range want {
		if got.ByAPI[api] != want[api] {
			g, w := got.ByAPI[api], want[api]
			t.Errorf("%s: kernel counted %v calls, %v bytes, %d ns; records say %v, %v, %d (or the buckets differ)",
				probes.APIName(uint32(api)), g.Calls, g.Bytes, g.DurationNs, w.Calls, w.Bytes, w.DurationNs)
		}
	}
}

// A process killed in the middle of a call leaves nothing behind that userspace can
// see: the process leaves the traced set. Its in-flight slot and its threads'
// scheduling state are in task storage, which the kernel frees with each thread; a
// dead thread cannot be asked about (the kernel answers "no such entry" for any task
// that is gone), so the test checks that both were in use while the call stalled.
// Killed in each kind of blocking call: a stream, device or event sync, a synchronous
// copy.
func TestKilledMidCallLeavesNoInFlightEntry(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadAndAttach(t, paths, traceNamed)
	for _, where := range []string{"stream-sync", "device-sync", "event-sync", "memcpy"} {
		t.Run(where, func(t *testing.T) { killMidCall(t, paths, p, where) })
	}
}

func killMidCall(t *testing.T, paths fakegpu.Paths, p *probes.Probes, where string) {
	w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 1, Launches: 1, Stall: time.Minute, StallIn: where})
	rec := &recorder{pid: uint32(w.Pid)}
	trace(t, p, w.Pid)
	stop := runReader(t, p, rec)
	defer stop()
	pidfd, err := unix.PidfdOpen(w.Tid, unix.PIDFD_THREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.InFlightCalls(uint32(w.Tid)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := p.InFlightCallsOf(pidfd); n != 1 || err != nil {
		t.Fatalf("the stalled call should be the one in flight, found %d (%v)", n, err)
	}
	// Blocked in its stalled synchronization, the dispatcher is off CPU, and the host
	// programs keep when it left.
	if offCPU, _, err := p.SchedStateOf(pidfd); !offCPU || err != nil {
		t.Fatalf("no off-CPU start held for the stalled thread %d (%v)", w.Tid, err)
	}
	if !p.IsTraced(uint32(w.Pid)) {
		t.Fatalf("the stalled process is not in the traced set")
	}
	// Named before its first call, the process still sent its identity at that call,
	// with its whole executable name, for userspace to use once it is gone from /proc.
	deadline = time.Now().Add(5 * time.Second)
	for rec.identities() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	rec.mu.Lock()
	if len(rec.executables) != 1 || rec.executables[0] != "fakegpu-workload" {
		t.Errorf("identity records %q, want one of fakegpu-workload", rec.executables)
	}
	rec.mu.Unlock()

	w.Kill()
	<-w.Exited()
	time.Sleep(50 * time.Millisecond)
	if p.IsTraced(uint32(w.Pid)) {
		t.Fatalf("the killed process is still in the traced set")
	}
}

func apiIDOf(symbol string) uint32 {
	for _, a := range probes.APIs {
		if a.Symbol == symbol {
			return a.ID
		}
	}
	return 0
}
