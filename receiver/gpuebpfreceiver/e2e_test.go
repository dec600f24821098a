//go:build linux

package gpuebpfreceiver_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// e2eConfig: the receiver as a node runs it by default, every 300 ms, both signals.
var e2eConfig = nodeConfig(`
collection_interval: 300ms
cluster_name: e2e
logs:
  policy: notable`, true)

// point is the latest value of one series of one process, read back from OTLP.
type point struct {
	value      int64
	count      uint64
	sum        float64
	start, now pcommon.Timestamp
}

type processView struct {
	resource pcommon.Map
	series   map[string]point // "metric{k=v,...}"
}

func seriesKey(name string, attrs pcommon.Map) string {
	var kv []string
	attrs.Range(func(k string, v pcommon.Value) bool {
		kv = append(kv, k+"="+v.AsString())
		return true
	})
	sort.Strings(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

// eachMetric calls fn for every metric the sink received, in export order, with its
// resource's process.pid (0 for the node resource) and attributes.
func eachMetric(sink *collectortest.Sink, fn func(pid int64, resource pcommon.Map, m pmetric.Metric)) {
	for _, md := range sink.Metrics() {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			rm := md.ResourceMetrics().At(i)
			res := rm.Resource().Attributes()
			var pid int64
			if p, ok := res.Get(semconv.ProcessPID); ok {
				pid = p.Int()
			}
			for s := 0; s < rm.ScopeMetrics().Len(); s++ {
				ms := rm.ScopeMetrics().At(s).Metrics()
				for j := 0; j < ms.Len(); j++ {
					fn(pid, res, ms.At(j))
				}
			}
		}
	}
}

// view folds every batch the sink received into the latest point of each series of
// process pid (cumulative output: the latest point is the total).
func view(sink *collectortest.Sink, pid int) processView {
	v := processView{series: map[string]point{}}
	eachMetric(sink, func(p int64, res pcommon.Map, m pmetric.Metric) {
		if p != int64(pid) {
			return
		}
		v.resource = res
		switch m.Type() {
		case pmetric.MetricTypeSum:
			for k := 0; k < m.Sum().DataPoints().Len(); k++ {
				dp := m.Sum().DataPoints().At(k)
				v.series[seriesKey(m.Name(), dp.Attributes())] = point{value: dp.IntValue(), start: dp.StartTimestamp(), now: dp.Timestamp()}
			}
		case pmetric.MetricTypeExponentialHistogram:
			for k := 0; k < m.ExponentialHistogram().DataPoints().Len(); k++ {
				dp := m.ExponentialHistogram().DataPoints().At(k)
				v.series[seriesKey(m.Name(), dp.Attributes())] = point{count: dp.Count(), sum: dp.Sum(), start: dp.StartTimestamp(), now: dp.Timestamp()}
			}
		}
	})
	return v
}

func (v processView) value(t *testing.T, key string) int64 {
	t.Helper()
	p, ok := v.series[key]
	if !ok {
		t.Errorf("no series %s; have:\n%s", key, v.keys())
	}
	return p.value
}

func (v processView) keys() string {
	var ks []string
	for k := range v.series {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, "\n")
}

// waitFor polls the sink until cond holds for pid's view.
func waitFor(t *testing.T, sink *collectortest.Sink, pid int, what string, cond func(processView) bool) processView {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if v := view(sink, pid); cond(v) {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
	v := view(sink, pid)
	t.Fatalf("pid %d: %s never showed up (processes exported: %v); series:\n%s", pid, what, exportedPIDs(sink), v.keys())
	return v
}

func startCollector(t *testing.T) (*collectortest.Sink, *collectortest.Process) {
	return startNodeCollector(t, e2eConfig)
}

func TestReceiverThroughTheRealCollector(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	// Started (and held at its gate) before the collector, so the collector's first
	// scan of /proc is what finds the libraries.
	mix := fakegpu.Options{
		Gate: true, Steps: 10, Launches: 5000, H2D: 300, H2DBytes: 4 << 20, Syncs: 40,
		GraphCaptures: 2, GraphKernels: 4, GraphReplays: 500,
		Env: []string{"RANK=3", "LOCAL_RANK=3", "WORLD_SIZE=8"},
	}
	w := fakegpu.Start(t, paths, mix)
	sink, col := startCollector(t)

	t.Run("known mix: exact counts, bytes, directions, durations, attribution", func(t *testing.T) {
		if err := w.Release(); err != nil {
			t.Fatal(err)
		}
		report, err := w.Wait(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		launches := seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", "cudaLaunchKernel", "cuda.library", "libcudart"))
		// Kernels launched while a stream is captured are cudaLaunchKernel calls too.
		wantLaunches := int64(5000 + 2*4)
		syncAPIs := []string{"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}
		syncKey := func(api string) string {
			return seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", api, "cuda.library", "libcudart"))
		}
		// The workload has ended, so its counts are final; a collection taken during
		// its last step can hold every launch and not yet that step's syncs (seen in
		// CI: 12 of 14 of each), so the view waited for holds them all.
		v := waitFor(t, sink, w.Pid, "every launch and sync", func(v processView) bool {
			if v.series[launches].value != report.Calls["cudaLaunchKernel"] {
				return false
			}
			for _, api := range syncAPIs {
				if v.series[syncKey(api)].value != report.Calls[api] {
					return false
				}
			}
			return true
		})
		if got := v.value(t, launches); got != report.Calls["cudaLaunchKernel"] || got != wantLaunches {
			t.Errorf("launches %d, workload made %d, want %d", got, report.Calls["cudaLaunchKernel"], wantLaunches)
		}
		h2d := attrs("cuda.api.name", "cudaMemcpy", "cuda.library", "libcudart", "cuda.memcpy.direction", "host_to_device")
		if got := v.value(t, seriesKey(semconv.MetricCUDAAPICalls, h2d)); got != 300 {
			t.Errorf("host-to-device copies %d, want 300", got)
		}
		h2dBytes := attrs("cuda.api.name", "cudaMemcpy", "cuda.memcpy.direction", "host_to_device")
		if got := v.value(t, seriesKey(semconv.MetricCUDAMemcpyBytes, h2dBytes)); got != 300*4<<20 || got != report.Bytes.H2D {
			t.Errorf("host-to-device bytes %d, want %d (workload: %d)", got, 300*4<<20, report.Bytes.H2D)
		}
		var syncs, reportedSyncs int64
		for _, api := range syncAPIs {
			key := syncKey(api)
			if n := v.series[key].value; n != report.Calls[api] {
				t.Errorf("%s: %d calls, workload made %d", api, n, report.Calls[api])
			}
			syncs += v.series[key].value
			reportedSyncs += report.Calls[api]
		}
		// 40 in the loop, and the workload's one device sync at teardown.
		if syncs != 41 || syncs != reportedSyncs {
			t.Errorf("%d synchronizations, want 40 + 1 at teardown (workload: %d)", syncs, reportedSyncs)
		}
		for api, want := range map[string]int64{"cudaStreamBeginCapture": 2, "cudaStreamEndCapture": 2, "cudaGraphInstantiate": 2, "cudaGraphLaunch": 500} {
			key := seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", api, "cuda.library", "libcudart"))
			if got := v.value(t, key); got != want {
				t.Errorf("%s: %d calls, want %d", api, got, want)
			}
		}
		if got := v.value(t, seriesKey(semconv.MetricCUDAGraphLaunches, pcommon.NewMap())); got != 500 {
			t.Errorf("graph launches %d, want 500", got)
		}

		// The kernel times each call from its first instruction to its return; the
		// workload times it from outside, probe overhead included. For the long calls
		// (4 MiB copies, waits for the device) the two agree within a few percent; for
		// microsecond launches the kernel's sum is the smaller one.
		for api, tolerance := range map[string]float64{"cudaStreamSynchronize": 0.1, "cudaMemcpy": 0.1, "cudaLaunchKernel": 1} {
			hist := v.series[seriesKey(semconv.MetricCUDAAPIDuration, attrs("cuda.api.name", api, "cuda.library", "libcudart"))]
			own := float64(report.TotalNS[api]) / 1e9
			if hist.count != uint64(report.Calls[api]) || hist.sum > own || hist.sum < own*(1-tolerance) {
				t.Errorf("%s: histogram count %d sum %.6fs; workload: %d calls, %.6fs", api, hist.count, hist.sum, report.Calls[api], own)
			}
			if hist.start == 0 || hist.start >= hist.now {
				t.Errorf("%s: cumulative histogram start %v not before %v", api, hist.start, hist.now)
			}
		}

		res := v.resource
		for key, want := range map[string]any{
			semconv.ProcessPID: int64(w.Pid), semconv.Rank: int64(3), semconv.LocalRank: int64(3),
			semconv.WorldSize: int64(8), semconv.ClusterName: "e2e", semconv.ProcessExecutableName: "fakegpu-workload",
		} {
			got, ok := res.Get(key)
			if !ok || got.AsRaw() != want {
				t.Errorf("resource %s = %v, want %v", key, got.AsRaw(), want)
			}
		}
		// Graph capture is notable: its log records name the dispatcher thread. Logs
		// leave once a second.
		var records []pcommon.Map
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(records) < 2; time.Sleep(100 * time.Millisecond) {
			records = logRecords(sink, w.Pid, "cudaStreamBeginCapture")
		}
		if len(records) != 2 {
			t.Fatalf("%d capture log records, want 2", len(records))
		}
		for _, lr := range records {
			if tid, _ := lr.Get(semconv.ThreadID); tid.Int() != int64(report.Tid) {
				t.Errorf("capture logged on thread %d, dispatcher is %d", tid.Int(), report.Tid)
			}
		}
	})

	t.Run("a dispatcher starved by contention threads spends visibly longer off CPU", func(t *testing.T) {
		run := func(contention int) float64 {
			o := fakegpu.Options{Gate: true, Steps: 20, Launches: 4000, LaunchCost: 20 * time.Microsecond, Pin: true, PinCPU: 0, ContentionThreads: contention}
			w := fakegpu.Start(t, paths, o)
			if err := w.Release(); err != nil {
				t.Fatal(err)
			}
			report, err := w.Wait(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			key := seriesKey(semconv.MetricThreadOffCPU, attrs(semconv.OffCPUReason, "preempted", semconv.ThreadRole, "cuda", semconv.ThreadID, fmt.Sprint(report.Tid)))
			launches := seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", "cudaLaunchKernel", "cuda.library", "libcudart"))
			v := waitFor(t, sink, w.Pid, "all launches", func(v processView) bool { return v.series[launches].value == 4000 })
			return v.series[key].sum
		}
		// Six busy threads on the dispatcher's CPU: it then gets at most a seventh of it,
		// and the gap stays wide even when other work on the machine (a build, another
		// test binary) preempts the calm run too.
		calm := run(0)
		starved := run(6)
		t.Logf("dispatcher preempted off-CPU: %.1f ms alone, %.1f ms with 6 contention threads", calm*1e3, starved*1e3)
		if starved < 0.02 || starved < 5*calm {
			t.Errorf("starved dispatcher was preempted for %.1f ms, unstarved %.1f ms: want ≥ 20 ms and ≥ 5x", starved*1e3, calm*1e3)
		}
	})

	t.Run("ten processes starting and stopping are all found and attributed", func(t *testing.T) {
		var ws []*fakegpu.Workload
		for rank := 0; rank < 10; rank++ {
			ws = append(ws, fakegpu.Start(t, paths, fakegpu.Options{Steps: 2, Launches: 100 + rank, Env: []string{fmt.Sprintf("RANK=%d", rank), "WORLD_SIZE=10"}}))
		}
		for rank, w := range ws {
			if _, err := w.Wait(time.Minute); err != nil {
				t.Fatal(err)
			}
			launches := seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", "cudaLaunchKernel", "cuda.library", "libcudart"))
			v := waitFor(t, sink, w.Pid, "its launches", func(v processView) bool { return v.series[launches].value == int64(100+rank) })
			if r, _ := v.resource.Get(semconv.Rank); r.Int() != int64(rank) {
				t.Errorf("pid %d: rank %d, want %d", w.Pid, r.Int(), rank)
			}
		}
	})

	t.Run("one controller serves both pipelines and nothing was lost", func(t *testing.T) {
		host := hostView(sink)
		if n := strings.Count(col.Output(), "gpuebpf receiver started"); n != 1 {
			t.Errorf("the receiver started %d times for two pipelines, want once", n)
		}
		// At least 10 tracepoints and an entry and a return probe for each of the 32
		// functions of the fake libcudart and libcuda; more when other processes on the
		// host (other tests' NCCL ranks) have GPU libraries of their own loaded.
		if got := host.series[semconv.MetricReceiverProbes+"{}"].value; got < 74 {
			t.Errorf("%s = %d, want at least 74", semconv.MetricReceiverProbes, got)
		}
		for key, p := range host.series {
			if strings.HasPrefix(key, semconv.MetricReceiverDrops) && p.value != 0 {
				t.Errorf("%s = %d", key, p.value)
			}
		}
	})

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

func exportedPIDs(sink *collectortest.Sink) []int64 {
	seen := map[int64]bool{}
	var pids []int64
	for _, md := range sink.Metrics() {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			if p, ok := md.ResourceMetrics().At(i).Resource().Attributes().Get(semconv.ProcessPID); ok && !seen[p.Int()] {
				seen[p.Int()] = true
				pids = append(pids, p.Int())
			}
		}
	}
	return pids
}

func attrs(kv ...string) pcommon.Map {
	m := pcommon.NewMap()
	for i := 0; i+1 < len(kv); i += 2 {
		m.PutStr(kv[i], kv[i+1])
	}
	return m
}

func logRecords(sink *collectortest.Sink, pid int, api string) []pcommon.Map {
	var out []pcommon.Map
	for _, ld := range sink.Logs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			if p, ok := rl.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != int64(pid) {
				continue
			}
			lrs := rl.ScopeLogs().At(0).LogRecords()
			for j := 0; j < lrs.Len(); j++ {
				a := lrs.At(j).Attributes()
				if name, ok := a.Get(semconv.CUDAAPIName); ok && name.Str() == api {
					out = append(out, a)
				}
			}
		}
	}
	return out
}
