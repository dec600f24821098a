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
	paths := fakegpu.Build(t)
	p, err := probes.Load(probes.Options{TraceAllCUDA: false})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for lib, name := range map[probes.Library]string{probes.LibCUDART: "libcudart.so.12", probes.LibCUDA: "libcuda.so.1"} {
		if _, _, err := p.AttachLibrary(filepath.Join(paths.LibDir, name), lib); err != nil {
			t.Fatal(err)
		}
	}

	// A cgroup v2 hierarchy of the test's own (hosts may mount v1 at /sys/fs/cgroup).
	root := t.TempDir()
	if err := syscall.Mount("none", root, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mount cgroup2: %v", err)
	}
	defer syscall.Unmount(root, syscall.MNT_DETACH)
	group := filepath.Join(root, "fathom-targets-test")
	if err := os.Mkdir(group, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(group)

	opts := fakegpu.Options{Gate: true, Steps: 1, Launches: 50}
	byPID, byCgroup, untraced := fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts), fakegpu.Start(t, paths, opts)
	if err := p.TracePID(uint32(byPID.Pid)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(group, "cgroup.procs"), []byte(strconv.Itoa(byCgroup.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(group, &st); err != nil {
		t.Fatal(err)
	}
	if err := p.TraceCgroup(st.Ino); err != nil {
		t.Fatal(err)
	}
	rec := &perPID{calls: map[uint32]int{}}
	stop := runReader(t, p, rec)
	reports := map[int]int64{}
	for _, w := range []*fakegpu.Workload{byPID, byCgroup, untraced} {
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
		reports[w.Pid] = probed
	}
	stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Every probed call of the traced two is seen, exactly.
	for name, w := range map[string]*fakegpu.Workload{"by pid": byPID, "by cgroup": byCgroup} {
		if got := int64(rec.calls[uint32(w.Pid)]); got != reports[w.Pid] || got < 50 {
			t.Errorf("process traced %s: %d calls seen, it made %d probed calls", name, got, reports[w.Pid])
		}
	}
	if n := rec.calls[uint32(untraced.Pid)]; n != 0 {
		t.Errorf("untraced process: %d calls seen, want none", n)
	}
}
