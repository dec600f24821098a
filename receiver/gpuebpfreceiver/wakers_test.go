package gpuebpfreceiver

import (
	"fmt"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// wakerPoint is what one CUDA thread's blocked series carry in one export.
type wakerPoint struct {
	blocks, threads int64
	seconds         float64
}

// wakerPoints reads the blocked series of thread tid of process pid, keyed by
// "name self=BOOL on=CLASS"; it fails the test on a point of a thread without role
// cuda, a point whose attributes are not exactly the contract's, or a series that comes
// twice.
func wakerPoints(t *testing.T, md pmetric.Metrics, pid, tid int64) map[string]*wakerPoint {
	t.Helper()
	out := map[string]*wakerPoint{}
	seen := map[string]bool{}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		if p, ok := rm.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != pid {
			continue
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			m := ms.At(j)
			var dps pmetric.NumberDataPointSlice
			switch m.Name() {
			case semconv.MetricThreadBlockedTime, semconv.MetricThreadBlocks:
				if !m.Sum().IsMonotonic() || m.Sum().AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
					t.Fatalf("%s: a sum, monotonic and cumulative, not %v", m.Name(), m.Sum().AggregationTemporality())
				}
				dps = m.Sum().DataPoints()
			case semconv.MetricThreadWakerThreads:
				dps = m.Gauge().DataPoints()
			default:
				continue
			}
			for k := 0; k < dps.Len(); k++ {
				dp := dps.At(k)
				a := dp.Attributes()
				role, _ := a.Get(semconv.ThreadRole)
				thread, _ := a.Get(semconv.ThreadID)
				name, hasName := a.Get(semconv.WakerName)
				self, hasSelf := a.Get(semconv.WakerSelf)
				on, hasOn := a.Get(semconv.BlockedOn)
				if role.Str() != "cuda" || !hasName || !hasSelf || !hasOn || a.Len() != 5 {
					t.Fatalf("%s point with attributes %v, want thread.id, role cuda, a waker name, self and blocked.on", m.Name(), a.AsRaw())
				}
				if thread.Int() != tid {
					continue
				}
				key := fmt.Sprintf("%s self=%v on=%s", name.Str(), self.Bool(), on.Str())
				if seen[m.Name()+key] {
					t.Fatalf("%s: two points for %s", m.Name(), key)
				}
				seen[m.Name()+key] = true
				p := out[key]
				if p == nil {
					p = &wakerPoint{}
					out[key] = p
				}
				switch m.Name() {
				case semconv.MetricThreadBlocks:
					p.blocks = dp.IntValue()
				case semconv.MetricThreadBlockedTime:
					p.seconds = dp.DoubleValue()
				default:
					p.threads = dp.IntValue()
				}
			}
		}
	}
	return out
}

// x86-64 system call numbers the tests block in.
const (
	sysIoctl          = 16
	sysFutex          = 202
	sysEpollWait      = 232
	sysClockNanosleep = 230
	sysRead           = 0
)

// blockedWait is a switch-in of a thread of pid that blocked in system call nr for
// blocked, was woken by waker (its tgid wakerPid, tid wakerTid, comm name), and then
// waited runq in the run queue.
func blockedWait(pid, tid uint32, kind probes.SchedWaker, wakerPid, wakerTid uint32, name string, nr int32, blocked, runq time.Duration) *probes.SchedSwitchIn {
	var ev probes.SchedSwitchIn
	ev.Hdr.Pid, ev.Hdr.Tid = pid, tid
	ev.OffCpuNs = uint64(blocked + runq)
	ev.RunqNs = uint64(runq)
	if runq > 0 {
		ev.WaitKind = uint8(probes.WaitWoken)
	}
	ev.WakerKind = uint8(kind)
	ev.WakerPid, ev.WakerTid = wakerPid, wakerTid
	ev.WakerComm = commOf(name)
	ev.SyscallNr = nr
	return &ev
}

// A CUDA thread's voluntary waits each go, their blocked time (switch-out to wakeup,
// not the run-queue wait after it), to who woke them and what they blocked in: the
// dispatcher's own tokenizers on a futex are tokenizer, self, lock, with their four
// threads; timer wakeups of a sleep are interrupt; a wait with no wakeup seen is none;
// another process's waker is not self; a task that calls itself interrupt or none is
// not taken for one. Preemptions and the other threads' waits make no blocked series,
// and the series add up to the voluntary waits that came in.
func TestVoluntaryWaitsGoToTheirWakerAndWhatTheyWaitedOn(t *testing.T) {
	const pid, tid, otherTID = 6000, 6001, 6002
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir()
	a := newAggregator(cfg, &wallClock{}, nil, false)
	a.selfPID = 1
	a.CUDAThread(&probes.EventHeader{Pid: pid, Tid: tid})

	ms := time.Millisecond
	for i := range 10 {
		a.Sched(blockedWait(pid, tid, probes.WakerTask, pid, 6010+uint32(i%4), "tokenizer", sysFutex, 3*ms, ms/2))
	}
	for range 5 {
		a.Sched(blockedWait(pid, tid, probes.WakerInterrupt, 0, 0, "", sysClockNanosleep, 2*ms, 0))
	}
	for range 3 {
		a.Sched(blockedWait(pid, tid, probes.WakerNone, 0, 0, "", -1, 4*ms, 0))
	}
	a.Sched(blockedWait(pid, tid, probes.WakerTask, 7000, 7003, "kubelet", sysEpollWait, 10*ms, ms))
	a.Sched(blockedWait(pid, tid, probes.WakerTask, 7000, 7004, "kubelet", sysEpollWait, 10*ms, ms))
	a.Sched(blockedWait(pid, tid, probes.WakerTask, pid, 6020, "cuda-EvtHandlr", sysIoctl, 7*ms, 0))
	a.Sched(blockedWait(pid, tid, probes.WakerInterrupt, 0, 0, "", sysRead, 5*ms, 0))
	a.Sched(blockedWait(pid, tid, probes.WakerTask, 7100, 7101, "interrupt", sysFutex, 6*ms, 0))
	a.Sched(blockedWait(pid, tid, probes.WakerTask, 7200, 7201, "", 999, 8*ms, 0))
	// Not blocked series: a preemption, and a wait of a thread that calls no CUDA.
	a.Sched(preemption(pid, tid, 7300, "hog", 50*ms))
	a.Sched(blockedWait(pid, otherTID, probes.WakerTask, pid, 6010, "tokenizer", sysFutex, 9*ms, 0))

	got := wakerPoints(t, a.emit(time.Now().Add(time.Second), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false)), pid, tid)
	want := map[string]*wakerPoint{
		"tokenizer self=true on=lock":        {blocks: 10, seconds: 10 * 3e-3, threads: 4},
		"interrupt self=false on=sleep":      {blocks: 5, seconds: 5 * 2e-3},
		"none self=false on=other":           {blocks: 3, seconds: 3 * 4e-3},
		"kubelet self=false on=poll":         {blocks: 2, seconds: 2 * 10e-3, threads: 2},
		"cuda-EvtHandlr self=true on=device": {blocks: 1, seconds: 7e-3, threads: 1},
		"interrupt self=false on=io":         {blocks: 1, seconds: 5e-3},
		"other self=false on=lock":           {blocks: 1, seconds: 6e-3, threads: 1},
		"unknown self=false on=other":        {blocks: 1, seconds: 8e-3, threads: 1},
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	var blocks int64
	var seconds float64
	for key, w := range want {
		g := got[key]
		if g == nil || g.blocks != w.blocks || math.Abs(g.seconds-w.seconds) > 1e-12 || g.threads != w.threads {
			t.Errorf("%s: %+v, want %+v", key, g, w)
		}
	}
	for _, g := range got {
		blocks += g.blocks
		seconds += g.seconds
	}
	if blocks != 24 || math.Abs(seconds-(30e-3+10e-3+12e-3+20e-3+7e-3+5e-3+6e-3+8e-3)) > 1e-12 {
		t.Errorf("series add up to %d waits, %.6f s; 24 waits, 0.098 s came in", blocks, seconds)
	}
	if n := a.drops.snapshot()["waker_names"]; n != 0 {
		t.Errorf("waker_names drops %d, want 0", n)
	}
}

// An interval with more waker names than the candidates' table (40 light names, then
// tokenizer, 100 lock waits of 4 ms from 70 threads): tokenizer is still named with
// exactly what it cost, its thread count saturates at 64 (6 waker_threads drops), each
// light name the table let go counts a waker_names drop per wait, the rest of the
// interval goes to other, and the series add up to what came in. Over later intervals
// with new names each time, the thread keeps no more than its bounded set of series.
func TestWakerNamesAreBoundedFoldedAndConserved(t *testing.T) {
	const pid, tid = 6100, 6101
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir()
	a := newAggregator(cfg, &wallClock{}, nil, false)
	a.selfPID = 1
	a.CUDAThread(&probes.EventHeader{Pid: pid, Tid: tid})
	const light = 40
	for n := range light {
		a.Sched(blockedWait(pid, tid, probes.WakerTask, 40_000+uint32(n), 40_000+uint32(n), fmt.Sprintf("light-%02d", n), sysFutex, time.Millisecond, 0))
	}
	for k := range 100 {
		a.Sched(blockedWait(pid, tid, probes.WakerTask, pid, 50_000+uint32(k%70), "tokenizer", sysFutex, 4*time.Millisecond, 0))
	}
	now := time.Now().Add(time.Second)
	got := wakerPoints(t, a.emit(now, 0, hostTotals{}, &hostTotals{}, hostIdentity("", false)), pid, tid)
	if p := got["tokenizer self=true on=lock"]; p == nil || p.blocks != 100 || math.Abs(p.seconds-0.4) > 1e-9 || p.threads != maxPreemptorProcesses {
		t.Errorf("tokenizer %+v, want 100 waits, 0.4 s, %d threads; series %v", p, maxPreemptorProcesses, sortedKeys(got))
	}
	// The 8 heaviest: tokenizer and 7 light names (the first by name among equals).
	if len(got) != maxPreemptorNames+1 || got["other self=false on=lock"] == nil {
		t.Errorf("series %v, want the %d heaviest names and other", sortedKeys(got), maxPreemptorNames)
	}
	var waits int64
	var seconds float64
	for _, p := range got {
		waits += p.blocks
		seconds += p.seconds
	}
	if waits != light+100 || math.Abs(seconds-(light*1e-3+0.4)) > 1e-9 {
		t.Errorf("series add up to %d waits, %.6f s; %d, %.6f s came in", waits, seconds, light+100, light*1e-3+0.4)
	}
	drops := a.drops.snapshot()
	// 32 light names fill the table; the other 8 and tokenizer each let one go.
	if n := drops["waker_names"]; n != light-maxPreemptorCandidates+1 {
		t.Errorf("waker_names drops %d, want %d", n, light-maxPreemptorCandidates+1)
	}
	if n := drops["waker_threads"]; n != 70-maxPreemptorProcesses {
		t.Errorf("waker_threads drops %d, want %d", n, 70-maxPreemptorProcesses)
	}
	if n := drops["preemptor_names"] + drops["preemptor_processes"]; n != 0 {
		t.Errorf("preemptor drops %d from waker names", n)
	}

	// 30 more intervals, each with 10 names never seen before and the tokenizer: the
	// thread never holds more than 16 named series and its other buckets, and the last
	// totals of every series it exported add up to every wait.
	totalWaits, totalSeconds := int64(light+100), light*1e-3+0.4
	last := pcommon.NewTimestampFromTime(now)
	ever := got
	for i := range 30 {
		for n := range 10 {
			name := fmt.Sprintf("w%02d-%d", i, n)
			a.Sched(blockedWait(pid, tid, probes.WakerTask, 60_000, 60_000, name, sysRead, time.Duration(n+1)*time.Millisecond, 0))
			totalWaits++
			totalSeconds += float64(n+1) * 1e-3
		}
		a.Sched(blockedWait(pid, tid, probes.WakerTask, pid, 50_000, "tokenizer", sysFutex, 4*time.Millisecond, 0))
		totalWaits++
		totalSeconds += 4e-3
		now = now.Add(time.Minute)
		md := a.emit(now, last, hostTotals{}, &hostTotals{}, hostIdentity("", false))
		last = pcommon.NewTimestampFromTime(now)
		if n := len(a.processes[pid].threads[tid].wakers); n > maxPreemptorSeries+2 {
			t.Fatalf("interval %d: the thread keeps %d waker entries, more than %d series and its other buckets", i, n, maxPreemptorSeries)
		}
		for key, p := range wakerPoints(t, md, pid, tid) {
			ever[key] = p // a name let go never returns here: one identity per key
		}
	}
	var everWaits int64
	var everSeconds float64
	for _, p := range ever {
		everWaits += p.blocks
		everSeconds += p.seconds
	}
	if everWaits != totalWaits || math.Abs(everSeconds-totalSeconds) > 1e-9 {
		t.Errorf("the thread's series, each at its last point, add up to %d waits, %.6f s; %d, %.6f s came in", everWaits, everSeconds, totalWaits, totalSeconds)
	}
}
