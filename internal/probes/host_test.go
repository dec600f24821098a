//go:build linux

package probes_test

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/privtest"
	"github.com/fathom-gpu/fathom/internal/probes"
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

// preemptorRecorder keeps the preempted switch-ins of one thread, by the name and
// process of the task that took its CPU, and checks that no other switch-in of it
// names one.
type preemptorRecorder struct {
	discard
	mu                  sync.Mutex
	tid                 uint32
	preempted           int
	offCPU              time.Duration // of the preempted switch-ins
	byName              map[string]time.Duration
	countByName         map[string]int
	pidsByName          map[string]map[uint32]bool
	voluntaryWithNaming int
}

func (r *preemptorRecorder) Sched(ev *probes.SchedSwitchIn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Tid != r.tid {
		return
	}
	if ev.Preempted == 0 {
		if ev.PreemptorPid != 0 || ev.PreemptorName() != "" {
			r.voluntaryWithNaming++
		}
		return
	}
	name, d := ev.PreemptorName(), time.Duration(ev.OffCpuNs)
	r.preempted++
	r.offCPU += d
	r.byName[name] += d
	r.countByName[name]++
	if r.pidsByName[name] == nil {
		r.pidsByName[name] = map[uint32]bool{}
	}
	r.pidsByName[name][ev.PreemptorPid] = true
}

// A dispatcher pinned to one CPU with three busy processes of a known name pinned
// beside it is preempted, nearly always by them: each preempted switch-in names the
// task that took the CPU (its comm) and that task's process, and all three hogs show
// up under their name. Voluntary switch-ins name nobody.
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
	rec := &preemptorRecorder{tid: uint32(w.Tid), byName: map[string]time.Duration{}, countByName: map[string]int{}, pidsByName: map[string]map[uint32]bool{}}
	report := traceWorkload(t, p, w, rec)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if report.Tid != w.Tid || report.PinCPU != cpu {
		t.Fatalf("dispatcher %d on CPU %d, want %d on %d", report.Tid, report.PinCPU, w.Tid, cpu)
	}
	t.Logf("dispatcher %d: %d preemptions, %.1f ms off CPU, by %v (time %v)", w.Tid, rec.preempted, rec.offCPU.Seconds()*1e3, rec.countByName, rec.byName)
	if rec.preempted < 10 {
		t.Fatalf("%d preempted switch-ins of the dispatcher beside 3 hogs, want at least 10", rec.preempted)
	}
	if share := rec.byName[hogName].Seconds() / rec.offCPU.Seconds(); share < 0.9 {
		t.Errorf("%s took %.1f%% of the dispatcher's preempted off-CPU time, want ≥ 90%%: %v", hogName, 100*share, rec.byName)
	}
	if !maps.Equal(rec.pidsByName[hogName], hogs) {
		t.Errorf("preemptions named %s came from processes %v, want the hogs %v", hogName, rec.pidsByName[hogName], hogs)
	}
	if rec.voluntaryWithNaming != 0 {
		t.Errorf("%d voluntary switch-ins named a preemptor", rec.voluntaryWithNaming)
	}
}
