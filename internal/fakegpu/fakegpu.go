// Package fakegpu builds and drives the fake GPU stack: C shared libraries named like
// CUDA's, NCCL's and ibverbs' (libcudart.so.12, libcuda.so.1, ...) that export the real
// symbols with the real x86-64 argument layouts, so Fathom's uprobes attach to them exactly
// as they attach to NVIDIA's libraries on a GPU host, plus workloads that call them and
// report exactly what they did.
//
// The C sources are in c/, built by the Makefile beside this file into <repo>/build/fakegpu.
package fakegpu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Paths locates a built fake GPU stack.
type Paths struct {
	// Out is the build output root (<repo>/build/fakegpu).
	Out string
	// LibDir holds the libraries; put it on LD_LIBRARY_PATH for programs built elsewhere.
	LibDir string
	// Cudart, Cuda, NCCL and IBVerbs are the versioned library files (what a uprobe
	// attaches to, and what a real program's loader maps).
	Cudart, Cuda, NCCL, IBVerbs string
	// NVML is libnvidia-ml.so.1, which answers from a board directory (FAKEGPU_BOARD;
	// see c/nvml.c and Board).
	NVML string
	// Workload is fakegpu-workload; DDP is fakegpu-ddp; Hog is fakegpu-hog (StartHog).
	Workload, DDP, Hog string
	// LockWait is fakegpu-lockwait: a dispatcher that waits on a lock its own tokenizer
	// threads hold, then sleeps (c/lockwait.c).
	LockWait string
	// WorkloadStatic is fakegpu-workload with the fake CUDA runtime linked into the
	// executable, its functions in .symtab only, as nvcc links libcudart_static.a by
	// default; it loads only libcuda.so.1.
	WorkloadStatic string
	// HIP is libamdhip64.so.5, the fake CUDA runtime under HIP's names (c/hip.c); RCCL is
	// librccl.so.1, the fake NCCL built under RCCL's name over it; DDPHIP is fakegpu-ddp
	// built as a HIP program over both (DDPOptions.HIP).
	HIP, RCCL, DDPHIP string
	// WorkloadHIP is fakegpu-workload built as a HIP program (Options.HIP).
	WorkloadHIP string
	// ROCmSMI is librocm_smi64.so.1, ROCm SMI answering from the same board as NVML
	// (c/rocm_smi.c).
	ROCmSMI string
}

var (
	buildOnce  sync.Once
	buildPaths Paths
	buildErr   error
)

// RepoRoot returns the module root, found from this source file's location.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("fakegpu: cannot locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// MarkedLines returns the line of each "# LINE name" comment of a script: the lines a
// test expects a stack to name.
func MarkedLines(t testing.TB, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		if _, name, ok := strings.Cut(line, "# LINE "); ok {
			lines[strings.TrimSpace(name)] = i + 1
		}
	}
	return lines
}

// Build compiles the fake GPU stack once per test process and returns where it is. make
// is incremental, and an flock serializes the test binaries of `go test ./...`, which
// run in parallel and share the output directory.
func Build(t testing.TB) Paths {
	t.Helper()
	buildOnce.Do(func() {
		noteSources()
		buildPaths, buildErr = build()
	})
	if buildErr != nil {
		t.Fatalf("building the fake GPU stack: %v", buildErr)
	}
	return buildPaths
}

// noteSources stats every C source and the Makefile. go test records the files a test
// touches through package os and reruns a cached test when one changes; make runs in a
// subprocess, which it cannot see.
func noteSources() {
	dir := filepath.Join(RepoRoot(), "internal", "fakegpu")
	_, _ = os.Stat(filepath.Join(dir, "Makefile"))
	entries, _ := os.ReadDir(filepath.Join(dir, "c"))
	for _, e := range entries {
		_, _ = os.Stat(filepath.Join(dir, "c", e.Name()))
	}
}

func build() (Paths, error) {
	root := RepoRoot()
	out := filepath.Join(root, "build", "fakegpu")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Paths{}, err
	}
	lock, err := os.OpenFile(filepath.Join(out, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Paths{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Paths{}, fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	cmd := exec.Command("make", "-s", "-C", filepath.Join(root, "internal", "fakegpu"), "OUT="+out)
	if output, err := cmd.CombinedOutput(); err != nil {
		return Paths{}, fmt.Errorf("%s: %w\n%s", cmd, err, output)
	}
	return PathsIn(out), nil
}

// PathsIn is where a build of the fake GPU stack in out (make -C internal/fakegpu
// OUT=out) put each file.
func PathsIn(out string) Paths {
	lib := filepath.Join(out, "lib")
	return Paths{
		Out:      out,
		LibDir:   lib,
		Cudart:   filepath.Join(lib, "libcudart.so.12"),
		Cuda:     filepath.Join(lib, "libcuda.so.1"),
		NCCL:     filepath.Join(lib, "libnccl.so.2"),
		IBVerbs:  filepath.Join(lib, "libibverbs.so.1"),
		NVML:     filepath.Join(lib, "libnvidia-ml.so.1"),
		Workload: filepath.Join(out, "bin", "fakegpu-workload"),
		DDP:      filepath.Join(out, "bin", "fakegpu-ddp"),
		Hog:      filepath.Join(out, "bin", "fakegpu-hog"),
		LockWait: filepath.Join(out, "bin", "fakegpu-lockwait"),

		WorkloadStatic: filepath.Join(out, "bin", "fakegpu-workload-static"),
		HIP:            filepath.Join(lib, "libamdhip64.so.5"),
		RCCL:           filepath.Join(lib, "librccl.so.1"),
		DDPHIP:         filepath.Join(out, "bin", "fakegpu-ddp-hip"),
		WorkloadHIP:    filepath.Join(out, "bin", "fakegpu-workload-hip"),
		ROCmSMI:        filepath.Join(lib, "librocm_smi64.so.1"),
	}
}

// RuntimeAPIs are the CUDA runtime entry points libcudart.so.12 exports.
var RuntimeAPIs = []string{
	"cudaGetDeviceCount", "cudaSetDevice", "cudaGetDevice", "cudaDeviceGetAttribute",
	"cudaGetLastError", "cudaGetErrorString",
	"cudaLaunchKernel", "cudaLaunchKernelExC",
	"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaMemcpy", "cudaMemcpyAsync",
	"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamDestroy", "cudaStreamSynchronize",
	"cudaStreamWaitEvent", "cudaDeviceSynchronize",
	"cudaEventCreate", "cudaEventRecord", "cudaEventSynchronize", "cudaEventQuery", "cudaEventDestroy",
	"cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate", "cudaGraphLaunch",
	"cudaGraphDestroy", "cudaGraphExecDestroy",
}

// HIPAPIs are what the fake libamdhip64.so.5 exports: the runtime API under HIP's
// names (c/fake_hip.h renames each cuda* to hip*), and HIP's module and extended
// launches and directional copies.
var HIPAPIs = func() []string {
	out := []string{"hipModuleLaunchKernel", "hipExtLaunchKernel", "hipMemcpyHtoD", "hipMemcpyDtoH"}
	for _, name := range RuntimeAPIs {
		out = append(out, HIPName(name))
	}
	return out
}()

// HIPName is the HIP function a CUDA runtime function is in the HIP build of a fake
// (cudaLaunchKernel: hipLaunchKernel); other names are unchanged. fakegpu-ddp-hip's
// JSON says the CUDA names it was written with.
func HIPName(cudaName string) string {
	if rest, ok := strings.CutPrefix(cudaName, "cuda"); ok {
		return "hip" + rest
	}
	return cudaName
}

// HookSymbols are what libcudart.so.12 exports besides the runtime API: the hooks the
// fake libnccl.so.2 uses to put collectives on streams (c/fake_hooks.h). No NVIDIA
// library exports a fakegpu_ name, and no probe attaches to them.
var HookSymbols = []string{"fakegpu_collective_complete", "fakegpu_set_resolver", "fakegpu_stream_collective"}

// DriverAPIs are the CUDA driver entry points libcuda.so.1 exports.
var DriverAPIs = []string{
	"cuInit", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpy", "cuMemcpyAsync",
	"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
	"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2",
	"cuCtxSynchronize", "cuStreamSynchronize", "cuGraphLaunch",
}

// NCCLAPIs are the NCCL entry points libnccl.so.2 exports.
var NCCLAPIs = []string{
	"ncclGetVersion", "ncclGetErrorString", "ncclGetUniqueId",
	"ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitAll", "ncclCommSplit",
	"ncclCommDestroy", "ncclCommAbort", "ncclCommCount", "ncclCommUserRank", "ncclCommCuDevice",
	"ncclCommGetAsyncError",
	"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclBcast", "ncclReduce",
	"ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
}

// IBVerbsAPIs are the verbs entry points libibverbs.so.1 exports.
var IBVerbsAPIs = []string{
	"ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name",
	"ibv_open_device", "ibv_close_device", "ibv_get_async_event", "ibv_ack_async_event",
	"ibv_alloc_pd", "ibv_dealloc_pd", "ibv_create_qp", "ibv_destroy_qp",
}

// ROCmSMIAPIs are the ROCm SMI entry points librocm_smi64.so.1 exports: what
// internal/gpustate/rocmsmi calls.
var ROCmSMIAPIs = []string{
	"rsmi_init", "rsmi_shut_down", "rsmi_status_string", "rsmi_num_monitor_devices", "rsmi_version_str_get",
	"rsmi_dev_name_get", "rsmi_dev_unique_id_get", "rsmi_dev_pci_id_get", "rsmi_dev_gpu_clk_freq_get",
	"rsmi_dev_power_ave_get", "rsmi_dev_power_cap_get", "rsmi_dev_temp_metric_get",
	"rsmi_dev_busy_percent_get", "rsmi_dev_memory_busy_percent_get", "rsmi_dev_memory_usage_get",
	"rsmi_dev_memory_total_get", "rsmi_dev_pci_bandwidth_get", "rsmi_dev_pci_replay_counter_get",
	"rsmi_dev_ecc_count_get", "rsmi_compute_process_info_get", "rsmi_compute_process_gpus_get",
}

// NVMLAPIs are the NVML entry points libnvidia-ml.so.1 exports: what internal/gpustate
// calls through go-nvml (which looks the versioned names up by themselves), and
// nvmlErrorString, which go-nvml binds once the library loads.
var NVMLAPIs = []string{
	"nvmlInit", "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlSystemGetDriverVersion",
	"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetIndex",
	"nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo_v3",
	"nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo",
	"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
	"nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTemperature",
	"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
	"nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
	"nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetPcieReplayCounter",
	"nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
	"nvmlDeviceGetComputeRunningProcesses_v3",
	"nvmlEventSetCreate", "nvmlEventSetFree", "nvmlDeviceGetSupportedEventTypes",
	"nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2",
}
