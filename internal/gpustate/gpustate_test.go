package gpustate

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
)

// board writes a fake node's GPUs for the fake libnvidia-ml.so.1 and points it there.
func board(t *testing.T, gpus ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i, g := range gpus {
		writeGPU(t, dir, i, g)
	}
	t.Setenv("FAKEGPU_BOARD", dir)
	return dir
}

func writeGPU(t *testing.T, dir string, i int, state string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "gpu"+string(rune('0'+i))), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
}

func addProcess(t *testing.T, dir string, gpu int, pid, bytes string) {
	t.Helper()
	procs := filepath.Join(dir, "gpu"+string(rune('0'+gpu))+".procs")
	if err := os.MkdirAll(procs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(procs, pid), []byte(bytes), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T) *Library {
	t.Helper()
	l, err := Open(fakegpu.Build(t).NVML)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

// The real go-nvml reads every field of two GPUs through the fake library: one at rest,
// one held down by heat with its link trained to x8 and its memory wearing.
func TestReadsEveryFieldOfEachGPU(t *testing.T) {
	dir := board(t, "util_gpu=97\nutil_memory=41\nmemory_used=68719476736\n",
		`uuid=GPU-5c1d2a33-8f1e-4b6a-9d3c-2a7e5b9c0f11
bus_id=00000000:9A:00.0
sm_clock=1410
mem_clock=2619
clock_event_reasons=sw_thermal,hw_thermal
power_mw=612345
power_limit_mw=700000
temperature_c=87
pcie_gen=4
pcie_width=8
pcie_replays=17
ecc_corrected=3
ecc_uncorrected=1
remapped_correctable=2
remapped_uncorrectable=1
remap_pending=1
`)
	// NVML lists live processes: the test itself, its parent, and init; a process that
	// exited without taking its entry away (killed) is not listed.
	self, parent := uint32(os.Getpid()), uint32(os.Getppid())
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	addProcess(t, dir, 0, strconv.Itoa(int(self)), "1073741824")
	addProcess(t, dir, 1, "1", "")
	addProcess(t, dir, 1, strconv.Itoa(int(parent)), "2048")
	addProcess(t, dir, 1, strconv.Itoa(exited.Process.Pid), "4096")
	l := open(t)
	if v, err := l.DriverVersion(); err != nil || v != "550.90.07-fakegpu" {
		t.Errorf("driver version %q, %v", v, err)
	}
	gpus, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	for i := range gpus {
		slices.SortFunc(gpus[i].Processes, func(a, b Process) int { return int(a.PID) - int(b.PID) })
	}
	want := []GPU{{
		Index: 0, UUID: "GPU-fa7a0000-0000-4000-8000-000000000000", BusID: "00000000:18:00.0", Name: "NVIDIA H100 80GB HBM3", Vendor: "NVIDIA",
		SMClockMHz: 1980, SMClockMaxMHz: 1980, MemClockMHz: 2619, MemClockMaxMHz: 2619,
		PowerWatts: 350, PowerLimitWatts: 700, TemperatureC: 45,
		UtilizationPercent: 97, MemoryUtilizationPercent: 41, MemoryUsedBytes: 64 << 30, MemoryTotalBytes: 80 << 30,
		PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16,
		Processes: []Process{{PID: self, UsedMemoryBytes: 1 << 30}},
	}, {
		Index: 1, UUID: "GPU-5c1d2a33-8f1e-4b6a-9d3c-2a7e5b9c0f11", BusID: "00000000:9A:00.0", Name: "NVIDIA H100 80GB HBM3", Vendor: "NVIDIA",
		SMClockMHz: 1410, SMClockMaxMHz: 1980, MemClockMHz: 2619, MemClockMaxMHz: 2619,
		ClockEventReasons: 0x20 | 0x40,
		PowerWatts:        612.345, PowerLimitWatts: 700, TemperatureC: 87,
		MemoryTotalBytes: 80 << 30,
		PCIeGen:          4, PCIeGenMax: 5, PCIeWidth: 8, PCIeWidthMax: 16, PCIeReplays: 17,
		ECCCorrected: 3, ECCUncorrected: 1, RemappedCorrectable: 2, RemappedUncorrectable: 1, RemapPending: true,
		Processes: []Process{{PID: 1}, {PID: parent, UsedMemoryBytes: 2048}},
	}}
	if !reflect.DeepEqual(gpus, want) {
		t.Fatalf("read\n%+v\nwant\n%+v", gpus, want)
	}
	if r := gpus[1].Reasons(); !slices.Equal(r, []string{"sw_thermal_slowdown", "hw_thermal_slowdown"}) || !gpus[1].Throttled() || gpus[0].Throttled() {
		t.Errorf("reasons %v, throttled %v/%v", r, gpus[0].Throttled(), gpus[1].Throttled())
	}
}

// Each reading is the board as it is now: a GPU that starts throttling shows it in the
// next reading, with its own reason; one that goes away is no longer listed.
func TestEachReadingIsTheGPUsAsTheyAreNow(t *testing.T) {
	dir := board(t, "", "")
	l := open(t)
	gpus, err := l.Read()
	if err != nil || len(gpus) != 2 || gpus[1].SMClockMHz != 1980 || gpus[1].ClockEventReasons != 0 {
		t.Fatalf("first reading %+v, %v", gpus, err)
	}
	writeGPU(t, dir, 1, "sm_clock=1584\nclock_event_reasons=sw_power_cap\npower_mw=699000\n")
	gpus, err = l.Read()
	if err != nil || gpus[1].SMClockMHz != 1584 || !slices.Equal(gpus[1].Reasons(), []string{"sw_power_cap"}) || gpus[1].PowerWatts != 699 {
		t.Fatalf("after the power cap: %+v, %v", gpus[1], err)
	}
	// The quick reading, for each rank sample, says the same clocks and reasons.
	clocks, err := l.ReadClocks()
	want := []Clock{{Index: 0, Vendor: "NVIDIA", SMClockMHz: 1980, HasReasons: true}, {Index: 1, Vendor: "NVIDIA", SMClockMHz: 1584, ClockEventReasons: 0x4, HasReasons: true}}
	if err != nil || !slices.Equal(clocks, want) {
		t.Fatalf("clocks after the power cap %+v, %v; want %+v", clocks, err, want)
	}
	g := gpus[0]
	clocks[1].Refresh(&g)
	if g.SMClockMHz != 1584 || g.ClockEventReasons != 0x4 || g.UUID != gpus[0].UUID {
		t.Fatalf("refreshed %+v", g)
	}
	if err := os.Remove(filepath.Join(dir, "gpu1")); err != nil {
		t.Fatal(err)
	}
	if gpus, err = l.Read(); err != nil || len(gpus) != 1 {
		t.Fatalf("after GPU 1 went away: %d GPUs, %v", len(gpus), err)
	}
}

// A node with no NVIDIA library gets ErrNoLibrary, which says what to do, and the
// process runs on: the library's own error strings are never asked for.
func TestNoLibraryIsAClearErrorNotACrash(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	if !errors.Is(err, ErrNoLibrary) {
		t.Fatalf("Open without the library: %v, want ErrNoLibrary", err)
	}
	t.Log(err)
}

// A node whose driver sees no GPU reads none, without an error.
func TestNoGPUReadsNothing(t *testing.T) {
	board(t)
	gpus, err := open(t).Read()
	if err != nil || len(gpus) != 0 {
		t.Fatalf("read %+v, %v; want no GPU and no error", gpus, err)
	}
}

// An XID the driver raises on GPU 1 reaches the watcher with its GPU and code; XIDs
// raised before the watch began are not replayed.
func TestXIDReachesTheWatcher(t *testing.T) {
	dir := board(t, "", "")
	xids := filepath.Join(dir, "gpu1.xid")
	if err := os.WriteFile(xids, []byte("13\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan XID, 4)
	ready := make(chan int, 1)
	done := make(chan error, 1)
	go func() { done <- l.WatchXIDs(ctx, ready, func(x XID) { got <- x }) }()
	if n := <-ready; n != 2 {
		t.Fatalf("watching %d GPUs, want 2", n)
	}
	f, err := os.OpenFile(xids, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("79\n")
	f.Close()
	select {
	case x := <-got:
		if x != (XID{GPU: 1, UUID: "GPU-fa7a0000-0000-4000-8000-000000000001", Code: 79}) {
			t.Errorf("got %+v, want XID 79 on GPU 1", x)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no XID within 5 s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case x := <-got:
		t.Errorf("an XID more than was raised: %+v", x)
	default:
	}
}

// BenchmarkReadEightGPUs is one collection interval's reading of a node of eight GPUs
// through the real go-nvml and the fake libnvidia-ml.so.1: Fathom's own cost per
// reading (the cgo calls, about 20 per GPU, and turning their answers into GPUs). The
// fake answers each call from a small file; a real driver answers from the kernel, and
// its own time per call is the driver's (docs/devices.md).
func BenchmarkReadEightGPUs(b *testing.B) {
	dir := b.TempDir()
	for i := range 8 {
		state := "sm_clock=1980\nmem_clock=2619\npower_mw=512000\ntemperature=61\nutil_gpu=97\n"
		if err := os.WriteFile(filepath.Join(dir, "gpu"+strconv.Itoa(i)), []byte(state), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Setenv("FAKEGPU_BOARD", dir)
	l, err := Open(fakegpu.Build(b).NVML)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		gpus, err := l.Read()
		if err != nil || len(gpus) != 8 {
			b.Fatalf("read %d GPUs: %v", len(gpus), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8, "ns/GPU")
}
