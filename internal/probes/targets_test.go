//go:build linux

package probes_test

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/privtest"
	"github.com/fathom-gpu/fathom/internal/probes"
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
	group := makeCgroup(t, mountCgroup2(t), "fathom-targets-test")

	opts := fakegpu.Options{Gate: true, Steps: 1, Launches: 50}
	byPID, byCgroup, untraced := fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts)
	if err := p.TracePID(uint32(byPID.Pid)); err != nil {
		t.Fatal(err)
	}
	moveToCgroup(t, group, byCgroup.Pid)
	if err := p.TraceCgroup(cgroupID(t, group)); err != nil {
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
	top := makeCgroup(t, mountCgroup2(t), "fathom-subtree-test")
	named := makeCgroup(t, top, "named")
	container := makeCgroup(t, makeCgroup(t, named, "pod"), "ctr")
	sibling := makeCgroup(t, top, "sibling")

	opts := fakegpu.Options{Gate: true, Steps: 1, Launches: 50}
	inSubtree, outside := fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts)
	moveToCgroup(t, container, inSubtree.Pid)
	moveToCgroup(t, sibling, outside.Pid)
	if err := p.TraceCgroup(cgroupID(t, named)); err != nil {
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

// mountCgroup2 mounts a cgroup v2 hierarchy of the test's own (hosts may mount v1 at
// /sys/fs/cgroup); it is the kernel's one v2 hierarchy, so its ids are the kernel's.
func mountCgroup2(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := syscall.Mount("none", root, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mount cgroup2: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(root, syscall.MNT_DETACH) })
	return root
}

// makeCgroup creates a child cgroup, removed at cleanup after the workloads that a test
// starts later have exited (cleanups run last-registered first).
func makeCgroup(t *testing.T, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

func moveToCgroup(t *testing.T, cgroup string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cgroupID is the cgroup's id as bpf_get_current_cgroup_id reports it: its inode.
func cgroupID(t *testing.T, cgroup string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(cgroup, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
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
