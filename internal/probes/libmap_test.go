//go:build linux

package probes_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
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
// the gap is not seen. In "gated", the workload waits at its gate, so the gap is
// measured alone; in "held" (Options.HoldFirstLoad), the kernel stops the workload at
// each new file's mmap and the gap is how long it stays stopped: from the mmap to
// Continue. ns/op is dominated by detaching every iteration's uprobes when the probes
// close.
func BenchmarkAttachOnFirstUse(b *testing.B) {
	privtest.Require(b)
	paths := fakegpu.Build(b)
	for _, held := range []bool{false, true} {
		name := "gated"
		if held {
			name = "held"
		}
		b.Run(name, func(b *testing.B) { benchAttachOnFirstUse(b, paths, held) })
	}
}

func benchAttachOnFirstUse(b *testing.B, paths fakegpu.Paths, held bool) {
	p, err := probes.Load(probes.Options{TraceAllCUDA: held, HoldFirstLoad: held})
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
		w := fakegpu.Start(b, paths, fakegpu.Options{Gate: !held, Steps: 1, Launches: 1, Env: []string{"LD_LIBRARY_PATH=" + lib}})
		var last time.Duration
		for attached := 0; attached < 2; {
			ev := <-mapped
			if int(ev.Hdr.Pid) != w.Pid {
				continue
			}
			if held != (ev.Held == 1) {
				b.Fatalf("%s: held %d", ev.FileName(), ev.Held)
			}
			name := ev.FileName()
			kind, _ := ev.MappedLibrary()
			if _, _, err := p.AttachLibrary(filepath.Join("/proc", strconv.Itoa(w.Pid), "root", lib, name), kind); err != nil {
				b.Fatal(err)
			}
			if held {
				if err := p.Continue(uint32(w.Pid)); err != nil {
					b.Fatal(err)
				}
			}
			last = max(last, time.Duration(monotonicNow()-int64(ev.Hdr.TsNs)))
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

// procState is the state letter of /proc/PID/stat ('T': stopped).
func procState(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		t.Fatalf("unreadable stat: %q", b)
	}
	return b[i+2]
}

// With HoldFirstLoad the kernel stops a traced process as it maps a library file no
// probe is on, and it stays stopped until continued: by this collector, by the next one
// on the same pinned state (the held set outlives its collector, as when one dies
// mid-hold), or by Close. A file marked probed is mapped without a stop.
func TestAFirstLoadIsHeldUntilContinued(t *testing.T) {
	privtest.RequireBPFFS(t)
	paths := fakegpu.Build(t)
	pinDir := collectortest.PinDir(t)
	opts := probes.Options{TraceAllCUDA: true, HoldFirstLoad: true, PinDir: pinDir}
	p, err := probes.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.AttachLibraryMaps(); err != nil {
		t.Fatal(err)
	}
	mapped := make(chan probes.LibraryMapped, 64)
	stop := runReader(t, p, mapHandler{all: func(ev *probes.LibraryMapped) { mapped <- *ev }})
	defer stop()
	next := func(pid int) probes.LibraryMapped {
		t.Helper()
		for {
			select {
			case ev := <-mapped:
				if int(ev.Hdr.Pid) == pid {
					return ev
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no library mapping of pid %d reported", pid)
			}
		}
	}
	lib := privateLibDir(t, paths.Cudart, paths.Cuda)
	w := fakegpu.Start(t, paths, fakegpu.Options{Steps: 1, Launches: 10, Env: []string{"LD_LIBRARY_PATH=" + lib}})

	first := next(w.Pid)
	if first.Held != 1 {
		t.Fatalf("%s: not held", first.FileName())
	}
	collectortest.WaitFor(t, "the workload stopped", 5*time.Second, func() bool { return procState(t, w.Pid) == 'T' })
	time.Sleep(100 * time.Millisecond)
	if s := procState(t, w.Pid); s != 'T' {
		t.Fatalf("the held workload is in state %c, want T (stopped) until continued", s)
	}

	// The next collector, on the same pinned state, finds it held and continues it.
	next2, err := probes.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	held, err := next2.Held()
	if err != nil || !slices.Contains(held, uint32(w.Pid)) {
		t.Fatalf("the next collector sees held %v (%v), want pid %d among them", held, err, w.Pid)
	}
	if err := next2.Continue(uint32(w.Pid)); err != nil {
		t.Fatal(err)
	}
	// (Not asked: whether it is still listed held. Continued, it maps its next new file
	// at once and is held again, which the next record says.)
	_ = next2.Close()

	// Continued, it maps the second new file and is held again; Close continues it.
	second := next(w.Pid)
	if second.Held != 1 || second.FileName() == first.FileName() {
		t.Fatalf("second mapping %s held %d, want the other library held", second.FileName(), second.Held)
	}
	if _, _, err := p.AttachLibrary(filepath.Join(lib, second.FileName()), probes.LibCUDA); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatalf("the workload did not finish after Close: %v", err)
	}
	if res.Calls["cudaLaunchKernel"] != 10 {
		t.Errorf("the workload made %d launches, want 10", res.Calls["cudaLaunchKernel"])
	}

	// A file marked probed (libcuda, attached above) is mapped without a stop; a
	// new copy of libcudart is a new file, and held.
	p3, err := probes.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	if _, _, err := p3.AttachLibrary(filepath.Join(lib, filepath.Base(paths.Cuda)), probes.LibCUDA); err != nil {
		t.Fatal(err)
	}
	if err := p3.AttachLibraryMaps(); err != nil {
		t.Fatal(err)
	}
	mapped3 := make(chan probes.LibraryMapped, 64)
	stop3 := runReader(t, p3, mapHandler{all: func(ev *probes.LibraryMapped) { mapped3 <- *ev }})
	defer stop3()
	w3 := fakegpu.Start(t, paths, fakegpu.Options{Steps: 1, Launches: 10, Env: []string{"LD_LIBRARY_PATH=" + lib}})
	for seen := 0; seen < 2; {
		select {
		case ev := <-mapped3:
			if int(ev.Hdr.Pid) != w3.Pid {
				continue
			}
			seen++
			wantHeld := ev.FileName() != filepath.Base(paths.Cuda)
			if (ev.Held == 1) != wantHeld {
				t.Errorf("%s: held %d, want held %v", ev.FileName(), ev.Held, wantHeld)
			}
			if ev.Held == 1 {
				if err := p3.Continue(uint32(w3.Pid)); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the third workload's mappings were not reported")
		}
	}
	if _, err := w3.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
}

// privateLibDir copies library files to a directory of the test's own: new inodes.
func privateLibDir(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
