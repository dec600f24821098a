//go:build linux

package gpuebpfreceiver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// vendorLibs are NVIDIA's own libraries, as `make vendor-libs` (.ci/vendor-libs) puts
// them in build/vendor/nvidia/lib: the CUDA 11.8 runtime and the 535 driver's libcuda
// and libnvidia-ml, from Debian's non-free archive.
type vendorLibs struct {
	dir string
	// cudart and cuda are the versioned files the sonames point to: what a process
	// maps, and what the collector says it probes.
	cudart, cuda, nvml string
	versions           string
}

// requireVendorLibs finds NVIDIA's libraries, or stops the test: under
// FATHOM_REQUIRE_PRIVILEGED=1 (CI, where make test fetched them first) their absence
// is a failure.
func requireVendorLibs(t *testing.T) vendorLibs {
	t.Helper()
	dir := filepath.Join(fakegpu.RepoRoot(), "build", "vendor", "nvidia", "lib")
	v := vendorLibs{dir: dir}
	var missing []string
	for _, link := range []struct {
		soname string
		into   *string
	}{{"libcudart.so.11.0", &v.cudart}, {"libcuda.so.1", &v.cuda}, {"libnvidia-ml.so.1", &v.nvml}} {
		path, err := filepath.EvalSymlinks(filepath.Join(dir, link.soname))
		if err != nil {
			missing = append(missing, link.soname)
			continue
		}
		*link.into = path
	}
	versions, err := os.ReadFile(filepath.Join(dir, "..", "VERSIONS"))
	if len(missing) > 0 || err != nil {
		why := "NVIDIA's libraries are not in " + dir + " (missing " + strings.Join(missing, ", ") + "); `make vendor-libs` fetches them"
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
		}
		t.Skip(why)
	}
	v.versions = strings.Join(strings.Fields(string(versions)), " ")
	return v
}

// nvidiaAPIs are the probed functions of NVIDIA's libraries, and amdAPIs those of AMD's.
func nvidiaAPIs() []probes.API { return apisOf("nvidia") }
func amdAPIs() []probes.API    { return apisOf("amd") }

func apisOf(vendor string) []probes.API {
	var out []probes.API
	for _, api := range probes.APIs {
		if api.Library.Vendor() == vendor {
			out = append(out, api)
		}
	}
	return out
}

// apiCalls is the process's calls of one API, over every copy direction.
func apiCalls(v processView, api string) int64 {
	var n int64
	for key, p := range v.series {
		if strings.HasPrefix(key, semconv.MetricCUDAAPICalls+"{") && strings.Contains(key, semconv.CUDAAPIName+"="+api+",") {
			n += p.value
		}
	}
	return n
}

// vendorReport is fakegpu-vendor's report (internal/fakegpu/c/vendor.c).
type vendorReport struct {
	Pid, Tid int
	CuInit   int `json:"cuInit"`
	APIs     map[string]struct {
		Calls, Errors int64
		Ret           int
	} `json:"apis"`
}

// runVendorWorkload starts fakegpu-vendor on NVIDIA's libraries with plan (as
// runVendorProcess does), calls atGate with its pid at its gate, and returns its report.
func runVendorWorkload(t *testing.T, libs vendorLibs, plan map[string]int64, atGate func(pid int)) vendorReport {
	t.Helper()
	return runVendorProcess(t, vendorProcess{env: []string{"LD_LIBRARY_PATH=" + libs.dir}}, plan, atGate)
}

// copyDirection is the cuda.memcpy.direction each probed copy's calls carry: the
// runtime's from the kind the workload passes (host to device), the driver's from the
// function's name, none for cuMemcpy/cuMemcpyAsync (unified addressing).
var copyDirection = map[string]string{
	"cudaMemcpy": "host_to_device", "cudaMemcpyAsync": "host_to_device",
	"cuMemcpy": "default", "cuMemcpyAsync": "default",
	"cuMemcpyHtoD_v2": "host_to_device", "cuMemcpyHtoDAsync_v2": "host_to_device",
	"cuMemcpyDtoH_v2": "device_to_host", "cuMemcpyDtoHAsync_v2": "device_to_host",
	"cuMemcpyDtoD_v2": "device_to_device", "cuMemcpyDtoDAsync_v2": "device_to_device",
}

// A process calls every function Fathom probes, in NVIDIA's own libcudart.so.11.8.89 and
// libcuda.so.535.x (the runtime's symbols are versioned, @@libcudart.so.11.0; the
// driver's include cuLaunchKernel_ptsz and the _v2 copies), a different known number of
// times each. With no GPU each call runs NVIDIA's code and returns an error (no device,
// driver not initialised, invalid handle). The node collector attaches to every probed
// function in both files, and exports each function's calls, errors and durations
// exactly: the counts, the error returns, and the copy directions.
//
// The same collector reads GPU state through NVIDIA's libnvidia-ml.so.1 (nvml.library_path),
// which without the kernel driver answers NVML_ERROR_DRIVER_NOT_LOADED: the collector
// logs NVML's error with the fix, puts it in its node check, and traces on.
func TestNVIDIALibrariesAreCountedExactly(t *testing.T) {
	privtest.Require(t)
	libs := requireVendorLibs(t)
	t.Logf("NVIDIA's libraries: %s (%s)", libs.versions, libs.dir)

	// A different count for each function, so that calls counted under another
	// function's name cannot add up right; the busiest ones as a training step has them.
	plan := map[string]int64{}
	nvidia := nvidiaAPIs()
	for i, api := range nvidia {
		plan[api.Symbol] = int64(100 + i)
	}
	for api, n := range map[string]int64{"cudaLaunchKernel": 2000, "cudaMemcpyAsync": 500, "cudaStreamSynchronize": 400,
		"cudaMalloc": 200, "cudaFree": 210, "cuLaunchKernel": 1000} {
		plan[api] = n
	}
	perLibrary := map[probes.Library]int{}
	for _, api := range nvidia {
		perLibrary[api.Library]++
	}

	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\nnvml:\n  library_path: "+libs.nvml, true))
	report := runVendorWorkload(t, libs, plan, func(int) {
		for path, lib := range map[string]probes.Library{libs.cudart: probes.LibCUDART, libs.cuda: probes.LibCUDA} {
			line := waitProbing(t, col, path)
			var attached struct {
				Functions int      `json:"functions"`
				Missing   []string `json:"missing"`
			}
			if i := strings.Index(line, "{"); i < 0 || json.Unmarshal([]byte(line[i:]), &attached) != nil {
				t.Fatalf("cannot read the probing line %q", line)
			}
			if attached.Functions != perLibrary[lib] || len(attached.Missing) != 0 {
				t.Errorf("%s: %d functions probed, missing %v; want all %d", path, attached.Functions, attached.Missing, perLibrary[lib])
			}
		}
	})
	t.Logf("cuInit returned %d; the last calls returned %d (cudaLaunchKernel), %d (cuLaunchKernel), %d (cuMemAlloc_v2)",
		report.CuInit, report.APIs["cudaLaunchKernel"].Ret, report.APIs["cuLaunchKernel"].Ret, report.APIs["cuMemAlloc_v2"].Ret)

	v := waitFor(t, sink, report.Pid, "every planned call", func(v processView) bool {
		for api, n := range plan {
			if apiCalls(v, api) != n {
				return false
			}
		}
		return true
	})
	var total int64
	for _, api := range nvidia {
		name, want := api.Symbol, plan[api.Symbol]
		made := report.APIs[name]
		total += made.Calls
		if made.Calls != want {
			t.Errorf("%s: the workload made %d calls, planned %d", name, made.Calls, want)
		}
		key := attrs(semconv.CUDAAPIName, name, semconv.CUDALibrary, string(api.Library))
		if dir, ok := copyDirection[name]; ok {
			key.PutStr(semconv.CUDAMemcpyDir, dir)
		}
		if got := v.value(t, seriesKey(semconv.MetricCUDAAPICalls, key)); got != want {
			t.Errorf("%s: %d calls exported, want %d", name, got, want)
		}
		errorsKey := seriesKey(semconv.MetricCUDAAPIErrors, attrs(semconv.CUDAAPIName, name))
		if got := v.series[errorsKey].value; got != made.Errors {
			t.Errorf("%s: %d errors exported, the workload had %d (last return %d)", name, got, made.Errors, made.Ret)
		}
		hist := v.series[seriesKey(semconv.MetricCUDAAPIDuration, attrs(semconv.CUDAAPIName, name, semconv.CUDALibrary, string(api.Library)))]
		if hist.count != uint64(want) {
			t.Errorf("%s: duration histogram counts %d calls, want %d", name, hist.count, want)
		}
	}
	t.Logf("%d calls into %d functions, each counted exactly", total, len(nvidia))
	t.Run("NVML without the driver: its own error and the fix, and tracing goes on", func(t *testing.T) {
		var logged string
		for _, line := range strings.Split(col.Output(), "\n") {
			if strings.Contains(line, "no GPU state from NVML on this node") {
				logged = line
			}
		}
		for _, want := range []string{"NVML_ERROR_DRIVER_NOT_LOADED", libs.nvml, "the NVIDIA kernel driver is not loaded", "modprobe nvidia"} {
			if !strings.Contains(logged, want) {
				t.Errorf("the collector's NVML line lacks %q: %q", want, logged)
			}
		}
		var nvml map[string]any
		for deadline := time.Now().Add(10 * time.Second); nvml == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			records, _ := nodeCheckRecords(sink.Logs())
			for _, lr := range records {
				for _, c := range lr.Body().Map().AsRaw()["checks"].([]any) {
					if c := c.(map[string]any); c["name"] == "nvml" {
						nvml = c
					}
				}
			}
		}
		if nvml == nil {
			t.Fatal("no nvml check in the collector's node check record")
		}
		if detail, _ := nvml["detail"].(string); nvml["ok"] != false || nvml["advisory"] != true || !strings.Contains(detail, "NVML_ERROR_DRIVER_NOT_LOADED") {
			t.Errorf("nvml check %v, want a failed advisory check naming NVML_ERROR_DRIVER_NOT_LOADED", nvml)
		}
		// The fix is the driver's, not the generic "mount the library" one.
		if fix, _ := nvml["fix"].(string); !strings.Contains(fix, "modprobe nvidia") {
			t.Errorf("nvml check's fix %q, want the one for a driver that is not loaded", fix)
		}
		t.Logf("logged: %s", logged[strings.Index(logged, "no GPU state"):])
		if strings.Contains(col.Output(), "panic") {
			t.Errorf("the collector panicked:\n%s", col.Output())
		}
	})

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
