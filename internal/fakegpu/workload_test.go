package fakegpu

import (
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func or[T comparable](v, fallback T) T {
	var zero T
	if v == zero {
		return fallback
	}
	return v
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// expectedCalls is the test oracle: the exact per-API call counts fakegpu-workload must
// report for o, written from the workload's documented behaviour (setup, loop, stall,
// teardown), independently of its C code.
func expectedCalls(o Options) map[string]int64 {
	n := func(v int) int64 { return int64(v) }
	driver := o.DriverLaunches+o.DriverLaunchesPtsz+o.DriverLaunchesEx+o.DriverH2D+o.DriverH2DAsync+
		o.DriverD2H+o.DriverD2HAsync+o.DriverD2D+o.DriverD2DAsync+o.DriverMemcpy+o.DriverMemcpyAsync+
		o.DriverAllocs+o.DriverSyncs+o.DriverGraphLaunches > 0
	d := b2i(driver)
	captures := n(o.GraphCaptures)
	stall := o.Stall > 0
	stallIn := or(o.StallIn, "stream-sync")
	is := func(where string) int64 { return b2i(stall && stallIn == where) }
	syncs := n(o.Syncs)

	want := map[string]int64{
		"cudaGetDeviceCount":     1,
		"cudaSetDevice":          1,
		"cudaDeviceGetAttribute": 1,
		"cudaGetLastError":       1,
		"cudaStreamCreate":       3,
		"cudaStreamDestroy":      3,
		"cudaEventCreate":        2,
		"cudaEventDestroy":       2,
		"cudaEventRecord":        n(o.StreamWaits) + syncs/3 + is("event-sync"),
		"cudaEventSynchronize":   syncs/3 + is("event-sync"),
		"cudaStreamSynchronize":  (syncs+2)/3 + is("stream-sync"),
		"cudaDeviceSynchronize":  (syncs+1)/3 + 1 + is("device-sync"),
		"cudaStreamWaitEvent":    n(o.StreamWaits),
		"cudaLaunchKernel":       n(o.Launches) + captures*int64(or(o.GraphKernels, 8)) + b2i(stall),
		"cudaLaunchKernelExC":    n(o.LaunchesEx),
		"cudaMalloc":             4 + n(o.Allocs),
		"cudaFree":               4 + n(o.Allocs),
		"cudaMallocAsync":        n(o.AsyncAllocs),
		"cudaFreeAsync":          n(o.AsyncAllocs),
		"cudaMemcpy":             n(o.H2D+o.D2H+o.D2D+o.H2H) + is("memcpy"),
		"cudaMemcpyAsync":        n(o.H2DAsync + o.D2HAsync + o.D2DAsync),
		"cudaStreamBeginCapture": captures,
		"cudaStreamEndCapture":   captures,
		"cudaGraphInstantiate":   captures,
		"cudaGraphLaunch":        n(o.GraphReplays),
		// each capture replaces the previous graph; the last one goes at teardown
		"cudaGraphDestroy":     captures,
		"cudaGraphExecDestroy": captures,
		"cuInit":               d,
		"cuLaunchKernel":       n(o.DriverLaunches),
		"cuLaunchKernel_ptsz":  n(o.DriverLaunchesPtsz),
		"cuLaunchKernelEx":     n(o.DriverLaunchesEx),
		"cuMemAlloc_v2":        4*d + n(o.DriverAllocs),
		"cuMemFree_v2":         4*d + n(o.DriverAllocs),
		"cuMemcpy":             n(o.DriverMemcpy),
		"cuMemcpyAsync":        n(o.DriverMemcpyAsync),
		"cuMemcpyHtoD_v2":      n(o.DriverH2D),
		"cuMemcpyDtoH_v2":      n(o.DriverD2H),
		"cuMemcpyDtoD_v2":      n(o.DriverD2D),
		"cuMemcpyHtoDAsync_v2": n(o.DriverH2DAsync),
		"cuMemcpyDtoHAsync_v2": n(o.DriverD2HAsync),
		"cuMemcpyDtoDAsync_v2": n(o.DriverD2DAsync),
		"cuCtxSynchronize":     n(o.DriverSyncs)/2 + d,
		"cuStreamSynchronize":  (n(o.DriverSyncs) + 1) / 2,
		"cuGraphLaunch":        n(o.DriverGraphLaunches),
	}
	return want
}

func expectedBytes(o Options) (runtime, driver Bytes) {
	h2d, d2h := or(o.H2DBytes, 1<<20), or(o.D2HBytes, 64<<10)
	d2d, h2h := or(o.D2DBytes, 1<<20), or(o.H2HBytes, 4<<10)
	stallCopy := int64(0)
	if o.Stall > 0 && o.StallIn == "memcpy" {
		stallCopy = 1
	}
	runtime = Bytes{
		H2H: int64(o.H2H) * h2h,
		H2D: int64(o.H2D+o.H2DAsync) * h2d,
		D2H: (int64(o.D2H+o.D2HAsync) + stallCopy) * d2h,
		D2D: int64(o.D2D+o.D2DAsync) * d2d,
	}
	driver = Bytes{
		H2D: int64(o.DriverH2D+o.DriverH2DAsync+o.DriverMemcpy+o.DriverMemcpyAsync) * h2d,
		D2H: int64(o.DriverD2H+o.DriverD2HAsync) * d2h,
		D2D: int64(o.DriverD2D+o.DriverD2DAsync) * d2d,
	}
	return runtime, driver
}

func checkReport(t *testing.T, o Options, r Result) {
	t.Helper()
	want := expectedCalls(o)
	if !maps.Equal(r.Calls, want) {
		for api, n := range want {
			if r.Calls[api] != n {
				t.Errorf("calls[%s] = %d, want %d", api, r.Calls[api], n)
			}
		}
		for api := range r.Calls {
			if _, ok := want[api]; !ok {
				t.Errorf("unexpected API %s in report", api)
			}
		}
	}
	wantRuntime, wantDriver := expectedBytes(o)
	if r.Bytes != wantRuntime {
		t.Errorf("bytes = %+v, want %+v", r.Bytes, wantRuntime)
	}
	if r.DriverBytes != wantDriver {
		t.Errorf("driver_bytes = %+v, want %+v", r.DriverBytes, wantDriver)
	}
	for api, calls := range r.Calls {
		total, maxNS := r.TotalNS[api], r.MaxNS[api]
		if calls == 0 && (total != 0 || maxNS != 0) {
			t.Errorf("%s: no calls but total %d max %d ns", api, total, maxNS)
		}
		if calls > 0 && (maxNS <= 0 || maxNS > total || total > r.WallNS) {
			t.Errorf("%s: %d calls, total %d ns, max %d ns, wall %d ns: inconsistent", api, calls, total, maxNS, r.WallNS)
		}
	}
	if r.EndNS-r.StartNS != r.WallNS || r.WallNS <= 0 {
		t.Errorf("start %d end %d wall %d", r.StartNS, r.EndNS, r.WallNS)
	}
	if r.Steps != or(o.Steps, 10) {
		t.Errorf("steps = %d", r.Steps)
	}
}

// fastDevice keeps the timing model's costs small so count-oriented tests run quickly.
var fastDevice = Options{KernelTime: 5 * time.Microsecond, LaunchCost: time.Microsecond, GBps: 50}

func with(base Options, edit func(*Options)) Options {
	edit(&base)
	return base
}

func TestWorkloadReportsExactCounts(t *testing.T) {
	p := Build(t)
	cases := map[string]Options{
		"defaults": {},
		"training mix": with(fastDevice, func(o *Options) {
			o.Steps = 7 // does not divide the totals: uneven spreading must still be exact
			o.Launches, o.LaunchesEx = 1000, 13
			o.H2D, o.H2DAsync, o.D2H, o.D2HAsync, o.D2D, o.D2DAsync, o.H2H = 21, 22, 23, 24, 5, 6, 3
			o.H2DBytes, o.D2HBytes, o.D2DBytes, o.H2HBytes = 300000, 4096, 65536, 100
			o.Allocs, o.AsyncAllocs, o.AllocBytes = 3, 4, 8192
			o.Syncs, o.StreamWaits = 31, 9
			o.GraphCaptures, o.GraphKernels, o.GraphReplays = 3, 5, 40
			o.Env = []string{"RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=8", "FAKEGPU_DEVICES=2"}
		}),
		"driver API": with(fastDevice, func(o *Options) {
			o.DriverLaunches, o.DriverLaunchesPtsz, o.DriverLaunchesEx = 500, 17, 19
			o.DriverH2D, o.DriverH2DAsync, o.DriverD2H, o.DriverD2HAsync = 11, 12, 13, 14
			o.DriverD2D, o.DriverD2DAsync, o.DriverMemcpy, o.DriverMemcpyAsync = 2, 3, 4, 5
			o.DriverAllocs, o.DriverSyncs = 6, 7
			o.GraphCaptures, o.DriverGraphLaunches = 2, 9
		}),
		"inferred directions": with(fastDevice, func(o *Options) {
			o.DefaultKind = true
			o.H2D, o.H2DAsync, o.D2H, o.D2HAsync, o.D2D, o.D2DAsync, o.H2H = 4, 3, 2, 5, 6, 7, 8
		}),
		"dispatcher thread, gated, stall in memcpy": with(fastDevice, func(o *Options) {
			o.DispatcherThread, o.Gate = true, true
			o.Launches, o.D2H = 50, 5
			o.Stall, o.StallIn = 20*time.Millisecond, "memcpy"
		}),
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			r := Run(t, p, o)
			checkReport(t, o, r)
			if o.DispatcherThread == (r.Tid == r.Pid) {
				t.Errorf("pid %d tid %d with DispatcherThread=%v", r.Pid, r.Tid, o.DispatcherThread)
			}
			if name == "training mix" {
				if r.Rank == nil || *r.Rank != 3 || r.LocalRank == nil || *r.LocalRank != 1 || r.WorldSize == nil || *r.WorldSize != 8 {
					t.Errorf("rank/local_rank/world_size not echoed: %v %v %v", r.Rank, r.LocalRank, r.WorldSize)
				}
				want := GraphCounts{Captures: 3, Instantiations: 3, Launches: 40, CapturedKernels: 15}
				if r.Graph != want {
					t.Errorf("graph = %+v, want %+v", r.Graph, want)
				}
			} else if r.Rank != nil || r.WorldSize != nil {
				t.Errorf("rank %v world %v without RANK/WORLD_SIZE in the environment", r.Rank, r.WorldSize)
			}
		})
	}
}

func mean(r Result, api string) time.Duration {
	return time.Duration(r.TotalNS[api] / r.Calls[api])
}

// The durations the workload measures must follow the device model: copies at the
// configured bandwidth, kernels serialized on a stream, graphs replaying their kernels,
// syncs waiting for the device.
func TestWorkloadTimingFollowsTheDeviceModel(t *testing.T) {
	p := Build(t)

	t.Run("sync copies take size over bandwidth", func(t *testing.T) {
		// 4 MiB at 2 GB/s: 2.1 ms per copy, long enough to dwarf scheduling noise.
		o := Options{H2D: 10, D2H: 10, H2DBytes: 4 << 20, D2HBytes: 4 << 20, GBps: 2}
		r := Run(t, p, o)
		checkReport(t, o, r)
		// At least the modelled time: the fake's own sleep. How close it stays to it
		// is the machine's business (4 MiB copies took 8.8 ms against 2.1 once in CI,
		// beside a build), so BenchmarkDeviceModelTiming reports that instead.
		perCopy := time.Duration(float64(4<<20) / 2)
		if got := mean(r, "cudaMemcpy"); got < perCopy {
			t.Errorf("mean cudaMemcpy %v, shorter than the modelled %v", got, perCopy)
		}
	})

	t.Run("kernels serialize and syncs wait for them", func(t *testing.T) {
		// 10 steps x 40 kernels x 100us; each step ends in one sync that waits ~4 ms.
		o := Options{Launches: 400, Syncs: 10, KernelTime: 100 * time.Microsecond}
		r := Run(t, p, o)
		checkReport(t, o, r)
		device := 400 * 100 * time.Microsecond
		if wall := time.Duration(r.WallNS); wall < device {
			t.Errorf("wall %v shorter than the device time %v", wall, device)
		}
		syncs := time.Duration(r.TotalNS["cudaStreamSynchronize"] + r.TotalNS["cudaDeviceSynchronize"] + r.TotalNS["cudaEventSynchronize"])
		if syncs < device/2 {
			t.Errorf("syncs waited %v in total; launches are asynchronous, so most of %v should be there", syncs, device)
		}
		// Launches returning at once (mean well under the 100 us kernel) is a timing,
		// reported by BenchmarkDeviceModelTiming; the syncs holding the device time,
		// above, already show that launches do not wait.
	})

	t.Run("graph replay runs all captured kernels", func(t *testing.T) {
		o := Options{Steps: 1, GraphCaptures: 1, GraphKernels: 10, GraphReplays: 20, KernelTime: 50 * time.Microsecond}
		r := Run(t, p, o)
		checkReport(t, o, r)
		// The final cudaDeviceSynchronize waits for 20 replays x 10 kernels x 50 us.
		if got, want := time.Duration(r.MaxNS["cudaDeviceSynchronize"]), 10*time.Millisecond; got < want*8/10 {
			t.Errorf("final device sync waited %v, want about %v", got, want)
		}
	})

	t.Run("stall blocks in the chosen call", func(t *testing.T) {
		for _, where := range []string{"stream-sync", "device-sync", "event-sync"} {
			o := Options{Launches: 10, Stall: 150 * time.Millisecond, StallIn: where}
			r := Run(t, p, o)
			checkReport(t, o, r)
			api := map[string]string{"stream-sync": "cudaStreamSynchronize", "device-sync": "cudaDeviceSynchronize",
				"event-sync": "cudaEventSynchronize"}[where]
			// At least the stall; the overshoot is a timing (BenchmarkDeviceModelTiming).
			if got := time.Duration(r.MaxNS[api]); got < o.Stall {
				t.Errorf("%s: longest %s %v, shorter than the stall of %v", where, api, got, o.Stall)
			}
		}
	})
}

// BenchmarkDeviceModelTiming reports how closely the fake device keeps to its model on
// this machine, the upper bounds the timing test leaves out: a 4 MiB synchronous copy
// at 2 GB/s against its modelled 2.1 ms, a launch's mean while 100 us kernels run, and
// how far a 150 ms stall overshoots.
func BenchmarkDeviceModelTiming(b *testing.B) {
	p := Build(b)
	var copyRatio, launchUS, overshootMS float64
	for i := 0; i < b.N; i++ {
		r := Run(b, p, Options{H2D: 10, D2H: 10, H2DBytes: 4 << 20, D2HBytes: 4 << 20, GBps: 2})
		copyRatio += float64(mean(r, "cudaMemcpy")) / float64(time.Duration(float64(4<<20)/2))
		r = Run(b, p, Options{Launches: 400, Syncs: 10, KernelTime: 100 * time.Microsecond})
		launchUS += float64(mean(r, "cudaLaunchKernel")) / float64(time.Microsecond)
		r = Run(b, p, Options{Launches: 10, Stall: 150 * time.Millisecond})
		overshootMS += float64(time.Duration(r.MaxNS["cudaStreamSynchronize"])-150*time.Millisecond) / float64(time.Millisecond)
	}
	n := float64(b.N)
	b.ReportMetric(copyRatio/n, "copy-x-model")
	b.ReportMetric(launchUS/n, "launch-us")
	b.ReportMetric(overshootMS/n, "stall-overshoot-ms")
}

// A starved dispatcher launches slower: launch overhead is CPU work, so busy threads on
// the dispatcher's CPU stretch it.
func TestWorkloadContentionSlowsLaunches(t *testing.T) {
	p := Build(t)
	base := Options{Launches: 3000, LaunchCost: 20 * time.Microsecond, Pin: true, PinCPU: 0}
	quiet := Run(t, p, base)
	checkReport(t, base, quiet)
	busy := with(base, func(o *Options) { o.ContentionThreads = 2 })
	contended := Run(t, p, busy)
	checkReport(t, busy, contended)
	if contended.ContentionThreads != 2 || contended.PinCPU != 0 {
		t.Errorf("report says %d contention threads on CPU %d", contended.ContentionThreads, contended.PinCPU)
	}
	q, c := mean(quiet, "cudaLaunchKernel"), mean(contended, "cudaLaunchKernel")
	t.Logf("mean cudaLaunchKernel: %v alone, %v with 2 busy threads on its CPU", q, c)
	if q < 20*time.Microsecond {
		t.Errorf("mean launch %v is below the configured CPU cost of 20us", q)
	}
	if c < q*3/2 {
		t.Errorf("contention barely slowed launches: %v vs %v", c, q)
	}
}

func TestWorkloadForksAndIOBursts(t *testing.T) {
	p := Build(t)
	for _, inline := range []bool{false, true} {
		dir := t.TempDir()
		o := Options{Launches: 100, Syncs: 10, StepGap: 15 * time.Millisecond,
			Forks: 12, ForkWork: time.Millisecond, ForkCUDACopies: 2,
			IOBurstMB: 2, IOEvery: 30 * time.Millisecond, IODir: dir, IOInline: inline}
		r := Run(t, p, o)
		checkReport(t, o, r)
		if r.Forks != 12 || r.ForkFailures != 0 {
			t.Errorf("inline=%v: forks %d, failures %d", inline, r.Forks, r.ForkFailures)
		}
		// 10 steps of >= 15 ms give a 150 ms loop: at least 2 bursts, and 2 MiB each.
		if r.IOBursts < 2 || r.IOBytes != r.IOBursts*2<<20 {
			t.Errorf("inline=%v: %d bursts, %d bytes", inline, r.IOBursts, r.IOBytes)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
			t.Errorf("inline=%v: I/O file left behind: %v", inline, left)
		}
	}
}

// A gated workload makes no CUDA call before Release, and a test can kill it while it is
// blocked inside a CUDA call.
func TestWorkloadGateAndKillMidCall(t *testing.T) {
	p := Build(t)
	w := Start(t, p, Options{Gate: true, DispatcherThread: true, Launches: 5, Stall: time.Minute, StallIn: "device-sync"})
	if w.Tid == 0 || w.Tid == w.Pid {
		t.Fatalf("gate reported dispatcher tid %d for pid %d", w.Tid, w.Pid)
	}
	syscallFile := filepath.Join("/proc", strconv.Itoa(w.Pid), "task", strconv.Itoa(w.Tid), "syscall")
	time.Sleep(50 * time.Millisecond)
	if inDeviceWait(syscallFile) {
		t.Fatal("workload is waiting on the device before its gate opened")
	}
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !inDeviceWait(syscallFile) {
		if time.Now().After(deadline) {
			t.Fatalf("dispatcher never blocked in the device wait; stderr:\n%s", w.Stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.Kill()
	if _, err := w.Wait(10 * time.Second); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Wait after kill = %v, want a killed error", err)
	}
	if !strings.Contains(w.Stderr(), "stalling in device-sync") {
		t.Errorf("stderr does not announce the stall:\n%s", w.Stderr())
	}
}

// inDeviceWait reports whether the thread sits in clock_nanosleep(CLOCK_MONOTONIC,
// TIMER_ABSTIME, ...), the fake device's wait; glibc's own sleeps use CLOCK_REALTIME with
// relative times.
func inDeviceWait(syscallFile string) bool {
	data, err := os.ReadFile(syscallFile)
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	return len(f) >= 3 && f[0] == "230" && f[1] == "0x1" && f[2] == "0x1"
}
