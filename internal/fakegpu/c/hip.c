/*
 * libamdhip64.so.5: AMD's HIP runtime API over the simulated device in engine.c. It is
 * the fake CUDA runtime (cudart.c: asynchronous streams, events, graphs, the hooks the
 * fake NCCL, built as librccl.so.1, puts collectives on streams with) under HIP's
 * names (fake_hip.h), plus the HIP functions with no runtime-API twin: the module
 * launch (cuLaunchKernel's layout), the extended launch with its timing events, and
 * the directional copies (cuMemcpyHtoD's layout). Each does its work through cudart.c's
 * static functions, not through another exported one, so a probed call is one call.
 */
#include "fake_hip.h"
#include "cudart.c"

typedef struct CUfunc_st *hipFunction_t;
typedef void *hipDeviceptr_t;

/* hipModuleLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
 * sharedMemBytes, stream, kernelParams, extra): six in registers, the rest on the stack. */
FAKEGPU_API cudaError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                              unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                              unsigned int blockDimZ, unsigned int sharedMemBytes, cudaStream_t stream,
                                              void **kernelParams, void **extra)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	enter();
	return launch(f, (dim3){gridDimX, gridDimY, gridDimZ}, (dim3){blockDimX, blockDimY, blockDimZ}, stream);
}

/* hipExtLaunchKernel(func, grid, block, args, sharedMem, stream, startEvent, stopEvent,
 * flags): hipLaunchKernel's arguments, then the events recorded around the kernel. */
FAKEGPU_API cudaError_t hipExtLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                           size_t sharedMem, cudaStream_t stream, cudaEvent_t startEvent,
                                           cudaEvent_t stopEvent, int flags)
{
	(void)args;
	(void)sharedMem;
	(void)flags;
	enter();
	cudaError_t err;
	if (startEvent && (err = record_event(startEvent, stream)))
		return err;
	if ((err = launch(func, gridDim, blockDim, stream)))
		return err;
	return stopEvent ? record_event(stopEvent, stream) : cudaSuccess;
}

FAKEGPU_API cudaError_t hipMemcpyHtoD(hipDeviceptr_t dst, void *src, size_t sizeBytes)
{
	enter();
	return copy_blocking(dst, src, sizeBytes, cudaMemcpyHostToDevice);
}

FAKEGPU_API cudaError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t sizeBytes)
{
	enter();
	return copy_blocking(dst, src, sizeBytes, cudaMemcpyDeviceToHost);
}
