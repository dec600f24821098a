//go:build linux

package probes_test

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// hostRecorder keeps the host events of one process.
type hostRecorder struct {
	discard
	mu                         sync.Mutex
	pid                        uint32
	forks, exits, identities   int
	executable                 string
	blockIOs                   int
	blockBytes                 uint64
	switchIns, preemptedSwitch int
}

func (r *hostRecorder) Process(kind probes.EventKind, ev *probes.ProcessEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case kind == probes.KindFork && ev.ParentPid == r.pid:
		r.forks++
	case kind == probes.KindExit && ev.Hdr.Pid == r.pid:
		r.exits++
	}
}

func (r *hostRecorder) BlockIO(ev *probes.BlockIO) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Pid == r.pid {
		r.blockIOs++
		r.blockBytes += ev.Bytes
	}
}

func (r *hostRecorder) Sched(ev *probes.SchedSwitchIn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Pid == r.pid {
		r.switchIns++
		if ev.Preempted != 0 {
			r.preemptedSwitch++
		}
	}
}

func (r *hostRecorder) Identity(ev *probes.ProcessIdentity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Pid == r.pid {
		r.identities++
		r.executable = ev.Executable()
	}
}

// A traced process's forks are each seen once (and its children traced), its page
// allocations are counted in the kernel, its fsync'd writes show up as block I/O, and
// its exit is seen once.
func TestHostEventsOfATracedProcess(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadAndAttach(t, paths, traceAllCUDA)
	before, err := p.ReadHostAggregates()
	if err != nil {
		t.Fatal(err)
	}
	ioDir := t.TempDir()
	w := fakegpu.Start(t, paths, fakegpu.Options{
		Gate: true, Steps: 10, Launches: 100, StepGap: 5 * time.Millisecond,
		Forks: 20, IOBurstMB: 4, IOEvery: 10 * time.Millisecond, IODir: ioDir, IOInline: true,
	})
	rec := &hostRecorder{pid: uint32(w.Pid)}
	report := traceWorkload(t, p, w, rec)
	after, err := p.ReadHostAggregates()
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if report.Forks != 20 || rec.forks != 20 {
		t.Errorf("forks seen %d, workload forked %d, want 20", rec.forks, report.Forks)
	}
	// The identity carries the executable's whole name: comm would cut it to 15 bytes.
	if rec.exits != 1 || rec.identities != 1 || rec.executable != "fakegpu-workload" {
		t.Errorf("exit events %d identity events %d (executable %q), want 1 and 1 (fakegpu-workload)", rec.exits, rec.identities, rec.executable)
	}
	if rec.switchIns == 0 {
		t.Errorf("no switch-in of the traced process's threads seen")
	}
	// Writing the bursts into the page cache allocates at least one page per 4 KiB.
	if pages := after.PagesByPID[uint32(w.Pid)]; pages < uint64(report.IOBytes)/4096 {
		t.Errorf("page allocations of the workload: %d pages, it wrote %d bytes", pages, report.IOBytes)
	}
	if report.IOBytes == 0 || report.IOBursts == 0 {
		t.Fatalf("the workload wrote nothing: %+v", report)
	}
	written := after.BlockBytesWrite - before.BlockBytesWrite
	if written < uint64(report.IOBytes) {
		t.Errorf("block writes on the node grew by %d bytes, the workload fsync'd %d", written, report.IOBytes)
	}
	t.Logf("forks %d, switch-ins %d (%d preempted), pages %d, block I/Os issued by the workload %d (%d bytes), node writes +%d bytes",
		rec.forks, rec.switchIns, rec.preemptedSwitch, after.PagesByPID[uint32(w.Pid)], rec.blockIOs, rec.blockBytes, written)

	// Once the process's last export carried its total, the total goes: a process that
	// reuses the pid starts from zero.
	if err := p.ForgetPageAllocs(uint32(w.Pid)); err != nil {
		t.Fatal(err)
	}
	if err := p.ForgetPageAllocs(uint32(w.Pid)); err != nil {
		t.Errorf("forgetting a pid twice: %v", err)
	}
	if agg, err := p.ReadHostAggregates(); err != nil {
		t.Fatal(err)
	} else if n, ok := agg.PagesByPID[uint32(w.Pid)]; ok {
		t.Errorf("%d pages still counted for pid %d after ForgetPageAllocs", n, w.Pid)
	}
}

// waitRecorder keeps one thread's waits for a CPU as its switch-ins report them: by
// kind, and by the name and process of the task each names, and checks that each
// switch-in's wait kind agrees with its other fields.
type waitRecorder struct {
	discard
	mu  sync.Mutex
	tid uint32
	// switch-ins by wait kind; woken ones split by whether they name a task
	preempted, woken, wokenNamed, none int
	offCPU                             time.Duration // of the preempted switch-ins
	wokenRunq, wokenNamedRunq          time.Duration // run-queue time of the woken ones
	runq                               time.Duration // of every switch-in, as the run-queue histogram sums it
	// the waits attributed to each name as the receiver does: a preemption its off-CPU
	// time, a woken wait that names a task its run-queue time; and each kind apart
	byName, preemptedByName, wokenByName map[string]time.Duration
	countByName                          map[string]int
	pidsByName                           map[string]map[uint32]bool
	inconsistent                         []string
}

func newWaitRecorder(tid int) *waitRecorder {
	return &waitRecorder{
		tid: uint32(tid), byName: map[string]time.Duration{}, preemptedByName: map[string]time.Duration{},
		wokenByName: map[string]time.Duration{}, countByName: map[string]int{}, pidsByName: map[string]map[uint32]bool{},
	}
}

func (r *waitRecorder) Sched(ev *probes.SchedSwitchIn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Tid != r.tid {
		return
	}
	name, pid, runq := ev.PreemptorName(), ev.PreemptorPid, time.Duration(ev.RunqNs)
	r.runq += runq
	var waited time.Duration
	switch kind := probes.SchedWait(ev.WaitKind); {
	case kind == probes.WaitPreempted && ev.Preempted != 0:
		waited = time.Duration(ev.OffCpuNs)
		r.preempted++
		r.offCPU += waited
		r.preemptedByName[name] += waited
	case kind == probes.WaitWoken && ev.Preempted == 0 && runq > 0:
		r.woken++
		r.wokenRunq += runq
		if pid == 0 {
			if name != "" {
				r.inconsistent = append(r.inconsistent, "woken behind the idle task, named "+name)
			}
			return
		}
		if name == "" {
			r.inconsistent = append(r.inconsistent, "woken behind a task with no name")
		}
		waited = runq
		r.wokenNamed++
		r.wokenNamedRunq += runq
		r.wokenByName[name] += runq
	case kind == probes.WaitNone && ev.Preempted == 0 && runq == 0:
		r.none++
		if pid != 0 || name != "" {
			r.inconsistent = append(r.inconsistent, "a switch-in with no wait named "+name)
		}
		return
	default:
		r.inconsistent = append(r.inconsistent, fmt.Sprintf("wait kind %d with preempted=%d, run queue %v", kind, ev.Preempted, runq))
		return
	}
	r.byName[name] += waited
	r.countByName[name]++
	if r.pidsByName[name] == nil {
		r.pidsByName[name] = map[uint32]bool{}
	}
	r.pidsByName[name][pid] = true
}

// check fails the test on switch-ins whose wait kind disagrees with them, and on a
// table that does not hold every preemption and every woken wait that names a task
// once: what the receiver's series must add up to.
func (r *waitRecorder) check(t *testing.T) {
	t.Helper()
	if len(r.inconsistent) > 0 {
		t.Errorf("%d switch-ins disagree with their wait kind, e.g. %s", len(r.inconsistent), r.inconsistent[0])
	}
	count, attributed := 0, time.Duration(0)
	for name, n := range r.countByName {
		count += n
		attributed += r.byName[name]
	}
	if count != r.preempted+r.wokenNamed || attributed != r.offCPU+r.wokenNamedRunq {
		t.Errorf("names hold %d waits, %v; %d preempted switch-ins (%v) and %d woken waits behind a task (%v) came in",
			count, attributed, r.preempted, r.offCPU, r.wokenNamed, r.wokenNamedRunq)
	}
}

// A dispatcher pinned to one CPU with three busy processes of a known name pinned
// beside it is preempted, nearly always by them: each preempted switch-in names the
// task that took the CPU (its comm) and that task's process, and all three hogs show
// up under their name. Switch-ins without a wait name nobody.
func TestPreemptionsNameTheTaskThatTookTheCPU(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadAndAttach(t, paths, traceAllCUDA)
	const cpu, hogName = 0, "preempt-hog"
	// 10,000 launches of 20 µs CPU each: 200 ms of CPU for the dispatcher, which gets a
	// quarter of its CPU beside three hogs.
	w := fakegpu.Start(t, paths, fakegpu.Options{
		Gate: true, DispatcherThread: true, Pin: true, PinCPU: cpu,
		Steps: 20, Launches: 10_000, LaunchCost: 20 * time.Microsecond,
	})
	// Other work on the machine (a build beside the tests) wakes up on the CPU too and
	// preempts whatever runs there; at nice -10 the hogs and the dispatcher weigh ten
	// times what it does.
	hogs := map[uint32]bool{}
	for range 3 {
		h := fakegpu.StartHog(t, paths, hogName, cpu)
		fakegpu.Renice(t, h.Pid, -10)
		hogs[uint32(h.Pid)] = true
	}
	fakegpu.Renice(t, w.Tid, -10)
	rec := newWaitRecorder(w.Tid)
	report := traceWorkload(t, p, w, rec)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if report.Tid != w.Tid || report.PinCPU != cpu {
		t.Fatalf("dispatcher %d on CPU %d, want %d on %d", report.Tid, report.PinCPU, w.Tid, cpu)
	}
	t.Logf("dispatcher %d: %d preemptions, %.1f ms off CPU, by %v; %d woken waits (%d behind a task), %.1f ms",
		w.Tid, rec.preempted, rec.offCPU.Seconds()*1e3, rec.preemptedByName, rec.woken, rec.wokenNamed, rec.wokenRunq.Seconds()*1e3)
	rec.check(t)
	if rec.preempted < 10 {
		t.Fatalf("%d preempted switch-ins of the dispatcher beside 3 hogs, want at least 10", rec.preempted)
	}
	if share := rec.preemptedByName[hogName].Seconds() / rec.offCPU.Seconds(); share < 0.9 {
		t.Errorf("%s took %.1f%% of the dispatcher's preempted off-CPU time, want ≥ 90%%: %v", hogName, 100*share, rec.preemptedByName)
	}
	if !maps.Equal(rec.pidsByName[hogName], hogs) {
		t.Errorf("waits named %s came from processes %v, want the hogs %v", hogName, rec.pidsByName[hogName], hogs)
	}
}

// A dispatcher that sleeps between short bursts of CUDA calls (data loading between
// steps) on a CPU where two busier processes spin at a higher priority is hardly ever
// preempted: it loses its CPU time waiting in the run queue after each wakeup. Each of
// those switch-ins names the task that held the CPU until then, so nearly all of the
// dispatcher's run-queue wait goes to the two hogs, under their name.
func TestRunQueueWaitsNameTheTaskThatHeldTheCPU(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadAndAttach(t, paths, traceAllCUDA)
	const cpu, hogName = 0, "batch-etl"
	for attempt := 1; ; attempt++ {
		w := startSleepingDispatcher(t, paths, cpu)
		hogs := map[uint32]bool{}
		var started []*fakegpu.Hog
		for range 2 {
			h := fakegpu.StartHog(t, paths, hogName, cpu)
			fakegpu.Renice(t, h.Pid, sleepingHogNice)
			hogs[uint32(h.Pid)] = true
			started = append(started, h)
		}
		fakegpu.Renice(t, w.Tid, sleepingDispatcherNice)
		rec := newWaitRecorder(w.Tid)
		report := traceWorkload(t, p, w, rec)
		for _, h := range started {
			h.Stop()
		}
		rec.mu.Lock()
		if report.Tid != w.Tid || report.PinCPU != cpu {
			t.Fatalf("dispatcher %d on CPU %d, want %d on %d", report.Tid, report.PinCPU, w.Tid, cpu)
		}
		share := rec.byName[hogName].Seconds() / rec.runq.Seconds()
		t.Logf("dispatcher %d: %d woken waits (%d behind a task), %.1f ms in the run queue, by %v; %d preemptions, %.1f ms off CPU; %s: %.1f%% of the run-queue wait",
			w.Tid, rec.woken, rec.wokenNamed, rec.wokenRunq.Seconds()*1e3, rec.wokenByName, rec.preempted, rec.offCPU.Seconds()*1e3, hogName, 100*share)
		rec.check(t)
		if rec.wokenNamed < sleepingSteps/2 {
			t.Fatalf("%d woken waits of the dispatcher behind a task in %d sleeps, want at least %d", rec.wokenNamed, sleepingSteps, sleepingSteps/2)
		}
		if !maps.Equal(rec.pidsByName[hogName], hogs) {
			t.Errorf("waits named %s came from processes %v, want the hogs %v", hogName, rec.pidsByName[hogName], hogs)
		}
		rec.mu.Unlock()
		if share >= 0.8 {
			return
		}
		if attempt == sleepingAttempts {
			t.Fatalf("%s held the CPU for %.1f%% of the dispatcher's run-queue wait, want ≥ 80%%: %v", hogName, 100*share, rec.byName)
		}
		t.Logf("attempt %d: other work held the CPU for more than a fifth of the wait; again", attempt)
	}
}

// The sleeping dispatcher: each of its steps is two launches of 20 µs CPU, then 2 ms
// asleep, on a CPU it shares with hogs at a higher priority: they weigh three times what
// it does (nice -10 against -5), and both ten or three times what a build running
// beside the tests does. Such a build still runs on the CPU now and then, the link step
// for tens of milliseconds, and the dispatcher's waits behind it are rightly its: with
// two builds beside the tests on a 2-CPU machine the hogs' share fell to 64–77% in
// some runs (97–100% without). A short share is measured again, sleepingAttempts times
// in all.
const (
	sleepingSteps          = 600
	sleepingHogNice        = -10
	sleepingDispatcherNice = -5
	sleepingAttempts       = 3
)

func startSleepingDispatcher(t *testing.T, paths fakegpu.Paths, cpu int) *fakegpu.Workload {
	return fakegpu.Start(t, paths, fakegpu.Options{
		Gate: true, DispatcherThread: true, Pin: true, PinCPU: cpu,
		Steps: sleepingSteps, StepGap: 2 * time.Millisecond, Launches: 2 * sleepingSteps, LaunchCost: 20 * time.Microsecond,
	})
}
