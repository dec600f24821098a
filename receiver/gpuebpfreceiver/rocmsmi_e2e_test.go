//go:build linux

package gpuebpfreceiver_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// A HIP job on AMD GPUs read through ROCm SMI: the real collector, under BPF, with NVML
// off and rocm_smi.library_path on the fake librocm_smi64.so.1, two fakegpu-ddp-hip
// ranks on a board whose GPU 1 runs at half clock (so rank 1's kernels take twice as
// long on the fake HIP device). The node carries both GPUs' series from ROCm SMI's
// readings with hw.vendor AMD and no clock event reasons (ROCm SMI has none); each
// rank carries its own GPU's SM clock deficit with the detail that names the GPU and
// its clock, exactly as an NVIDIA rank does, and not the other's.
func TestAHIPJobsGPUsAreReadThroughROCmSMIAndBoundToItsRanks(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	board := t.TempDir()
	for name, content := range map[string]string{"gpu0": "util_gpu=12\n", "gpu1": "sm_clock=990\npower_mw=512500\ntemperature_c=91\n"} {
		if err := os.WriteFile(filepath.Join(board, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\nnvml:\n  enabled: false\nrocm_smi:\n  library_path: "+paths.ROCmSMI, false),
		"FAKEGPU_BOARD="+board)
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: 2, Steps: 300, KernelTime: 2 * time.Millisecond, Gate: true, HIP: true, Env: []string{"FAKEGPU_BOARD=" + board, "FAKEGPU_DEVICES=2"},
	})
	waitProbing(t, col, paths.HIP)
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = run.Wait(2 * time.Minute) }()

	uuid := []string{"GPU-fa7a000000000000", "GPU-fa7a000000000001"}
	deficit := func(gpu int) string {
		return seriesKey(semconv.MetricRankGPUClockDeficit, attrs(semconv.HWID, uuid[gpu], semconv.GPUIndex, []string{"0", "1"}[gpu]))
	}
	for rank, rp := range run.Ranks {
		pid := rp.Pid
		var p gaugePoint
		deadline := time.Now().Add(20 * time.Second)
		for ok := false; !ok; p, ok = gauges(sink, pid)[deficit(rank)] {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d (pid %d) never carried %s; its gauges: %v", rank, pid, deficit(rank), gauges(sink, pid))
			}
			time.Sleep(100 * time.Millisecond)
		}
		want, detail := 0.0, "GPU 0 (GPU-fa7a000000000000) SM clock 1,980 of 1,980 MHz"
		if rank == 1 {
			want, detail = 0.5, "GPU 1 (GPU-fa7a000000000001) SM clock 990 of 1,980 MHz"
		}
		if math.Abs(p.value-want) > 1e-12 {
			t.Errorf("rank %d's SM clock deficit %v, want %v", rank, p.value, want)
		}
		if d, _ := p.attrs.Get(semconv.SignalDetail); d.Str() != detail {
			t.Errorf("rank %d's detail %q, want %q", rank, d.Str(), detail)
		}
		if _, other := gauges(sink, pid)[deficit(1-rank)]; other {
			t.Errorf("rank %d carries the other GPU's deficit", rank)
		}
	}

	node := gauges(sink, 0)
	gpu := func(name string, index int, kv ...string) string {
		return seriesKey(name, attrs(append([]string{semconv.HWID, uuid[index], semconv.GPUIndex, []string{"0", "1"}[index]}, kv...)...))
	}
	for key, want := range map[string]float64{
		gpu(semconv.MetricGPUClock, 0, semconv.GPUClockDomain, "sm"):    1980,
		gpu(semconv.MetricGPUClock, 1, semconv.GPUClockDomain, "sm"):    990,
		gpu(semconv.MetricGPUClockMax, 1, semconv.GPUClockDomain, "sm"): 1980,
		gpu(semconv.MetricGPUPower, 1):                                  512.5,
		gpu(semconv.MetricGPUTemperature, 1):                            91,
		gpu(semconv.MetricGPUPCIeGen, 1):                                5,
	} {
		if p, ok := node[key]; !ok || p.value != want {
			t.Errorf("node %s = %v (%v), want %v", key, p.value, ok, want)
		}
	}
	// Utilization carries the GPU's name, vendor and PCI address too.
	for i, want := range []float64{0.12, 0} {
		p, ok := node[gpu(semconv.MetricGPUUtilization, i, semconv.GPUBusID, []string{"0000:18:00.0", "0000:28:00.0"}[i], semconv.HWName, "AMD Instinct MI300X", semconv.HWVendor, "AMD")]
		if !ok || p.value != want {
			t.Errorf("GPU %d's utilization %v (%v), want %v with hw.vendor AMD; node: %v", i, p.value, ok, want, node)
		}
	}
	for key := range node {
		if len(key) >= len(semconv.MetricGPUClockEvent) && key[:len(semconv.MetricGPUClockEvent)] == semconv.MetricGPUClockEvent {
			t.Errorf("a clock event series from ROCm SMI, which has no reasons: %s", key)
		}
	}
}

// The real collector with rocm_smi.library_path on AMD's own librocm_smi64.so.1 (ROCm
// 5.2, Debian's librocm-smi64-1) on this machine, which has no AMD GPU: it logs ROCm
// SMI's RSMI_STATUS_INIT_ERROR with the fix once, its fathom.node.check record carries
// it as a failed advisory rocm_smi check (what node_readiness reads), and it traces a
// HIP job on: every hipLaunchKernel counted.
func TestAMDsROCmSMIWithoutAGPUIsInTheNodeCheckRecord(t *testing.T) {
	privtest.Require(t)
	lib := "/usr/lib/librocm_smi64.so.1"
	if _, err := os.Stat(lib); err != nil {
		why := "AMD's librocm_smi64.so.1 is not installed (Debian's librocm-smi64-1; `make vendor-libs` installs it)"
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
		}
		t.Skip(why)
	}
	paths := fakegpu.Build(t)
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\nnvml:\n  enabled: false\nrocm_smi:\n  library_path: "+lib, true))
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{Ranks: 1, Steps: 50, KernelTime: 100 * time.Microsecond, Gate: true, HIP: true})
	waitProbing(t, col, paths.HIP)
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	reports, err := run.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	launches := seriesKey(semconv.MetricCUDAAPICalls, attrs(semconv.CUDAAPIName, "hipLaunchKernel", semconv.CUDALibrary, "libamdhip64"))
	waitFor(t, sink, reports[0].Pid, "every hipLaunchKernel", func(v processView) bool {
		return v.series[launches].value == reports[0].Calls["cudaLaunchKernel"]
	})

	var logged string
	for _, line := range strings.Split(col.Output(), "\n") {
		if strings.Contains(line, "no AMD GPU state from ROCm SMI on this node") {
			logged = line
		}
	}
	for _, want := range []string{"RSMI_STATUS_INIT_ERROR", lib, "An error occurred during initialization", "modprobe amdgpu"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the collector's ROCm SMI line lacks %q: %q", want, logged)
		}
	}
	var check map[string]any
	for deadline := time.Now().Add(10 * time.Second); check == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		records, _ := nodeCheckRecords(sink.Logs())
		for _, lr := range records {
			for _, c := range lr.Body().Map().AsRaw()["checks"].([]any) {
				if c := c.(map[string]any); c["name"] == "rocm_smi" {
					check = c
				}
			}
		}
	}
	if check == nil {
		t.Fatal("no rocm_smi check in the collector's node check record")
	}
	detail, _ := check["detail"].(string)
	fix, _ := check["fix"].(string)
	if check["ok"] != false || check["advisory"] != true || !strings.Contains(detail, "RSMI_STATUS_INIT_ERROR") || !strings.Contains(fix, "/dev/kfd") {
		t.Errorf("rocm_smi check %v, want a failed advisory check naming RSMI_STATUS_INIT_ERROR with the driver's fix", check)
	}
	if strings.Contains(col.Output(), "panic") {
		t.Errorf("the collector panicked:\n%s", col.Output())
	}
	t.Logf("record's check: %s", detail)
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
