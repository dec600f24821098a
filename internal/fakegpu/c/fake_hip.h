/*
 * libamdhip64.so.5's names for the fake CUDA runtime: AMD's HIP runtime API is the CUDA
 * runtime's under hip* names, with the same argument layouts at the ABI level
 * (hip_runtime_api.h, HIP 5.2), so the fake HIP runtime is cudart.c built with its
 * exported functions renamed (hip.c), and a HIP program is a CUDA one built with this
 * header included first (fakegpu-ddp-hip). Types, enums and error values keep their
 * CUDA names here: hipError_t's values for what the fakes return (0, 1, 2, 100, 101,
 * 400, 600, ...) are CUDA's, except where HIP's differ, which the fakes never return.
 */
#ifndef FAKEGPU_FAKE_HIP_H
#define FAKEGPU_FAKE_HIP_H

#define cudaLaunchKernel hipLaunchKernel
#define cudaLaunchKernelExC hipLaunchKernelExC
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
#define cudaGetDevice hipGetDevice
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaGetLastError hipGetLastError
#define cudaGetErrorString hipGetErrorString
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMallocAsync hipMallocAsync
#define cudaFreeAsync hipFreeAsync
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamCreate hipStreamCreate
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaEventCreate hipEventCreate
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventQuery hipEventQuery
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaEventDestroy hipEventDestroy
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaGraphInstantiate hipGraphInstantiate
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy

#endif
