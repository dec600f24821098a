//go:build linux

package gpuebpfreceiver_test

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// threadPreemptor is the latest export of one preemptor series of one CUDA thread.
type threadPreemptor struct {
	preemptions, processes int64
	seconds                float64
}

// preemptorsOf folds the sink's exports into the latest point of each preemptor
// series of thread tid of process pid, keyed by "name self=BOOL". Points with another
// role than cuda, or without the four attributes, are reported as bad.
func preemptorsOf(sink *collectortest.Sink, pid, tid int) (out map[string]*threadPreemptor, bad []string) {
	out = map[string]*threadPreemptor{}
	eachMetric(sink, func(p int64, _ pcommon.Map, m pmetric.Metric) {
		var dps pmetric.NumberDataPointSlice
		switch m.Name() {
		case semconv.MetricThreadPreemptions, semconv.MetricThreadPreemptTime:
			dps = m.Sum().DataPoints()
		case semconv.MetricThreadPreemptors:
			dps = m.Gauge().DataPoints()
		default:
			return
		}
		for k := 0; k < dps.Len(); k++ {
			dp := dps.At(k)
			a := dp.Attributes()
			role, _ := a.Get(semconv.ThreadRole)
			thread, _ := a.Get(semconv.ThreadID)
			name, _ := a.Get(semconv.PreemptorName)
			self, hasSelf := a.Get(semconv.PreemptorSelf)
			if role.Str() != "cuda" || !hasSelf || self.Type() != pcommon.ValueTypeBool || a.Len() != 4 {
				bad = append(bad, seriesKey(m.Name(), a))
				continue
			}
			if p != int64(pid) || thread.Int() != int64(tid) {
				continue
			}
			key := fmt.Sprintf("%s self=%v", name.Str(), self.Bool())
			s := out[key]
			if s == nil {
				s = &threadPreemptor{}
				out[key] = s
			}
			switch m.Name() {
			case semconv.MetricThreadPreemptions:
				s.preemptions = dp.IntValue()
			case semconv.MetricThreadPreemptTime:
				s.seconds = dp.DoubleValue()
			default:
				s.processes = dp.IntValue()
			}
		}
	})
	return out, bad
}

// A CUDA dispatcher pinned to one CPU beside three busy processes named preempt-hog is
// preempted mostly by them, and the real collector says so: per preemptor name, the
// waits, their time and the distinct processes. A dispatcher that sleeps between
// short bursts of calls beside two hogs at a higher priority is hardly preempted but
// waits in the run queue after each wakeup, and that wait goes to the hogs too.
// Nothing is lost on the way: over all names the waits hold every preemption and no
// more than the run-queue histogram. When the collector's own threads share the
// dispatcher's CPU, what they take is marked as the collector's.
func TestPreemptorsOfADispatcherReachOTLP(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const cpu, hogName, hogCount = 0, "preempt-hog", 3
	// Other work on the machine (a build beside the tests) wakes up on the CPU too and
	// preempts whatever runs there. At nice -10 the hogs and the dispatcher weigh ten
	// times what it does, so what takes the dispatcher's CPU is the hogs, as on a node
	// whose dispatcher shares its core with one job's busy workers.
	const hogNice = -10
	// Held at its gate before the collector starts, so the collector's first scan
	// finds it.
	w := startPinnedDispatcher(t, paths, cpu)
	sink, col := startCollector(t)

	t.Run("three hogs on the dispatcher's CPU are named as what took it", func(t *testing.T) {
		var hogs []*fakegpu.Hog
		for range hogCount {
			hogs = append(hogs, fakegpu.StartHog(t, paths, hogName, cpu))
			fakegpu.Renice(t, hogs[len(hogs)-1].Pid, hogNice)
		}
		fakegpu.Renice(t, w.Tid, hogNice)
		run := runDispatcher(t, sink, w, cpu)
		for _, h := range hogs {
			h.Stop()
		}
		preemptors, preempted := run.preemptors, run.preempted
		hog := hogName + " self=false"
		h := preemptors[hog]
		if h == nil {
			t.Fatalf("no preemptor series %s for dispatcher %d", hog, w.Tid)
		}
		if preempted.count < 10 {
			t.Fatalf("%d preemptions of the dispatcher beside %d hogs, want at least 10", preempted.count, hogCount)
		}
		if _, ok := preemptors[hogName+" self=true"]; ok {
			t.Errorf("the hogs' preemptions are marked as the collector's own")
		}
		if h.processes != hogCount {
			t.Errorf("%s: %d distinct processes, want the %d hogs", hog, h.processes, hogCount)
		}
		if share := h.seconds / run.seconds; share < 0.9 {
			t.Errorf("%s took %.1f%% of the dispatcher's attributed wait, want ≥ 90%%", hogName, 100*share)
		} else {
			t.Logf("%s: %d of %d waits (%d preemptions), %.1f%% of the attributed wait, %d processes", hogName, h.preemptions, run.waits, preempted.count, 100*share, h.processes)
		}
	})

	t.Run("two hogs hold the CPU a sleeping dispatcher waits for after its wakeups", func(t *testing.T) {
		const hogName, hogCount = "batch-etl", 2
		for attempt := 1; ; attempt++ {
			w := fakegpu.Start(t, paths, fakegpu.Options{
				Gate: true, DispatcherThread: true, Pin: true, PinCPU: cpu,
				Steps: sleepingSteps, StepGap: 2 * time.Millisecond, Launches: 2 * sleepingSteps, LaunchCost: 20 * time.Microsecond,
			})
			var hogs []*fakegpu.Hog
			for range hogCount {
				hogs = append(hogs, fakegpu.StartHog(t, paths, hogName, cpu))
				fakegpu.Renice(t, hogs[len(hogs)-1].Pid, sleepingHogNice)
			}
			fakegpu.Renice(t, w.Tid, sleepingDispatcherNice)
			run := runDispatcher(t, sink, w, cpu)
			for _, h := range hogs {
				h.Stop()
			}
			hog := run.preemptors[hogName+" self=false"]
			if hog == nil {
				t.Fatalf("no preemptor series %s self=false for dispatcher %d", hogName, w.Tid)
			}
			if _, ok := run.preemptors[hogName+" self=true"]; ok {
				t.Errorf("the hogs' waits are marked as the collector's own")
			}
			if woken := run.waits - int64(run.preempted.count); woken < sleepingSteps/2 {
				t.Fatalf("%d woken waits of the dispatcher behind a task in %d sleeps, want at least %d", woken, sleepingSteps, sleepingSteps/2)
			}
			if hog.processes != hogCount {
				t.Errorf("%s: %d distinct processes, want the %d hogs", hogName, hog.processes, hogCount)
			}
			share := hog.seconds / run.runQueue.sum
			t.Logf("%s: %d of %d waits (%d preemptions), %.1f%% of the run-queue wait (%.1f of %.1f ms), %d processes",
				hogName, hog.preemptions, run.waits, run.preempted.count, 100*share, hog.seconds*1e3, run.runQueue.sum*1e3, hog.processes)
			if share >= 0.8 {
				return
			}
			if attempt == sleepingAttempts {
				t.Fatalf("%s held the CPU for %.1f%% of the dispatcher's run-queue wait, want ≥ 80%%", hogName, 100*share)
			}
			t.Logf("attempt %d: other work held the CPU for more than a fifth of the wait; again", attempt)
		}
	})

	t.Run("the collector's own preemptions are marked self", func(t *testing.T) {
		// Every thread of the collector onto the dispatcher's CPU (threads it starts
		// later inherit the mask): its ring reader, woken every 10 ms, then preempts
		// the dispatcher.
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", col.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		var set unix.CPUSet
		set.Set(cpu)
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				t.Fatalf("pinning collector thread %d: %v", tid, err)
			}
		}
		w := startPinnedDispatcher(t, paths, cpu)
		self := 0
		for key, s := range runDispatcher(t, sink, w, cpu).preemptors {
			if strings.HasSuffix(key, " self=true") {
				self++
				if key != "fathom self=true" || s.processes != 1 || s.preemptions == 0 {
					t.Errorf("%s: %d preemptions by %d processes; want the collector (comm fathom), one process", key, s.preemptions, s.processes)
				}
			}
		}
		if self != 1 {
			t.Errorf("%d series marked self, want the collector's one", self)
		}
	})

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// startPinnedDispatcher starts a workload held at its gate whose dispatcher thread is
// pinned to cpu: 10,000 launches of 20 µs CPU each, 200 ms of CPU in all.
func startPinnedDispatcher(t *testing.T, paths fakegpu.Paths, cpu int) *fakegpu.Workload {
	return fakegpu.Start(t, paths, fakegpu.Options{
		Gate: true, DispatcherThread: true, Pin: true, PinCPU: cpu,
		Steps: 20, Launches: 10_000, LaunchCost: 20 * time.Microsecond,
	})
}

// The sleeping dispatcher: each of its steps is two launches of 20 µs CPU, then 2 ms
// asleep, so that it waits for its CPU after a wakeup far more often than it is
// preempted. The hogs beside it weigh three times what it does (nice -10 against
// -5), and both ten or three times what a build running beside the tests does. What
// such a build still takes of the CPU is rightly named for it, and can be more than a
// fifth of the wait (the probes test says more): a short share is measured again,
// sleepingAttempts times in all.
const (
	sleepingSteps          = 600
	sleepingHogNice        = -10
	sleepingDispatcherNice = -5
	sleepingAttempts       = 3
)

// dispatcherRun is what the last export that carries a workload says about its
// dispatcher thread.
type dispatcherRun struct {
	preemptors map[string]*threadPreemptor
	waits      int64 // over all preemptor names
	seconds    float64
	preempted  point // the preempted off-CPU histogram
	runQueue   point // the run-queue histogram
}

// runDispatcher releases w and returns its dispatcher's preemptor series, preempted
// off-CPU histogram and run-queue histogram from the last export that carries the
// workload. It checks what every run must hold: the preemptor points' attributes, and
// that over all names the waits hold every preemption (its off-CPU time) and, beyond
// those, woken waits of no more than the run-queue histogram holds.
func runDispatcher(t *testing.T, sink *collectortest.Sink, w *fakegpu.Workload, cpu int) dispatcherRun {
	t.Helper()
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if report.Tid != w.Tid || report.Tid == report.Pid || report.PinCPU != cpu {
		t.Fatalf("dispatcher %d of %d on CPU %d, want thread %d on CPU %d", report.Tid, report.Pid, report.PinCPU, w.Tid, cpu)
	}
	tid := fmt.Sprint(w.Tid)
	preemptedKey := seriesKey(semconv.MetricThreadOffCPU, attrs(semconv.OffCPUReason, "preempted", semconv.ThreadRole, "cuda", semconv.ThreadID, tid))
	runQueueKey := seriesKey(semconv.MetricThreadRunQueue, attrs(semconv.ThreadRole, "cuda", semconv.ThreadID, tid))
	var run dispatcherRun
	var bad []string
	// The series of an exited process end with one last export, which holds all it
	// did: wait (bounded) until an export no longer carries the workload.
	settled := func() bool {
		ended := false
		if mds := sink.Metrics(); len(mds) > 0 {
			ended = !exportCarries(mds[len(mds)-1], w.Pid)
		}
		run.preemptors, bad = preemptorsOf(sink, w.Pid, w.Tid)
		v := view(sink, w.Pid)
		run.preempted, run.runQueue = v.series[preemptedKey], v.series[runQueueKey]
		return ended && run.runQueue.count > 0
	}
	for deadline := time.Now().Add(30 * time.Second); !settled() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	var lines []string
	for k, s := range run.preemptors {
		lines = append(lines, fmt.Sprintf("  %s: %d waits, %.2f ms, %d processes", k, s.preemptions, s.seconds*1e3, s.processes))
		run.waits += s.preemptions
		run.seconds += s.seconds
	}
	sort.Strings(lines)
	t.Logf("dispatcher %d: %d preemptions, %.1f ms preempted off CPU; %d run-queue waits, %.1f ms; by name:\n%s",
		w.Tid, run.preempted.count, run.preempted.sum*1e3, run.runQueue.count, run.runQueue.sum*1e3, strings.Join(lines, "\n"))
	if len(bad) > 0 {
		t.Errorf("preemptor points without thread.id, role cuda, a name and a bool self: %v", bad)
	}
	if run.runQueue.count == 0 {
		t.Fatalf("no run-queue wait of dispatcher %d exported", w.Tid)
	}
	// Every switch-in after a preemption or a wakeup is a run-queue wait; those woken
	// onto an idle CPU name nobody, so the names hold at most as many.
	eps := 1e-6 * (run.preempted.sum + run.runQueue.sum)
	if uint64(run.waits) < run.preempted.count || uint64(run.waits) > run.runQueue.count ||
		run.seconds < run.preempted.sum-eps || run.seconds-run.preempted.sum > run.runQueue.sum+eps {
		t.Errorf("preemptor series add up to %d waits, %.6f s; want at least the preempted off-CPU histogram's %d, %.6f s, and at most %d waits and %.6f s beyond it (the run-queue histogram)",
			run.waits, run.seconds, run.preempted.count, run.preempted.sum, run.runQueue.count, run.runQueue.sum)
	}
	return run
}

// exportCarries says whether one export holds a resource of process pid.
func exportCarries(md pmetric.Metrics, pid int) bool {
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		if p, ok := md.ResourceMetrics().At(i).Resource().Attributes().Get(semconv.ProcessPID); ok && p.Int() == int64(pid) {
			return true
		}
	}
	return false
}
