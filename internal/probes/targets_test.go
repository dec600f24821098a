//go:build linux

package probes_test

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/cgrouptest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

type perPID struct {
	discard
	mu    sync.Mutex
	calls map[uint32]int
}

func (r *perPID) CUDACall(ev *probes.CUDACall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[ev.Hdr.Pid]++
}

// With TraceAllCUDA off, the kernel traces a named pid and the processes of a named
// cgroup (cgroup v2, compared by id in the kernel), and nothing else.
func TestOnlyNamedPIDsAndCgroupsAreTraced(t *testing.T) {
	privtest.Require(t)
	p, paths := loadUntargeted(t)
	group := cgrouptest.Make(t, cgrouptest.Root(t), "fathom-targets-test")

	opts := fakegpu.Options{Gate: true, Steps: 1, Launches: 50}
	byPID, byCgroup, untraced := fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts)
	if err := p.TracePID(uint32(byPID.Pid)); err != nil {
		t.Fatal(err)
	}
	cgrouptest.Move(t, group, byCgroup.Pid)
	if err := p.TraceCgroup(cgrouptest.ID(t, group)); err != nil {
		t.Fatal(err)
	}
	seen, made := runWorkloads(t, p, byPID, byCgroup, untraced)
	// Every probed call of the traced two is seen, exactly.
	for name, w := range map[string]*fakegpu.Workload{"by pid": byPID, "by cgroup": byCgroup} {
		if got := int64(seen[uint32(w.Pid)]); got != made[w.Pid] || got < 50 {
			t.Errorf("process traced %s: %d calls seen, it made %d probed calls", name, got, made[w.Pid])
		}
	}
	if n := seen[uint32(untraced.Pid)]; n != 0 {
		t.Errorf("untraced process: %d calls seen, want none", n)
	}
}

// A named cgroup stands for its subtree, as a Kubernetes QoS slice names every pod's
// container below it: a process two levels down is traced, one in a sibling is not.
func TestNamedCgroupSubtreeIsTraced(t *testing.T) {
	privtest.Require(t)
	p, paths := loadUntargeted(t)
	top := cgrouptest.Make(t, cgrouptest.Root(t), "fathom-subtree-test")
	named := cgrouptest.Make(t, top, "named")
	container := cgrouptest.Make(t, cgrouptest.Make(t, named, "pod"), "ctr")
	sibling := cgrouptest.Make(t, top, "sibling")

	opts := fakegpu.Options{Gate: true, Steps: 1, Launches: 50}
	inSubtree, outside := fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts)
	cgrouptest.Move(t, container, inSubtree.Pid)
	cgrouptest.Move(t, sibling, outside.Pid)
	if err := p.TraceCgroup(cgrouptest.ID(t, named)); err != nil {
		t.Fatal(err)
	}
	seen, made := runWorkloads(t, p, inSubtree, outside)
	if got := int64(seen[uint32(inSubtree.Pid)]); got != made[inSubtree.Pid] || got < 50 {
		t.Errorf("process in named/pod/ctr: %d calls seen, it made %d probed calls", got, made[inSubtree.Pid])
	}
	if n := seen[uint32(outside.Pid)]; n != 0 {
		t.Errorf("process in a sibling of the named cgroup: %d calls seen, want none", n)
	}
}

// loadUntargeted loads the probes with TraceAllCUDA off and attaches the fake CUDA
// libraries, so only what a test names is traced.
func loadUntargeted(t *testing.T) (*probes.Probes, fakegpu.Paths) {
	t.Helper()
	paths := fakegpu.Build(t)
	p, err := probes.Load(probes.Options{TraceAllCUDA: false})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for lib, name := range map[probes.Library]string{probes.LibCUDART: "libcudart.so.12", probes.LibCUDA: "libcuda.so.1"} {
		if _, _, err := p.AttachLibrary(filepath.Join(paths.LibDir, name), lib); err != nil {
			t.Fatal(err)
		}
	}
	return p, paths
}

// runWorkloads releases each gated workload and waits for it, reading events meanwhile;
// it returns the calls seen per pid and the probed calls each workload says it made.
func runWorkloads(t *testing.T, p *probes.Probes, workloads ...*fakegpu.Workload) (seen map[uint32]int, made map[int]int64) {
	t.Helper()
	rec := &perPID{calls: map[uint32]int{}}
	stop := runReader(t, p, rec)
	made = map[int]int64{}
	for _, w := range workloads {
		if err := w.Release(); err != nil {
			t.Fatal(err)
		}
		r, err := w.Wait(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var probed int64
		for _, a := range probes.APIs {
			probed += r.Calls[a.Symbol]
		}
		made[w.Pid] = probed
	}
	stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.calls, made
}
