package probes

import "github.com/cilium/ebpf"

// Library is a family of shared libraries the uprobes attach to, named by the stem of
// its file name (libcudart.so.12, libcudart-d0da41ae.so.11.0 in a wheel ...).
type Library string

const (
	LibCUDART Library = "libcudart"
	LibCUDA   Library = "libcuda"
	// LibHIP is AMD's HIP runtime (libamdhip64.so.5, .so.6): the CUDA runtime's API
	// under hip* names with the same argument layouts, decoded by the same programs.
	LibHIP Library = "libamdhip64"
)

// API is one probed library function. ID is the attach cookie the BPF return program
// reports back; Entry picks the entry program that decodes this function's arguments.
type API struct {
	ID      uint32
	Symbol  string
	Library Library
	entry   func(*cudaPrograms) *ebpf.Program
}

func launchKernel(p *cudaPrograms) *ebpf.Program    { return p.EnterCudaLaunchKernel }
func launchKernelExC(p *cudaPrograms) *ebpf.Program { return p.EnterCudaLaunchKernelExc }
func cuLaunchKernel(p *cudaPrograms) *ebpf.Program  { return p.EnterCuLaunchKernel }
func cuLaunchKernelEx(p *cudaPrograms) *ebpf.Program {
	return p.EnterCuLaunchKernelEx
}
func cudaMemcpy(p *cudaPrograms) *ebpf.Program   { return p.EnterCudaMemcpy }
func cuMemcpy(p *cudaPrograms) *ebpf.Program     { return p.EnterCuMemcpy }
func alloc(p *cudaPrograms) *ebpf.Program        { return p.EnterAlloc }
func handleStream(p *cudaPrograms) *ebpf.Program { return p.EnterHandleStream }
func streamHandle(p *cudaPrograms) *ebpf.Program { return p.EnterStreamHandle }
func noArgs(p *cudaPrograms) *ebpf.Program       { return p.EnterNoArgs }

// APIs lists every probed function. IDs are enum cuda_api in bpf/common.h.
var APIs = []API{
	{uint32(cudaCudaApiAPI_CUDA_LAUNCH_KERNEL), "cudaLaunchKernel", LibCUDART, launchKernel},
	{uint32(cudaCudaApiAPI_CUDA_LAUNCH_KERNEL_EXC), "cudaLaunchKernelExC", LibCUDART, launchKernelExC},
	{uint32(cudaCudaApiAPI_CUDA_MEMCPY), "cudaMemcpy", LibCUDART, cudaMemcpy},
	{uint32(cudaCudaApiAPI_CUDA_MEMCPY_ASYNC), "cudaMemcpyAsync", LibCUDART, cudaMemcpy},
	{uint32(cudaCudaApiAPI_CUDA_MALLOC), "cudaMalloc", LibCUDART, alloc},
	{uint32(cudaCudaApiAPI_CUDA_FREE), "cudaFree", LibCUDART, handleStream},
	{uint32(cudaCudaApiAPI_CUDA_MALLOC_ASYNC), "cudaMallocAsync", LibCUDART, alloc},
	{uint32(cudaCudaApiAPI_CUDA_FREE_ASYNC), "cudaFreeAsync", LibCUDART, handleStream},
	{uint32(cudaCudaApiAPI_CUDA_STREAM_SYNCHRONIZE), "cudaStreamSynchronize", LibCUDART, streamHandle},
	{uint32(cudaCudaApiAPI_CUDA_DEVICE_SYNCHRONIZE), "cudaDeviceSynchronize", LibCUDART, noArgs},
	{uint32(cudaCudaApiAPI_CUDA_EVENT_SYNCHRONIZE), "cudaEventSynchronize", LibCUDART, handleStream},
	{uint32(cudaCudaApiAPI_CUDA_STREAM_WAIT_EVENT), "cudaStreamWaitEvent", LibCUDART, streamHandle},
	{uint32(cudaCudaApiAPI_CUDA_STREAM_BEGIN_CAPTURE), "cudaStreamBeginCapture", LibCUDART, streamHandle},
	{uint32(cudaCudaApiAPI_CUDA_STREAM_END_CAPTURE), "cudaStreamEndCapture", LibCUDART, streamHandle},
	{uint32(cudaCudaApiAPI_CUDA_GRAPH_INSTANTIATE), "cudaGraphInstantiate", LibCUDART, handleStream},
	{uint32(cudaCudaApiAPI_CUDA_GRAPH_LAUNCH), "cudaGraphLaunch", LibCUDART, handleStream},
	{uint32(cudaCudaApiAPI_CU_LAUNCH_KERNEL), "cuLaunchKernel", LibCUDA, cuLaunchKernel},
	{uint32(cudaCudaApiAPI_CU_LAUNCH_KERNEL_PTSZ), "cuLaunchKernel_ptsz", LibCUDA, cuLaunchKernel},
	{uint32(cudaCudaApiAPI_CU_LAUNCH_KERNEL_EX), "cuLaunchKernelEx", LibCUDA, cuLaunchKernelEx},
	{uint32(cudaCudaApiAPI_CU_MEM_ALLOC), "cuMemAlloc_v2", LibCUDA, alloc},
	{uint32(cudaCudaApiAPI_CU_MEM_FREE), "cuMemFree_v2", LibCUDA, handleStream},
	{uint32(cudaCudaApiAPI_CU_MEMCPY), "cuMemcpy", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_MEMCPY_ASYNC), "cuMemcpyAsync", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_MEMCPY_HTOD), "cuMemcpyHtoD_v2", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_MEMCPY_DTOH), "cuMemcpyDtoH_v2", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_MEMCPY_DTOD), "cuMemcpyDtoD_v2", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_MEMCPY_HTOD_ASYNC), "cuMemcpyHtoDAsync_v2", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_MEMCPY_DTOH_ASYNC), "cuMemcpyDtoHAsync_v2", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_MEMCPY_DTOD_ASYNC), "cuMemcpyDtoDAsync_v2", LibCUDA, cuMemcpy},
	{uint32(cudaCudaApiAPI_CU_CTX_SYNCHRONIZE), "cuCtxSynchronize", LibCUDA, noArgs},
	{uint32(cudaCudaApiAPI_CU_STREAM_SYNCHRONIZE), "cuStreamSynchronize", LibCUDA, streamHandle},
	{uint32(cudaCudaApiAPI_CU_GRAPH_LAUNCH), "cuGraphLaunch", LibCUDA, handleStream},
	{uint32(cudaCudaApiAPI_CUDA_SET_DEVICE), "cudaSetDevice", LibCUDART, handleStream},
	{uint32(cudaCudaApiAPI_HIP_LAUNCH_KERNEL), "hipLaunchKernel", LibHIP, launchKernel},
	{uint32(cudaCudaApiAPI_HIP_MODULE_LAUNCH_KERNEL), "hipModuleLaunchKernel", LibHIP, cuLaunchKernel},
	{uint32(cudaCudaApiAPI_HIP_EXT_LAUNCH_KERNEL), "hipExtLaunchKernel", LibHIP, launchKernel},
	{uint32(cudaCudaApiAPI_HIP_GRAPH_LAUNCH), "hipGraphLaunch", LibHIP, handleStream},
	{uint32(cudaCudaApiAPI_HIP_MEMCPY), "hipMemcpy", LibHIP, cudaMemcpy},
	{uint32(cudaCudaApiAPI_HIP_MEMCPY_ASYNC), "hipMemcpyAsync", LibHIP, cudaMemcpy},
	{uint32(cudaCudaApiAPI_HIP_MEMCPY_HTOD), "hipMemcpyHtoD", LibHIP, cuMemcpy},
	{uint32(cudaCudaApiAPI_HIP_MEMCPY_DTOH), "hipMemcpyDtoH", LibHIP, cuMemcpy},
	{uint32(cudaCudaApiAPI_HIP_MALLOC), "hipMalloc", LibHIP, alloc},
	{uint32(cudaCudaApiAPI_HIP_FREE), "hipFree", LibHIP, handleStream},
	{uint32(cudaCudaApiAPI_HIP_MALLOC_ASYNC), "hipMallocAsync", LibHIP, alloc},
	{uint32(cudaCudaApiAPI_HIP_FREE_ASYNC), "hipFreeAsync", LibHIP, handleStream},
	{uint32(cudaCudaApiAPI_HIP_STREAM_SYNCHRONIZE), "hipStreamSynchronize", LibHIP, streamHandle},
	{uint32(cudaCudaApiAPI_HIP_DEVICE_SYNCHRONIZE), "hipDeviceSynchronize", LibHIP, noArgs},
	{uint32(cudaCudaApiAPI_HIP_EVENT_SYNCHRONIZE), "hipEventSynchronize", LibHIP, handleStream},
	{uint32(cudaCudaApiAPI_HIP_STREAM_WAIT_EVENT), "hipStreamWaitEvent", LibHIP, streamHandle},
	{uint32(cudaCudaApiAPI_HIP_SET_DEVICE), "hipSetDevice", LibHIP, handleStream},
}

// Vendor is the GPU vendor whose runtime a library is: "nvidia" or "amd".
func (l Library) Vendor() string {
	switch l {
	case LibCUDART, LibCUDA:
		return "nvidia"
	case LibHIP:
		return "amd"
	}
	return ""
}

var apiLibraries = func() (libs [APICount]Library) {
	for _, a := range APIs {
		libs[a.ID] = a.Library
	}
	return libs
}()

// APILibrary is the library family of an API ID, "" for an unknown ID.
func APILibrary(id uint32) Library {
	if int(id) < APICount {
		return apiLibraries[id]
	}
	return ""
}

// APICount bounds API IDs: every ID is in [1, APICount).
const APICount = int(cudaCudaApiAPI_COUNT)

// DeviceWaitAPIs are the calls that block the host until the device has done the work
// queued before them: what a rank spends in them is its device wait, and the return
// from one is where its host lead into the next collective starts. cudaMemcpy counts
// whole (its rare device-to-device form does not block); the driver's
// device-to-device copy does not block and is left out.
var DeviceWaitAPIs = []string{
	"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaFree",
	"cuStreamSynchronize", "cuCtxSynchronize", "cuMemcpy", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemFree_v2",
	"hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy", "hipFree",
	"hipMemcpyHtoD", "hipMemcpyDtoH",
}

// deviceWaitMask is DeviceWaitAPIs as the bit set the CUDA probes read (bit N: API N).
func deviceWaitMask() uint64 {
	var mask uint64
	for _, name := range DeviceWaitAPIs {
		for _, a := range APIs {
			if a.Symbol == name {
				mask |= 1 << a.ID
			}
		}
	}
	return mask
}

var apiNames = func() [APICount]string {
	var names [APICount]string
	for _, a := range APIs {
		names[a.ID] = a.Symbol
	}
	names[0] = "unknown"
	return names
}()

// APIName is the function name for an API ID, "unknown" for anything else.
func APIName(id uint32) string {
	if int(id) < APICount && apiNames[id] != "" {
		return apiNames[id]
	}
	return "unknown"
}

// MemcpyKind is cudaMemcpyKind, with the driver's directional copies mapped onto it.
type MemcpyKind uint8

const (
	MemcpyHostToHost     = MemcpyKind(cudaMemcpyKindMEMCPY_HOST_TO_HOST)
	MemcpyHostToDevice   = MemcpyKind(cudaMemcpyKindMEMCPY_HOST_TO_DEVICE)
	MemcpyDeviceToHost   = MemcpyKind(cudaMemcpyKindMEMCPY_DEVICE_TO_HOST)
	MemcpyDeviceToDevice = MemcpyKind(cudaMemcpyKindMEMCPY_DEVICE_TO_DEVICE)
	MemcpyDefault        = MemcpyKind(cudaMemcpyKindMEMCPY_DEFAULT)
	MemcpyNone           = MemcpyKind(cudaMemcpyKindMEMCPY_NONE)
)

// Direction is the semantic-convention value of a copy direction ("" for no copy).
func (k MemcpyKind) Direction() string {
	switch k {
	case MemcpyHostToHost:
		return "host_to_host"
	case MemcpyHostToDevice:
		return "host_to_device"
	case MemcpyDeviceToHost:
		return "device_to_host"
	case MemcpyDeviceToDevice:
		return "device_to_device"
	case MemcpyDefault:
		return "default"
	}
	return ""
}
