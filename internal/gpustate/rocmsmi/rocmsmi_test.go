package rocmsmi

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/gpustate"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// board writes a board of GPUs (each string is one GPU's file) and points the fake
// libraries at it.
func board(t *testing.T, gpus ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i, g := range gpus {
		if err := os.WriteFile(filepath.Join(dir, "gpu"+strconv.Itoa(i)), []byte(g), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FAKEGPU_BOARD", dir)
	return dir
}

func addProcess(t *testing.T, dir string, gpu int, pid, bytes string) {
	t.Helper()
	procs := filepath.Join(dir, "gpu"+strconv.Itoa(gpu)+".procs")
	if err := os.MkdirAll(procs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(procs, pid), []byte(bytes), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T) *Library {
	t.Helper()
	l, err := Open(fakegpu.Build(t).ROCmSMI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Every field ROCm SMI has of two GPUs, read exactly through the fake library: one at
// rest, one held down to half clock with its link trained to Gen 4 x8 and its memory
// counting errors; and the processes on each, one of them on both.
func TestReadsEveryFieldROCmSMIHas(t *testing.T) {
	dir := board(t, "util_gpu=97\nutil_memory=41\nmemory_used=68719476736\n",
		`unique_id=0x5c1d2a338f1e4b6a
amd_name=AMD Instinct MI250X
bus_id=0000:c1:00.0
sm_clock=850
sm_clock_max=1700
mem_clock=1600
mem_clock_max=1600
power_mw=412345
power_limit_mw=560000
temperature_c=87
pcie_gen=4
pcie_width=8
pcie_replays=17
ecc_corrected=3
ecc_uncorrected=1
memory_total=137438953472
`)
	self, parent := uint32(os.Getpid()), uint32(os.Getppid())
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	addProcess(t, dir, 0, strconv.Itoa(int(self)), "1073741824")
	addProcess(t, dir, 1, strconv.Itoa(int(self)), "1024")
	addProcess(t, dir, 1, strconv.Itoa(int(parent)), "2048")
	addProcess(t, dir, 1, strconv.Itoa(exited.Process.Pid), "4096")
	l := open(t)
	if v, err := l.DriverVersion(); err != nil || v != "6.8.5-fakegpu" {
		t.Errorf("driver version %q, %v", v, err)
	}
	gpus, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	for i := range gpus {
		slices.SortFunc(gpus[i].Processes, func(a, b gpustate.Process) int { return int(a.PID) - int(b.PID) })
	}
	unsupported := []string{"clock_event_reasons", "remapped_rows"}
	// ROCm SMI gives a process's device memory for all its GPUs together.
	want := []gpustate.GPU{{
		Index: 0, UUID: "GPU-fa7a000000000000", BusID: "0000:18:00.0", Name: "AMD Instinct MI300X", Vendor: "AMD",
		SMClockMHz: 1980, SMClockMaxMHz: 1980, MemClockMHz: 2619, MemClockMaxMHz: 2619,
		PowerWatts: 350, PowerLimitWatts: 700, TemperatureC: 45,
		UtilizationPercent: 97, MemoryUtilizationPercent: 41, MemoryUsedBytes: 64 << 30, MemoryTotalBytes: 80 << 30,
		PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16,
		Processes:   []gpustate.Process{{PID: self, UsedMemoryBytes: 1<<30 + 1024}},
		Unsupported: unsupported,
	}, {
		Index: 1, UUID: "GPU-5c1d2a338f1e4b6a", BusID: "0000:c1:00.0", Name: "AMD Instinct MI250X", Vendor: "AMD",
		SMClockMHz: 850, SMClockMaxMHz: 1700, MemClockMHz: 1600, MemClockMaxMHz: 1600,
		PowerWatts: 412.345, PowerLimitWatts: 560, TemperatureC: 87,
		MemoryTotalBytes: 128 << 30,
		PCIeGen:          4, PCIeGenMax: 5, PCIeWidth: 8, PCIeWidthMax: 16, PCIeReplays: 17,
		ECCCorrected: 3, ECCUncorrected: 1,
		Processes:   []gpustate.Process{{PID: parent, UsedMemoryBytes: 2048}, {PID: self, UsedMemoryBytes: 1<<30 + 1024}},
		Unsupported: unsupported,
	}}
	if parent > self {
		want[1].Processes[0], want[1].Processes[1] = want[1].Processes[1], want[1].Processes[0]
	}
	if !reflect.DeepEqual(gpus, want) {
		t.Fatalf("read\n%+v\nwant\n%+v", gpus, want)
	}
	if gpus[1].Supports("clock_event_reasons") || gpus[1].Throttled() || len(gpus[1].Reasons()) != 0 {
		t.Errorf("ROCm SMI has no clock event reasons, yet %+v", gpus[1])
	}
}

// Each reading is the board as it is now: a GPU slowed shows it in the next reading,
// one removed is no longer listed.
func TestEachReadingIsTheBoardAsItIsNow(t *testing.T) {
	dir := board(t, "", "")
	l := open(t)
	gpus, err := l.Read()
	if err != nil || len(gpus) != 2 || gpus[1].SMClockMHz != 1980 {
		t.Fatalf("first reading %+v, %v", gpus, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpu1"), []byte("sm_clock=990\npower_mw=699000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if gpus, err = l.Read(); err != nil || gpus[1].SMClockMHz != 990 || gpus[1].SMClockMaxMHz != 1980 || gpus[1].PowerWatts != 699 {
		t.Fatalf("after the slowdown: %+v, %v", gpus[1], err)
	}
	// The quick reading says the same clocks, and no reason (ROCm SMI has none).
	clocks, err := l.ReadClocks()
	want := []gpustate.Clock{{Index: 0, Vendor: "AMD", SMClockMHz: 1980}, {Index: 1, Vendor: "AMD", SMClockMHz: 990}}
	if err != nil || !slices.Equal(clocks, want) {
		t.Fatalf("clocks after the slowdown %+v, %v; want %+v", clocks, err, want)
	}
	if err := os.Remove(filepath.Join(dir, "gpu1")); err != nil {
		t.Fatal(err)
	}
	if gpus, err = l.Read(); err != nil || len(gpus) != 1 {
		t.Fatalf("after GPU 1 went away: %d GPUs, %v", len(gpus), err)
	}
}

// A node without ROCm SMI gets ErrNoLibrary, naming the file tried.
func TestNoLibraryIsAClearErrorNotACrash(t *testing.T) {
	missing := filepath.Join(t.TempDir(), Soname)
	_, err := Open(missing)
	if !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Open without the library: %v, want ErrNoLibrary naming %s", err, missing)
	}
	t.Log(err)
}

// A library whose rsmi_init fails is an InitError with ROCm SMI's status by its name,
// the library's own text for it, and the fix; asked again, the same answer.
func TestInitFailureIsROCmSMIsOwnStatus(t *testing.T) {
	board(t)
	t.Setenv("FAKEGPU_ROCM_SMI_INIT", "8")
	path := fakegpu.Build(t).ROCmSMI
	for range 2 {
		_, err := Open(path)
		var initErr *InitError
		if !errors.As(err, &initErr) || !errors.Is(err, ErrInit) {
			t.Fatalf("Open: %v (%T), want RSMI_STATUS_INIT_ERROR", err, err)
		}
		for _, want := range []string{"RSMI_STATUS_INIT_ERROR from rsmi_init (" + path + ")", "FAKEGPU_ROCM_SMI_INIT", "modprobe amdgpu", "/dev/kfd", "rocm_smi.enabled: false"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	}
}

// amdROCmSMI is AMD's own librocm_smi64.so.1 (Debian 12's librocm-smi64-1, ROCm 5.2),
// installed by `make vendor-libs`. Absent, the test skips, or fails under
// FATHOM_REQUIRE_PRIVILEGED=1.
func amdROCmSMI(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{"/usr/lib", "/usr/lib/x86_64-linux-gnu"} {
		if p := filepath.Join(dir, Soname); fileExists(p) {
			return p
		}
	}
	why := "AMD's " + Soname + " is not installed (Debian's librocm-smi64-1; `make vendor-libs` installs it)"
	if os.Getenv(privtest.EnvRequire) == "1" {
		t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
	}
	t.Skip(why)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// On a node with AMD's ROCm SMI but no AMD GPU (this machine: no amdgpu driver, no
// /sys/class/drm), Open fails with ROCm SMI's own status, RSMI_STATUS_INIT_ERROR, and
// its text, names what the collector cannot see, and the process runs on: through the
// loader's search path and through rocm_smi.library_path, twice each. Each in a process
// of its own, which has loaded no fake under the same soname.
func TestAMDsROCmSMIWithoutAGPUIsItsOwnInitError(t *testing.T) {
	path := amdROCmSMI(t)
	for _, lib := range []string{"search", path} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenAMDROCmSMIChild$", "-test.v")
		cmd.Env = append(os.Environ(), "FATHOM_AMD_ROCM_SMI="+lib)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestOpenAMDROCmSMIChild") {
			t.Fatalf("child with %s: %v\n%s", lib, err, out)
		}
		t.Logf("%s", out)
	}
}

// TestOpenAMDROCmSMIChild is the child of the test above; it does nothing unless that
// test started it.
func TestOpenAMDROCmSMIChild(t *testing.T) {
	path := os.Getenv("FATHOM_AMD_ROCM_SMI")
	if path == "" {
		return
	}
	if path == "search" {
		path = ""
	}
	for range 2 {
		lib, err := Open(path)
		if err == nil {
			gpus, rerr := lib.Read()
			lib.Close()
			t.Fatalf("ROCm SMI started on a node without an AMD GPU: %d GPUs, %v", len(gpus), rerr)
		}
		var initErr *InitError
		if !errors.As(err, &initErr) || !errors.Is(err, ErrInit) {
			t.Fatalf("Open: %v (%T), want RSMI_STATUS_INIT_ERROR", err, err)
		}
		// 5.2's own text for status 8.
		for _, want := range []string{"RSMI_STATUS_INIT_ERROR", "An error occurred during initialization", "/sys/class/drm", "modprobe amdgpu"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
		if path != "" && !strings.Contains(initErr.Summary(), path) {
			t.Errorf("summary %q does not name %s", initErr.Summary(), path)
		}
		t.Logf("Open(%q): %v", path, err)
	}
}
