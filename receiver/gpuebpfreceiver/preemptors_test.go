package gpuebpfreceiver

import (
	"fmt"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// preemptorPoint is what one CUDA thread's preemptor series carry in one export.
type preemptorPoint struct {
	preemptions, processes int64
	seconds                float64
}

// preemptorPoints reads the preemptor series of thread tid of process pid, keyed by
// "name self=BOOL"; it fails the test on a preemptor point of any thread without role
// cuda, or a series that comes twice.
func preemptorPoints(t *testing.T, md pmetric.Metrics, pid, tid int64) map[string]*preemptorPoint {
	t.Helper()
	out := map[string]*preemptorPoint{}
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
			case semconv.MetricThreadPreemptions, semconv.MetricThreadPreemptTime:
				dps = m.Sum().DataPoints()
			case semconv.MetricThreadPreemptors:
				dps = m.Gauge().DataPoints()
			default:
				continue
			}
			for k := 0; k < dps.Len(); k++ {
				dp := dps.At(k)
				a := dp.Attributes()
				role, _ := a.Get(semconv.ThreadRole)
				thread, _ := a.Get(semconv.ThreadID)
				name, _ := a.Get(semconv.PreemptorName)
				self, hasSelf := a.Get(semconv.PreemptorSelf)
				if role.Str() != "cuda" || !hasSelf || a.Len() != 4 {
					t.Fatalf("%s point with attributes %v, want thread.id, role cuda, a name and self", m.Name(), a.AsRaw())
				}
				if thread.Int() != tid {
					continue
				}
				key := fmt.Sprintf("%s self=%v", name.Str(), self.Bool())
				if seen[m.Name()+key] {
					t.Fatalf("%s: two points for %s", m.Name(), key)
				}
				seen[m.Name()+key] = true
				p := out[key]
				if p == nil {
					p = &preemptorPoint{}
					out[key] = p
				}
				switch m.Name() {
				case semconv.MetricThreadPreemptions:
					p.preemptions = dp.IntValue()
				case semconv.MetricThreadPreemptTime:
					p.seconds = dp.DoubleValue()
				default:
					p.processes = dp.IntValue()
				}
			}
		}
	}
	return out
}

func preemption(pid, tid, preemptor uint32, comm string, offCPU time.Duration) *probes.SchedSwitchIn {
	var ev probes.SchedSwitchIn
	ev.Hdr.Pid, ev.Hdr.Tid = pid, tid
	ev.Preempted = 1
	ev.OffCpuNs = uint64(offCPU)
	ev.PreemptorPid = preemptor
	ev.PreemptorComm = commOf(comm)
	return &ev
}

// Within one interval a CUDA thread names its 8 heaviest preemptors and counts every
// other one under "other", so nothing is lost: the preemptions and their off-CPU time
// over all series add up to what came in. A name's distinct processes are counted up to
// 64, and what the set refuses is a drop. Other threads of the process keep no
// preemptors.
func TestPreemptorsOfACUDAThreadAreBoundedAndConserved(t *testing.T) {
	const pid, tid, otherTID = 5000, 5001, 5002
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir()
	a := newAggregator(cfg, &wallClock{}, nil, false)
	// The collector here is the test process, whose pid may be one of the made-up
	// preemptors' below (10000-11169 on CI once, so one wait was marked self): a pid
	// none of them has stands for it.
	a.selfPID = 1
	a.CUDAThread(&probes.EventHeader{Pid: pid, Tid: tid})

	// Name n preempts the thread n+1 times, 1 ms each, from n+1 processes; name 0 70
	// times from 70 processes, past the set's bound. The heaviest 8 are names 0 and
	// 5-11, whatever the order they came in.
	var total int64
	var totalSeconds float64
	want := map[string]*preemptorPoint{}
	for n := 0; n < 12; n++ {
		name := fmt.Sprintf("worker-%02d", n)
		procs := n + 1
		if n == 0 {
			procs = 70
		}
		key := name + " self=false"
		if n >= 1 && n < 5 {
			key = "other self=false"
		}
		if want[key] == nil {
			want[key] = &preemptorPoint{}
		}
		for i := 0; i < max(n+1, procs); i++ {
			a.Sched(preemption(pid, tid, uint32(10_000+100*n+i%procs), name, time.Millisecond))
			want[key].preemptions++
			want[key].seconds += 1e-3
			total++
			totalSeconds += 1e-3
		}
		want[key].processes += int64(min(procs, maxPreemptorProcesses))
	}
	// A task named "other" joins the other bucket rather than making a second series
	// of that name, and so does the idle task (pid 0), a light name, though it counts no
	// process.
	a.Sched(preemption(pid, tid, 20_000, "other", 2*time.Millisecond))
	a.Sched(preemption(pid, tid, 0, "swapper/1", 3*time.Millisecond))
	want["other self=false"].preemptions += 2
	want["other self=false"].seconds += 5e-3
	want["other self=false"].processes++
	total += 2
	totalSeconds += 5e-3
	// The process's other threads' preemptions count in their off-CPU time only.
	a.Sched(preemption(pid, otherTID, 30_000, "worker-00", time.Millisecond))

	md := a.emit(time.Now(), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false))
	got := preemptorPoints(t, md, pid, tid)
	var gotTotal int64
	var gotSeconds float64
	named := 0
	for key, p := range got {
		gotTotal += p.preemptions
		gotSeconds += p.seconds
		if key != "other self=false" {
			named++
		}
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected series %s: %+v", key, *p)
			continue
		}
		if p.preemptions != w.preemptions || math.Abs(p.seconds-w.seconds) > 1e-9 || p.processes != w.processes {
			t.Errorf("%s: %d preemptions, %.4f s, %d processes; want %d, %.4f s, %d", key, p.preemptions, p.seconds, p.processes, w.preemptions, w.seconds, w.processes)
		}
	}
	if named != maxPreemptorNames || len(got) != maxPreemptorNames+1 {
		t.Errorf("%d series (%d named): %v; want %d named and other", len(got), named, keysOf(got), maxPreemptorNames)
	}
	if gotTotal != total || math.Abs(gotSeconds-totalSeconds) > 1e-9 {
		t.Errorf("series add up to %d preemptions, %.4f s; %d, %.4f s came in", gotTotal, gotSeconds, total, totalSeconds)
	}
	if n := a.drops.snapshot()["preemptor_processes"]; n != 70-maxPreemptorProcesses {
		t.Errorf("preemptor_processes drops %d, want %d (70 processes under one name, %d remembered)", n, 70-maxPreemptorProcesses, maxPreemptorProcesses)
	}
	if other := preemptorPoints(t, md, pid, otherTID); len(other) != 0 {
		t.Errorf("a thread that does not call CUDA has preemptor series: %v", keysOf(other))
	}
}

// A preemption by the collector's own process is marked self=true, apart from another
// process of the same name, and the series follow the temporality: under delta each
// export carries what came since the last one.
func TestPreemptionsByTheCollectorAreMarkedSelf(t *testing.T) {
	const pid, tid = 6000, 6001
	for _, temporality := range []string{TemporalityCumulative, TemporalityDelta} {
		cfg := createDefaultConfig()
		cfg.Temporality = temporality
		cfg.Discovery.ProcRoot = t.TempDir()
		a := newAggregator(cfg, &wallClock{}, nil, false)
		a.selfPID = 7000
		a.CUDAThread(&probes.EventHeader{Pid: pid, Tid: tid})
		a.Sched(preemption(pid, tid, 7000, "fathom", time.Millisecond))
		a.Sched(preemption(pid, tid, 7000, "fathom", time.Millisecond))
		a.Sched(preemption(pid, tid, 7001, "fathom", 4*time.Millisecond))
		a.Sched(preemption(pid, tid, 7002, "hog", 8*time.Millisecond))
		// A comm the kernel left empty is named unknown; a voluntary switch names no
		// preemptor.
		a.Sched(preemption(pid, tid, 0, "", 16*time.Millisecond))
		voluntary := preemption(pid, tid, 0, "", time.Millisecond)
		voluntary.Preempted = 0
		a.Sched(voluntary)

		got := preemptorPoints(t, a.emit(time.Now(), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false)), pid, tid)
		want := map[string]preemptorPoint{
			"fathom self=true":   {preemptions: 2, seconds: 2e-3, processes: 1},
			"fathom self=false":  {preemptions: 1, seconds: 4e-3, processes: 1},
			"hog self=false":     {preemptions: 1, seconds: 8e-3, processes: 1},
			"unknown self=false": {preemptions: 1, seconds: 16e-3},
		}
		if len(got) != len(want) {
			t.Errorf("%s: series %v, want %d", temporality, keysOf(got), len(want))
		}
		for key, w := range want {
			if p := got[key]; p == nil || p.preemptions != w.preemptions || math.Abs(p.seconds-w.seconds) > 1e-9 || p.processes != w.processes {
				t.Errorf("%s: %s = %+v, want %+v", temporality, key, p, w)
			}
		}

		a.Sched(preemption(pid, tid, 7002, "hog", 8*time.Millisecond))
		got = preemptorPoints(t, a.emit(time.Now(), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false)), pid, tid)
		hog, wantHog := got["hog self=false"], int64(2)
		if temporality == TemporalityDelta {
			wantHog = 1
			if len(got) != 1 {
				t.Errorf("delta: series %v after an interval with only hog, want hog alone", keysOf(got))
			}
		}
		if hog == nil || hog.preemptions != wantHog || hog.processes != 1 {
			t.Errorf("%s: second export hog = %+v, want %d preemptions by 1 process", temporality, hog, wantHog)
		}
	}
}

// wokenWait is a switch-in of a thread that was woken and then waited runq in the run
// queue behind process preemptor (0: the idle task, which leaves comm empty).
func wokenWait(pid, tid, preemptor uint32, comm string, runq time.Duration) *probes.SchedSwitchIn {
	var ev probes.SchedSwitchIn
	ev.Hdr.Pid, ev.Hdr.Tid = pid, tid
	ev.WaitKind = uint8(probes.WaitWoken)
	ev.OffCpuNs = uint64(runq + 5*time.Millisecond)
	ev.RunqNs = uint64(runq)
	ev.PreemptorPid = preemptor
	ev.PreemptorComm = commOf(comm)
	return &ev
}

// A CUDA thread's waits in the run queue after a wakeup are attributed, their
// run-queue time, to the task that held the CPU until it got it, in the same table as
// its preemptions (their off-CPU time): the series add up to the preemptions plus the
// woken waits behind a task. A wait woken onto an idle CPU, and a switch-in after no
// known wait, name nobody; the run-queue histogram still holds them.
func TestWokenWaitsGoToTheTaskThatHeldTheCPU(t *testing.T) {
	const pid, tid, otherTID = 8000, 8001, 8002
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir()
	a := newAggregator(cfg, &wallClock{}, nil, false)
	a.selfPID = 9000
	a.CUDAThread(&probes.EventHeader{Pid: pid, Tid: tid})

	preempted := preemption(pid, tid, 8100, "batch-etl", 4*time.Millisecond)
	preempted.WaitKind = uint8(probes.WaitPreempted)
	preempted.RunqNs = uint64(4 * time.Millisecond)
	a.Sched(preempted)
	a.Sched(wokenWait(pid, tid, 8100, "batch-etl", time.Millisecond))
	a.Sched(wokenWait(pid, tid, 8101, "batch-etl", 2*time.Millisecond))
	a.Sched(wokenWait(pid, tid, 9000, "fathom", 500*time.Microsecond))
	a.Sched(wokenWait(pid, tid, 0, "", 3*time.Millisecond)) // onto an idle CPU
	blocked := wokenWait(pid, tid, 0, "", 0)                // no wakeup seen
	blocked.WaitKind = uint8(probes.WaitNone)
	a.Sched(blocked)
	a.Sched(wokenWait(pid, otherTID, 8100, "batch-etl", time.Millisecond))

	md := a.emit(time.Now(), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false))
	got := preemptorPoints(t, md, pid, tid)
	want := map[string]preemptorPoint{
		"batch-etl self=false": {preemptions: 3, seconds: 7e-3, processes: 2},
		"fathom self=true":     {preemptions: 1, seconds: 0.5e-3, processes: 1},
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %d", keysOf(got), len(want))
	}
	var waits int64
	var seconds float64
	for key, w := range want {
		p := got[key]
		if p == nil || p.preemptions != w.preemptions || math.Abs(p.seconds-w.seconds) > 1e-9 || p.processes != w.processes {
			t.Errorf("%s = %+v, want %+v", key, p, w)
			continue
		}
		waits += p.preemptions
		seconds += p.seconds
	}
	// One preemption (4 ms) and three woken waits behind a task (3.5 ms).
	if waits != 1+3 || math.Abs(seconds-7.5e-3) > 1e-9 {
		t.Errorf("series add up to %d waits, %.4f s; want 4, 0.0075 s", waits, seconds)
	}
	if other := preemptorPoints(t, md, pid, otherTID); len(other) != 0 {
		t.Errorf("a thread that does not call CUDA has preemptor series: %v", keysOf(other))
	}
	runq := threadHistogram(md, pid, tid, semconv.MetricThreadRunQueue)
	if runq.Count() != 5 || math.Abs(runq.Sum()-10.5e-3) > 1e-9 {
		t.Errorf("run-queue histogram %d waits, %.4f s; want 5, 0.0105 s", runq.Count(), runq.Sum())
	}
}

// threadHistogram is the histogram named name of thread tid of process pid.
func threadHistogram(md pmetric.Metrics, pid, tid int64, name string) pmetric.ExponentialHistogramDataPoint {
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		if p, ok := rm.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != pid {
			continue
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			if m := ms.At(j); m.Name() == name {
				dps := m.ExponentialHistogram().DataPoints()
				for k := 0; k < dps.Len(); k++ {
					if th, ok := dps.At(k).Attributes().Get(semconv.ThreadID); ok && th.Int() == tid {
						return dps.At(k)
					}
				}
			}
		}
	}
	return pmetric.NewExponentialHistogramDataPoint()
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
