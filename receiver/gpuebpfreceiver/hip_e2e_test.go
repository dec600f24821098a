//go:build linux

package gpuebpfreceiver_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// amdHIPLibrary is AMD's HIP runtime as Debian installs it (libamdhip64-5, HIP 5.2;
// make test's vendor-libs step installs it): the versioned file its soname names, or
// the test stops, and under FATHOM_REQUIRE_PRIVILEGED=1 fails.
func amdHIPLibrary(t *testing.T) string {
	t.Helper()
	path, err := filepath.EvalSymlinks("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")
	if err != nil {
		why := "AMD's HIP runtime is not installed (apt-get install libamdhip64-5, or make vendor-libs): " + err.Error()
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
		}
		t.Skip(why)
	}
	return path
}

// A process calls every HIP function Fathom probes in AMD's own libamdhip64.so.5 (its
// symbols are versioned, hipLaunchKernel@@hip_4.2), a different known number of times
// each. With no AMD GPU each call runs AMD's code and returns an error (hipErrorNoDevice,
// 100, then 101, hipErrorInvalidDevice). The node collector attaches to every probed
// function and exports each one's calls, errors and durations exactly, with its copy
// direction, and names the process's vendor amd.
func TestAMDHIPRuntimeIsCountedExactly(t *testing.T) {
	privtest.Require(t)
	lib := amdHIPLibrary(t)
	amd := amdAPIs()
	plan := map[string]int64{}
	for i, api := range amd {
		plan[api.Symbol] = int64(100 + i)
	}
	for api, n := range map[string]int64{"hipLaunchKernel": 2000, "hipModuleLaunchKernel": 700, "hipMemcpyAsync": 500, "hipStreamSynchronize": 400} {
		plan[api] = n
	}
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none", true))
	report := runVendorProcess(t, vendorProcess{args: []string{"--hip", "libamdhip64.so.5"}}, plan, func(int) {
		line := waitProbing(t, col, lib)
		var attached struct {
			Functions int      `json:"functions"`
			Missing   []string `json:"missing"`
		}
		if i := strings.Index(line, "{"); i < 0 || json.Unmarshal([]byte(line[i:]), &attached) != nil {
			t.Fatalf("cannot read the probing line %q", line)
		}
		if attached.Functions != len(amd) || len(attached.Missing) != 0 {
			t.Errorf("%s: %d functions probed, missing %v; want all %d", lib, attached.Functions, attached.Missing, len(amd))
		}
	})
	t.Logf("hipGetDeviceCount returned %d; the last calls returned %d (hipLaunchKernel), %d (hipMalloc)",
		report.CuInit, report.APIs["hipLaunchKernel"].Ret, report.APIs["hipMalloc"].Ret)
	direction := map[string]string{"hipMemcpy": "host_to_device", "hipMemcpyAsync": "host_to_device",
		"hipMemcpyHtoD": "host_to_device", "hipMemcpyDtoH": "device_to_host"}
	key := func(api probes.API) string {
		k := attrs(semconv.CUDAAPIName, api.Symbol, semconv.CUDALibrary, string(api.Library))
		if dir, ok := direction[api.Symbol]; ok {
			k.PutStr(semconv.CUDAMemcpyDir, dir)
		}
		return seriesKey(semconv.MetricCUDAAPICalls, k)
	}
	v := waitFor(t, sink, report.Pid, "every planned call", func(v processView) bool {
		for _, api := range amd {
			if v.series[key(api)].value != plan[api.Symbol] {
				return false
			}
		}
		return true
	})
	var total int64
	for _, api := range amd {
		name, want := api.Symbol, plan[api.Symbol]
		made := report.APIs[name]
		total += made.Calls
		if made.Calls != want || made.Errors != want {
			t.Errorf("%s: the workload made %d calls, %d failed; planned %d, all failing without a GPU", name, made.Calls, made.Errors, want)
		}
		if got := v.value(t, key(api)); got != want {
			t.Errorf("%s: %d calls exported, want %d", name, got, want)
		}
		if got := v.series[seriesKey(semconv.MetricCUDAAPIErrors, attrs(semconv.CUDAAPIName, name))].value; got != made.Errors {
			t.Errorf("%s: %d errors exported, the workload had %d (last return %d)", name, got, made.Errors, made.Ret)
		}
		hist := v.series[seriesKey(semconv.MetricCUDAAPIDuration, attrs(semconv.CUDAAPIName, name, semconv.CUDALibrary, string(api.Library)))]
		if hist.count != uint64(want) {
			t.Errorf("%s: duration histogram counts %d calls, want %d", name, hist.count, want)
		}
	}
	if vendor, _ := v.resource.Get(semconv.GPUVendor); vendor.Str() != "amd" {
		t.Errorf("resource %s = %q, want amd", semconv.GPUVendor, vendor.Str())
	}
	t.Logf("%d calls into %d functions of %s, each counted exactly", total, len(amd), lib)
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// A DDP job written for AMD GPUs: four ranks of a HIP program (fakegpu-ddp-hip) over
// the fake libamdhip64.so.5, whose streams are asynchronous like the fake CUDA
// runtime's, and RCCL (the fake NCCL built as librccl.so.1, which exports NCCL's API
// as AMD's does). The collector finds both by name, counts every HIP launch, sync and
// allocation and every RCCL all-reduce exactly, names one communicator on every rank,
// and says the processes are AMD's.
func TestAHIPJobOverRCCLIsCountedExactly(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const ranks, steps, bucket = 4, 100, 32 << 10
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: steps, BucketBytes: bucket, KernelTime: 10 * time.Microsecond, Gate: true, HIP: true,
	})
	sink, col := startNodeCollector(t, ncclE2EConfig, "SYSFS="+t.TempDir())
	for _, lib := range []string{paths.HIP, paths.RCCL} {
		waitProbing(t, col, lib)
	}
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	reports, err := run.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := hex.DecodeString(reports[0].UniqueID)
	h := fnv.New64a()
	h.Write(raw)
	comm := fmt.Sprintf("%016x", h.Sum64())
	for _, r := range reports {
		allReduces := seriesKey(semconv.MetricNCCLCalls, attrs(semconv.NCCLCommID, comm, semconv.NCCLOp, "all_reduce",
			semconv.NCCLRank, strconv.Itoa(r.Rank), semconv.NCCLNRanks, strconv.Itoa(ranks)))
		// fakegpu-ddp-hip's report names its calls as the program was written, in
		// CUDA's names; fake_hip.h made each the HIP function of the same name.
		want := map[string]int64{}
		for _, name := range []string{"cudaLaunchKernel", "cudaStreamSynchronize", "cudaMalloc", "cudaFree", "cudaMemcpy", "cudaSetDevice"} {
			if r.Calls[name] == 0 {
				t.Fatalf("rank %d made no %s", r.Rank, name)
			}
			want[fakegpu.HIPName(name)] = r.Calls[name]
		}
		v := waitFor(t, sink, r.Pid, "every HIP call and all-reduce", func(v processView) bool {
			for api, n := range want {
				if apiCalls(v, api) != n {
					return false
				}
			}
			return v.series[allReduces].value == int64(r.Calls["ncclAllReduce"])
		})
		if r.Calls["ncclAllReduce"] != steps {
			t.Errorf("rank %d made %d all-reduces, want %d", r.Rank, r.Calls["ncclAllReduce"], steps)
		}
		if got := v.value(t, seriesKey(semconv.MetricCUDAAPICalls, attrs(semconv.CUDAAPIName, "hipLaunchKernel", semconv.CUDALibrary, string(probes.LibHIP)))); got != want["hipLaunchKernel"] {
			t.Errorf("rank %d: %d hipLaunchKernel calls exported under %s, want %d", r.Rank, got, probes.LibHIP, want["hipLaunchKernel"])
		}
		if vendor, _ := v.resource.Get(semconv.GPUVendor); vendor.Str() != "amd" {
			t.Errorf("rank %d: resource %s = %q, want amd", r.Rank, semconv.GPUVendor, vendor.Str())
		}
		if cohort, _ := v.resource.Get(semconv.Cohort); cohort.Str() != "nccl:"+comm {
			t.Errorf("rank %d: resource %s = %q, want the communicator nccl:%s", r.Rank, semconv.Cohort, cohort.Str(), comm)
		}
		for _, name := range semconv.LaunchAPIs {
			if !strings.HasPrefix(name, "hip") && apiCalls(v, name) != 0 {
				t.Errorf("rank %d: %d %s calls from a HIP program", r.Rank, apiCalls(v, name), name)
			}
		}
	}
	t.Logf("%d ranks: every HIP call and every RCCL all-reduce of communicator %s counted exactly", ranks, comm)
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
