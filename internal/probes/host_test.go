//go:build linux

package probes_test

import (
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
