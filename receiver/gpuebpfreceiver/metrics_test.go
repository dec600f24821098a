package gpuebpfreceiver

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// The kernel counts a process's page allocations as a running total. Cumulative output
// passes it on; delta output sends what each interval added, so that a backend summing
// the deltas gets the same total.
func TestPageAllocationsFollowTheTemporality(t *testing.T) {
	const pid = 4242
	totals := []uint64{100, 250, 250, 400}
	for temporality, want := range map[string][]int64{
		TemporalityCumulative: {100, 250, 250, 400},
		TemporalityDelta:      {100, 150, 0, 150},
	} {
		cfg := createDefaultConfig()
		cfg.Temporality = temporality
		cfg.Discovery.ProcRoot = t.TempDir() // no such process: its identity stays unknown
		a := newAggregator(cfg, &wallClock{}, nil, false)
		a.process(pid)
		var prev hostTotals
		for i, total := range totals {
			host := hostTotals{kernel: probes.HostAggregates{PagesByPID: map[uint32]uint64{pid: total}}, haveKernel: true}
			md := a.emit(time.Now(), 0, host, &prev, hostIdentity("", false))
			prev = host
			got, temp, ok := processSum(md, pid, semconv.MetricProcessPageAllocs)
			if !ok {
				t.Fatalf("%s export %d: no %s", temporality, i, semconv.MetricProcessPageAllocs)
			}
			wantTemp := pmetric.AggregationTemporalityCumulative
			if temporality == TemporalityDelta {
				wantTemp = pmetric.AggregationTemporalityDelta
			}
			if got != want[i] || temp != wantTemp {
				t.Errorf("%s export %d (kernel total %d): %d (%s), want %d (%s)", temporality, i, total, got, temp, want[i], wantTemp)
			}
		}
	}
}

// A process's page count in the kernel is dropped after the export that ends its
// series, and not before: the controller forgets the pids emit lists in ended.
func TestAnExitedProcessIsListedForForgettingAfterItsLastExport(t *testing.T) {
	const pid = 4343
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir()
	clock := &wallClock{}
	a := newAggregator(cfg, clock, nil, false)
	a.logs = newLogSink(cfg, clock, &a.drops, hostIdentity("", false))
	a.process(pid)
	host := hostTotals{kernel: probes.HostAggregates{PagesByPID: map[uint32]uint64{pid: 10}}, haveKernel: true}
	a.emit(time.Now(), 0, host, &hostTotals{}, hostIdentity("", false))
	if len(a.ended) != 0 {
		t.Fatalf("ended %v before the process exited", a.ended)
	}
	var exit probes.ProcessEvent
	exit.Hdr.Pid, exit.Hdr.Tid = pid, pid
	a.Process(probes.KindExit, &exit)
	// Not before a reading of the kernel's call statistics begun after the exit: the
	// calls it made since the last one would come in after its series ended.
	a.emit(time.Now(), 0, host, &hostTotals{}, hostIdentity("", false))
	if len(a.ended) != 0 {
		t.Fatalf("ended %v before a reading that holds the exited process's last counts", a.ended)
	}
	read, gone := a.beginCallStatsRead()
	a.mergeCallStats(nil, read, gone)
	md := a.emit(time.Now(), 0, host, &hostTotals{}, hostIdentity("", false))
	if got, _, ok := processSum(md, pid, semconv.MetricProcessPageAllocs); !ok || got != 10 {
		t.Errorf("the last export carries %d pages (present %v), want 10", got, ok)
	}
	if len(a.ended) != 1 || a.ended[0] != pid {
		t.Errorf("ended %v after the last export, want [%d]", a.ended, pid)
	}
	if _, ok := a.processes[pid]; ok {
		t.Errorf("the exited process still has series")
	}
}

// processSum finds one sum's value on pid's resource.
func processSum(md pmetric.Metrics, pid int64, name string) (int64, pmetric.AggregationTemporality, bool) {
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		if p, ok := rm.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != pid {
			continue
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			if m := ms.At(j); m.Name() == name && m.Type() == pmetric.MetricTypeSum {
				return m.Sum().DataPoints().At(0).IntValue(), m.Sum().AggregationTemporality(), true
			}
		}
	}
	return 0, 0, false
}

// Device wait is the time in calls that block until the device is done: syncs,
// blocking copies and frees count, launches and asynchronous copies do not; so do NCCL
// calls that can wait for peers, but not communicator setup. It follows
// the temporality, and a process that has waited gets a point (zero too) every interval.
func TestDeviceWaitSumsTheCallsThatWaitForTheDevice(t *testing.T) {
	for name, ok := range map[string]bool{"cudaStreamSynchronize": true, "cuCtxSynchronize": true, "cudaMemcpy": true,
		"cudaLaunchKernel": false, "cudaMemcpyAsync": false, "cuMemcpyDtoD_v2": false} {
		if apiID(name) == 0 || waitsForDevice[apiID(name)] != ok {
			t.Errorf("%s: waits for the device %v, want %v", name, waitsForDevice[apiID(name)], ok)
		}
	}
	if waitsForDevice[0] {
		t.Error("an API name in waitsForDevice is not a probed API")
	}
	if !waitsForPeers[probes.NCCLAllReduce] || !waitsForPeers[probes.NCCLGroupEnd] || waitsForPeers[probes.NCCLCommInitRank] || waitsForPeers[probes.NCCLGroupStart] {
		t.Error("waitsForPeers: want collectives and group end, not setup or group start")
	}
	const pid = 4343
	call := func(a *aggregator, api string, d time.Duration) {
		ev := probes.CUDACall{Api: apiID(api), DurationNs: uint64(d), MemcpyKind: uint8(probes.MemcpyNone)}
		ev.Hdr.Pid = pid
		a.CUDACall(&ev)
	}
	nccl := func(a *aggregator, api uint32, d time.Duration) {
		ev := probes.NCCLCall{Api: api, CommHash: 0xc0ffee, Rank: 1, Nranks: 8, Peer: -1, DurationNs: uint64(d)}
		ev.Hdr.Pid = pid
		a.NCCLCall(&ev)
	}
	intervals := []func(a *aggregator){
		func(a *aggregator) {
			for range 3 {
				call(a, "cudaStreamSynchronize", 10*time.Millisecond)
			}
			call(a, "cudaMemcpy", 5*time.Millisecond)
			call(a, "cuCtxSynchronize", 2*time.Millisecond)
			for range 100 {
				call(a, "cudaLaunchKernel", 10*time.Microsecond)
				call(a, "cudaMemcpyAsync", 7*time.Microsecond)
			}
		},
		func(a *aggregator) { call(a, "cudaEventSynchronize", 20*time.Millisecond) },
		func(*aggregator) {},
		func(a *aggregator) {
			nccl(a, probes.NCCLCommInitRank, 900*time.Millisecond) // setup: not a wait
			nccl(a, probes.NCCLAllReduce, 3*time.Millisecond)      // a blocking collective
			nccl(a, probes.NCCLGroupEnd, time.Millisecond)
		},
	}
	for temporality, want := range map[string][]float64{
		TemporalityCumulative: {0.037, 0.057, 0.057, 0.061},
		TemporalityDelta:      {0.037, 0.020, 0, 0.004},
	} {
		cfg := createDefaultConfig()
		cfg.Temporality = temporality
		cfg.Discovery.ProcRoot = t.TempDir()
		clock := &wallClock{}
		clock.refresh()
		a := newAggregator(cfg, clock, nil, false)
		a.logs = newLogSink(cfg, clock, &a.drops, hostIdentity("", false))
		var prev hostTotals
		for i, interval := range intervals {
			interval(a)
			md := a.emit(time.Now(), 0, hostTotals{}, &prev, hostIdentity("", false))
			got, ok := processDoubleSum(md, pid, semconv.MetricRankDeviceWait)
			if !ok || math.Abs(got-want[i]) > 1e-12 {
				t.Errorf("%s interval %d: device wait %v (present %v), want %v s", temporality, i, got, ok, want[i])
			}
		}
	}
}

// For ranks that do not wait for each other: launches count every kernel and graph
// launch (not copies), and the run queue sums what the process's CUDA threads waited
// runnable for a CPU (not its other threads', not voluntary sleep).
func TestLaunchesAndRunQueueOfARank(t *testing.T) {
	const pid, cudaTID, otherTID = 4545, 4546, 4547
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir() // no /proc to read: no rank but the test's
	a := newTestAggregator(cfg, false)
	for name, n := range map[string]int{"cudaLaunchKernel": 100, "cuLaunchKernel": 5, "cudaGraphLaunch": 2, "cudaMemcpyAsync": 50} {
		for range n {
			ev := probes.CUDACall{Api: apiID(name), DurationNs: 4000, MemcpyKind: uint8(probes.MemcpyNone)}
			ev.Hdr.Pid, ev.Hdr.Tid = pid, cudaTID
			a.CUDACall(&ev)
		}
	}
	sched := func(tid uint32, offCPU, runq time.Duration, preempted uint8) {
		ev := probes.SchedSwitchIn{OffCpuNs: uint64(offCPU), RunqNs: uint64(runq), Preempted: preempted}
		ev.Hdr.Pid, ev.Hdr.Tid = pid, tid
		a.Sched(&ev)
	}
	sched(cudaTID, 3*time.Millisecond, 3*time.Millisecond, 1)    // preempted: all of it runnable
	sched(cudaTID, 10*time.Millisecond, 500*time.Microsecond, 0) // slept, then waited 0.5 ms for a CPU
	sched(otherTID, 7*time.Millisecond, 7*time.Millisecond, 1)   // not a CUDA thread
	md := a.emit(time.Now(), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false))
	if got, ok := processDoubleSum(md, pid, semconv.MetricRankRunQueue); !ok || math.Abs(got-0.0035) > 1e-12 {
		t.Errorf("run queue %v s (present %v), want 0.0035", got, ok)
	}
	var launches int64 = -1
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		if p, _ := rm.Resource().Attributes().Get(semconv.ProcessPID); p.Int() != pid {
			continue
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			if ms.At(j).Name() == semconv.MetricRankLaunches {
				launches = ms.At(j).Sum().DataPoints().At(0).IntValue()
			}
		}
	}
	if launches != 107 {
		t.Errorf("launches %d, want 107", launches)
	}
}

// Host lead sums the lead the kernel measured into each collective (not into
// send/recv, not a collective with no device wait before it), per the temporality.
func TestHostLeadSumsTheLeadIntoEachCollective(t *testing.T) {
	const pid = 4646
	for temporality, want := range map[string][]float64{
		TemporalityCumulative: {0.005, 0.006},
		TemporalityDelta:      {0.005, 0.001},
	} {
		cfg := createDefaultConfig()
		cfg.Temporality = temporality
		cfg.Discovery.ProcRoot = t.TempDir()
		clock := &wallClock{}
		clock.refresh()
		a := newAggregator(cfg, clock, nil, false)
		a.logs = newLogSink(cfg, clock, &a.drops, hostIdentity("", false))
		nccl := func(api uint32, lead time.Duration) {
			ev := probes.NCCLCall{Api: api, CommHash: 0xc0ffee, Rank: 0, Nranks: 8, Peer: -1, DurationNs: 10000, HostLeadNs: uint64(lead)}
			ev.Hdr.Pid = pid
			a.NCCLCall(&ev)
		}
		var prev hostTotals
		for i, interval := range []func(){
			func() {
				nccl(probes.NCCLAllReduce, 0) // no device wait seen yet on the thread
				nccl(probes.NCCLAllReduce, 2*time.Millisecond)
				nccl(probes.NCCLAllGather, 3*time.Millisecond)
				nccl(probes.NCCLSend, 40*time.Millisecond)
			},
			func() { nccl(probes.NCCLAllReduce, time.Millisecond) },
		} {
			interval()
			md := a.emit(time.Now(), 0, hostTotals{}, &prev, hostIdentity("", false))
			if got, ok := processDoubleSum(md, pid, semconv.MetricRankHostLead); !ok || math.Abs(got-want[i]) > 1e-12 {
				t.Errorf("%s interval %d: host lead %v s (present %v), want %v", temporality, i, got, ok, want[i])
			}
		}
	}
}

func processDoubleSum(md pmetric.Metrics, pid int64, name string) (float64, bool) {
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		if p, ok := rm.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != pid {
			continue
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			if m := ms.At(j); m.Name() == name && m.Type() == pmetric.MetricTypeSum {
				return m.Sum().DataPoints().At(0).DoubleValue(), true
			}
		}
	}
	return 0, false
}

// host_name names the node on every resource; empty, the machine's hostname does.
func TestHostNameNamesTheNode(t *testing.T) {
	machine, _ := os.Hostname()
	for name, want := range map[string]string{"node-7": "node-7", "": machine} {
		r := pcommon.NewResource()
		namedHostIdentity(name, "c1", false)(r)
		if v, _ := r.Attributes().Get(semconv.HostName); v.Str() != want {
			t.Errorf("host_name %q: host.name %q, want %q", name, v.Str(), want)
		}
	}
}

// A rank-signal sample between collections carries the rank signals of the processes
// whose rank is known, and nothing else, under their own scope, as cumulative points
// from the process's start: the next collection's points continue the same series.
func TestRankSamplesCarryOnlyTheRankSignalsOfRanks(t *testing.T) {
	const rankPID, rankTID, otherPID = 4545, 4546, 4600
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir() // no /proc to read: no rank but the test's
	a := newTestAggregator(cfg, false)
	call := func(pid, tid uint32, api string, d time.Duration) {
		ev := probes.CUDACall{Api: apiID(api), DurationNs: uint64(d), MemcpyKind: uint8(probes.MemcpyNone)}
		ev.Hdr.Pid, ev.Hdr.Tid = pid, tid
		a.CUDACall(&ev)
	}
	for range 10 {
		call(rankPID, rankTID, "cudaLaunchKernel", 5*time.Microsecond)
		call(otherPID, otherPID, "cudaLaunchKernel", 5*time.Microsecond)
	}
	for range 4 {
		call(rankPID, rankTID, "cudaStreamSynchronize", 2*time.Millisecond)
	}
	a.process(rankPID).info.Rank = 3
	now := time.Now()
	md := a.emitRankSamples(now, hostIdentity("", false), nil)
	if md.ResourceMetrics().Len() != 1 {
		t.Fatalf("%d resources, want the ranked process's alone", md.ResourceMetrics().Len())
	}
	rm := md.ResourceMetrics().At(0)
	if pid, _ := rm.Resource().Attributes().Get(semconv.ProcessPID); pid.Int() != rankPID {
		t.Fatalf("resource of pid %d, want %d", pid.Int(), rankPID)
	}
	if rank, _ := rm.Resource().Attributes().Get(semconv.Rank); rank.Int() != 3 {
		t.Errorf("fathom.rank %v, want 3", rank.AsRaw())
	}
	sm := rm.ScopeMetrics().At(0)
	if rm.ScopeMetrics().Len() != 1 || sm.Scope().Name() != semconv.RankSignalsScope {
		t.Fatalf("scope %q, want %q alone", sm.Scope().Name(), semconv.RankSignalsScope)
	}
	var names []string
	for i := 0; i < sm.Metrics().Len(); i++ {
		m := sm.Metrics().At(i)
		names = append(names, m.Name())
		dp := m.Sum().DataPoints().At(0)
		if m.Sum().AggregationTemporality() != pmetric.AggregationTemporalityCumulative || dp.StartTimestamp() != a.process(rankPID).start ||
			dp.Timestamp() != pcommon.NewTimestampFromTime(now) {
			t.Errorf("%s: %s from %v at %v, want cumulative from the process's start at the sample's time", m.Name(), m.Sum().AggregationTemporality(),
				dp.StartTimestamp(), dp.Timestamp())
		}
	}
	if want := []string{semconv.MetricRankDeviceWait, semconv.MetricRankLaunches}; !slices.Equal(names, want) {
		t.Errorf("metrics %v, want %v", names, want)
	}
	if got, _ := processDoubleSum(md, rankPID, semconv.MetricRankDeviceWait); math.Abs(got-0.008) > 1e-12 {
		t.Errorf("device wait %v s, want 0.008", got)
	}
	// The collection that follows continues the series: the same start, the totals.
	for range 5 {
		call(rankPID, rankTID, "cudaLaunchKernel", 5*time.Microsecond)
	}
	full := a.emit(now.Add(250*time.Millisecond), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false))
	if got, _, ok := processSum(full, rankPID, semconv.MetricRankLaunches); !ok || got != 15 {
		t.Errorf("launches in the collection %d (present %v), want 15", got, ok)
	}
}

// A rank's CPU time is read as its collectives come in, and its points carry the time
// of that read rather than the sample's, so that the time between two of them holds
// whole steps, as does its CPU time a collective between the two; a rank that made no
// collective for cpuAtCollectivesFor is read at the sample again, and has no CPU time
// a collective. A rank sample does not repeat a read the one before carried; a
// collection does. Delta, each export is what it ran since the one before.
func TestCPUTimeIsReadAtTheRanksCollectives(t *testing.T) {
	const pid, tid = 4747, 4748
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir()
	a := newTestAggregator(cfg, false)
	ran := func(ns int64) {
		dir := filepath.Join(cfg.Discovery.ProcRoot, "4747", "task", "4748")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "schedstat"), []byte(fmt.Sprintf("%d 0 0\n", ns)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	launch := probes.CUDACall{Api: apiID("cudaLaunchKernel"), DurationNs: 5000, MemcpyKind: uint8(probes.MemcpyNone)}
	launch.Hdr.Pid, launch.Hdr.Tid = pid, tid
	a.CUDACall(&launch)
	a.process(pid).info.Rank = 1
	allReduce := func() (before, after time.Time) {
		ev := probes.NCCLCall{Api: probes.NCCLAllReduce, CommHash: 0xc0ffee, Rank: 1, Nranks: 4, Peer: -1, DurationNs: 10000}
		ev.Hdr.Pid, ev.Hdr.Tid = pid, tid
		before = wallNow()
		a.NCCLCall(&ev)
		return before, wallNow()
	}
	pointOf := func(md pmetric.Metrics, name string) (float64, time.Time, bool) {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			ms := md.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics()
			for j := 0; j < ms.Len(); j++ {
				if m := ms.At(j); m.Name() == name {
					var dp pmetric.NumberDataPointSlice
					if m.Type() == pmetric.MetricTypeGauge {
						dp = m.Gauge().DataPoints()
					} else {
						dp = m.Sum().DataPoints()
					}
					return dp.At(0).DoubleValue(), dp.At(0).Timestamp().AsTime(), true
				}
			}
		}
		return 0, time.Time{}, false
	}
	point := func(md pmetric.Metrics) (float64, time.Time) {
		t.Helper()
		v, at, ok := pointOf(md, semconv.MetricRankCPUTime)
		if !ok {
			t.Fatal("no CPU time point")
		}
		return v, at
	}

	ran(1_000_000_000) // first read: where the process's time begins
	allReduce()
	ran(1_200_000_000)
	time.Sleep(cpuReadEvery)
	allReduce() // read, but too soon after the first for a span of CPU time a collective
	if _, _, ok := pointOf(a.emitRankSamples(wallNow(), hostIdentity("", false), nil), semconv.MetricRankCPUPerCollective); ok {
		t.Errorf("CPU time a collective over %v, want none under %v", cpuReadEvery, perCollectiveEvery)
	}
	time.Sleep(perCollectiveEvery)
	from, to := allReduce() // 0.2 s since the first read, over two collectives
	ran(1_500_000_000)      // the next step's work, under way as the sample is taken
	md := a.emitRankSamples(to.Add(250*time.Millisecond), hostIdentity("", false), nil)
	v, at := point(md)
	if v != 0.2 || at.Before(from) || at.After(to) {
		t.Errorf("sample after a collective: %v s at %v, want 0.2 s read at the collective (%v to %v)", v, at, from, to)
	}
	if v, at, ok := pointOf(md, semconv.MetricRankCPUPerCollective); !ok || math.Abs(v-0.1) > 1e-9 || at.Before(from) || at.After(to) {
		t.Errorf("CPU time a collective: %v s at %v (present %v), want 0.1 s, two collectives', read at the second (%v to %v)", v, at, ok, from, to)
	}
	allReduce() // within cpuReadEvery of the read before: counted, not read
	md = a.emitRankSamples(to.Add(500*time.Millisecond), hostIdentity("", false), nil)
	for _, name := range []string{semconv.MetricRankCPUTime, semconv.MetricRankCPUPerCollective} {
		if v, at, ok := pointOf(md, name); ok {
			t.Errorf("a sample after a collective %v after the last read repeats %s's read: %v at %v", cpuReadEvery, name, v, at)
		}
	}
	if v, _ := point(a.emit(to.Add(500*time.Millisecond), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false))); v != 0.2 {
		t.Errorf("the collection after it: CPU time %v s, want the last read's 0.2 s", v)
	}
	time.Sleep(perCollectiveEvery)
	<-a.perCollectiveRead  // the point of two collectives before
	from, to = allReduce() // two collectives, 0.3 s, since the last read
	// Sent as read: the controller wakes, and its sample carries that point alone,
	// which the next rank sample does not repeat.
	select {
	case <-a.perCollectiveRead:
	default:
		t.Error("a new CPU time a collective did not wake the controller")
	}
	now := a.emitCPUPerCollectiveNow(to, hostIdentity("", false))
	if v, at, ok := pointOf(now, semconv.MetricRankCPUPerCollective); !ok || math.Abs(v-0.15) > 1e-9 || at.Before(from) || at.After(to) || now.DataPointCount() != 1 {
		t.Errorf("CPU time a collective sent as read: %v s at %v (present %v, %d points), want 0.15 s read at the second collective (%v to %v), alone", v, at, ok, now.DataPointCount(), from, to)
	}
	if v, at, ok := pointOf(a.emitRankSamples(to.Add(250*time.Millisecond), hostIdentity("", false), nil), semconv.MetricRankCPUPerCollective); ok {
		t.Errorf("the sample after CPU time a collective was sent as read repeats it: %v s at %v", v, at)
	}
	if n := a.emitCPUPerCollectiveNow(to.Add(300*time.Millisecond), hostIdentity("", false)).DataPointCount(); n != 0 {
		t.Errorf("CPU time a collective sent twice: %d points, want none new", n)
	}
	later := to.Add(cpuAtCollectivesFor + time.Second)
	md = a.emitRankSamples(later, hostIdentity("", false), nil)
	v, at = point(md)
	if v != 0.5 || !at.Equal(later) {
		t.Errorf("no collective for %v: %v s at %v, want 0.5 s read at the sample (%v)", cpuAtCollectivesFor+time.Second, v, at, later)
	}
	if v, _, ok := pointOf(md, semconv.MetricRankCPUPerCollective); ok {
		t.Errorf("no collective for %v: CPU time a collective %v s, want none", cpuAtCollectivesFor+time.Second, v)
	}

	cfg = createDefaultConfig()
	cfg.Temporality = TemporalityDelta
	cfg.Discovery.ProcRoot = t.TempDir()
	a = newTestAggregator(cfg, false)
	a.CUDACall(&launch)
	var prev hostTotals
	for i, ns := range []int64{1_000_000_000, 1_300_000_000, 1_400_000_000} {
		ran(ns)
		time.Sleep(cpuReadEvery)
		allReduce()
		md := a.emit(wallNow(), 0, hostTotals{}, &prev, hostIdentity("", false))
		want := []float64{0, 0.3, 0.1}[i]
		if got, ok := processDoubleSum(md, pid, semconv.MetricRankCPUTime); !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("delta export %d: %v s (present %v), want %v", i, got, ok, want)
		}
	}
}
