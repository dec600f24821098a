//go:build linux

package probes_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/privtest"
	"github.com/fathom-gpu/fathom/internal/probes"
)

// A process starting up maps libcudart and libcuda through the dynamic linker: the
// mmap tracepoints report each exactly once, with the file's name, family, device and
// inode as stat(2) gives them, and nothing for the other libraries it maps (libc,
// libpthread) or for the files it maps without execute permission.
func TestLibraryMappingsAreReported(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p, err := probes.Load(probes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.AttachLibraryMaps(); err != nil {
		t.Fatal(err)
	}
	// The pid is known only once the process runs: every mapping is kept.
	var all []probes.LibraryMapped
	var allMu sync.Mutex
	stop := runReader(t, p, mapHandler{all: func(ev *probes.LibraryMapped) {
		allMu.Lock()
		all = append(all, *ev)
		allMu.Unlock()
	}})
	w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 1, Launches: 1})
	// The gate comes after the loader mapped every library; the records were sent
	// with a wakeup, so they are read within a moment.
	time.Sleep(100 * time.Millisecond)
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	stop()

	allMu.Lock()
	var mine []probes.LibraryMapped
	for _, ev := range all {
		if int(ev.Hdr.Pid) == w.Pid {
			mine = append(mine, ev)
		}
	}
	allMu.Unlock()
	want := map[string]probes.Library{
		filepath.Base(paths.Cudart): probes.LibCUDART,
		filepath.Base(paths.Cuda):   probes.LibCUDA,
	}
	if len(mine) != len(want) {
		t.Fatalf("%d mappings reported for the workload, want %d (one per probed library): %+v", len(mine), len(want), mine)
	}
	for _, ev := range mine {
		name := ev.FileName()
		lib, ok := ev.MappedLibrary()
		if !ok || lib != want[name] {
			t.Errorf("%s reported as %q (known %v), want %q", name, lib, ok, want[name])
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(paths.LibDir, name), &st); err != nil {
			t.Fatal(err)
		}
		if ev.Ino != st.Ino || ev.DeviceNumber() != st.Dev {
			t.Errorf("%s: dev %#x ino %d reported, stat says dev %#x ino %d", name, ev.DeviceNumber(), ev.Ino, st.Dev, st.Ino)
		}
		if p.IsAttached(st.Dev, st.Ino) {
			t.Errorf("%s reported as attached, but nothing attached it", name)
		}
		if ev.Hdr.Tid != ev.Hdr.Pid {
			t.Errorf("%s mapped by thread %d, want the loader on the main thread %d", name, ev.Hdr.Tid, ev.Hdr.Pid)
		}
	}
}

// mapHandler passes every library mapping to all; other events are dropped.
type mapHandler struct {
	all func(*probes.LibraryMapped)
}

func (h mapHandler) CUDACall(*probes.CUDACall)                      {}
func (h mapHandler) CUDAThread(*probes.EventHeader)                 {}
func (h mapHandler) Sched(*probes.SchedSwitchIn)                    {}
func (h mapHandler) Process(probes.EventKind, *probes.ProcessEvent) {}
func (h mapHandler) BlockIO(*probes.BlockIO)                        {}
func (h mapHandler) TCPRetransmit(*probes.TCPRetransmit)            {}
func (h mapHandler) Identity(*probes.ProcessIdentity)               {}
func (h mapHandler) NCCLCall(*probes.NCCLCall)                      {}
func (h mapHandler) RDMAAsync(*probes.RDMAAsyncEvent)               {}
func (h mapHandler) LibraryMapped(ev *probes.LibraryMapped)         { h.all(ev) }

// BenchmarkAttachOnFirstUse reports the gap attach on first use leaves: from the
// mmap that maps a new libcudart and libcuda (a process starting on files no process
// had mapped) to both libraries' uprobes being in place, as the receiver does it:
// the record read off the ring, then AttachLibrary. A call the process makes inside
// the gap is not seen. The workload waits at its gate, so the gap is measured alone.
// ns/op is dominated by detaching every iteration's uprobes when the probes close.
func BenchmarkAttachOnFirstUse(b *testing.B) {
	privtest.Require(b)
	paths := fakegpu.Build(b)
	p, err := probes.Load(probes.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if err := p.AttachLibraryMaps(); err != nil {
		b.Fatal(err)
	}
	mapped := make(chan probes.LibraryMapped, 64)
	stop := runReader(b, p, mapHandler{all: func(ev *probes.LibraryMapped) {
		select {
		case mapped <- *ev:
		default:
		}
	}})
	defer stop()
	var gaps []time.Duration
	for i := 0; i < b.N; i++ {
		lib := b.TempDir()
		for _, src := range []string{paths.Cudart, paths.Cuda} {
			data, err := os.ReadFile(src)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(lib, filepath.Base(src)), data, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		w := fakegpu.Start(b, paths, fakegpu.Options{Gate: true, Steps: 1, Launches: 1, Env: []string{"LD_LIBRARY_PATH=" + lib}})
		var last time.Duration
		for attached := 0; attached < 2; {
			ev := <-mapped
			if int(ev.Hdr.Pid) != w.Pid {
				continue
			}
			name := ev.FileName()
			kind, _ := ev.MappedLibrary()
			if _, _, err := p.AttachLibrary(filepath.Join("/proc", strconv.Itoa(w.Pid), "root", lib, name), kind); err != nil {
				b.Fatal(err)
			}
			last = time.Duration(monotonicNow() - int64(ev.Hdr.TsNs))
			attached++
		}
		gaps = append(gaps, last)
		w.Kill() // the gap is measured; what it would run is not
		<-w.Exited()
	}
	slices.Sort(gaps)
	b.ReportMetric(float64(gaps[len(gaps)/2])/1e6, "median-gap-ms")
	b.ReportMetric(float64(gaps[len(gaps)-1])/1e6, "max-gap-ms")
}

func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
