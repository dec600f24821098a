/*
 * CUDA 12 runtime and driver API declarations, as the fake GPU stack exports them.
 *
 * Every prototype and struct here matches the CUDA 12 headers at the ABI level (x86-64
 * System V), because Fathom's uprobes decode arguments straight from registers and the
 * stack and must work unchanged against NVIDIA's libraries. The static assertions at the
 * end pin the layouts the probes rely on.
 */
#ifndef FAKEGPU_FAKE_CUDA_H
#define FAKEGPU_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#define FAKEGPU_API __attribute__((visibility("default")))

/* ---- runtime API (libcudart.so.12) ---- */

/* cudaError_t is an enum, so it travels in eax like an int. Values are CUDA 12's. */
typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidDeviceFunction = 98,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorIllegalState = 401,
	cudaErrorNotReady = 600,
	cudaErrorStreamCaptureUnsupported = 900,
	cudaErrorStreamCaptureInvalidated = 901,
	cudaErrorStreamCaptureUnmatched = 903,
} cudaError_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
};

enum cudaStreamCaptureMode {
	cudaStreamCaptureModeGlobal = 0,
	cudaStreamCaptureModeThreadLocal = 1,
	cudaStreamCaptureModeRelaxed = 2,
};

enum cudaDeviceAttr {
	cudaDevAttrMaxThreadsPerBlock = 1,
	cudaDevAttrMultiProcessorCount = 16,
};

/* dim3 is 12 bytes of three unsigned ints: SysV classifies it INTEGER,INTEGER, so passed
 * by value it takes two registers (x | y<<32, then z). */
typedef struct dim3 {
	unsigned int x, y, z;
} dim3;

/* Opaque handles are pointers in CUDA, shared between the runtime and the driver API
 * (cudaStream_t and CUstream are the same type). */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

/* The legacy default stream and the per-thread default stream are magic handle values. */
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

/* cudaLaunchAttributeValue is a 64-byte union in CUDA 12; the id is padded to 8 bytes. */
typedef struct cudaLaunchAttribute_st {
	int id;
	char pad[8 - sizeof(int)];
	union {
		char pad[64];
	} val;
} cudaLaunchAttribute;

typedef struct cudaLaunchConfig_st {
	dim3 gridDim;
	dim3 blockDim;
	size_t dynamicSmemBytes;
	cudaStream_t stream;
	cudaLaunchAttribute *attrs;
	unsigned int numAttrs;
} cudaLaunchConfig_t;

FAKEGPU_API cudaError_t cudaGetDeviceCount(int *count);
FAKEGPU_API cudaError_t cudaSetDevice(int device);
FAKEGPU_API cudaError_t cudaGetDevice(int *device);
FAKEGPU_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
FAKEGPU_API cudaError_t cudaGetLastError(void);
FAKEGPU_API const char *cudaGetErrorString(cudaError_t error);

FAKEGPU_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                         size_t sharedMem, cudaStream_t stream);
FAKEGPU_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args);

FAKEGPU_API cudaError_t cudaMalloc(void **devPtr, size_t size);
FAKEGPU_API cudaError_t cudaFree(void *devPtr);
FAKEGPU_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
FAKEGPU_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
FAKEGPU_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
FAKEGPU_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                        cudaStream_t stream);

FAKEGPU_API cudaError_t cudaStreamCreate(cudaStream_t *pStream);
FAKEGPU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
FAKEGPU_API cudaError_t cudaStreamDestroy(cudaStream_t stream);
FAKEGPU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream);
FAKEGPU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
FAKEGPU_API cudaError_t cudaDeviceSynchronize(void);

FAKEGPU_API cudaError_t cudaEventCreate(cudaEvent_t *event);
FAKEGPU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
FAKEGPU_API cudaError_t cudaEventSynchronize(cudaEvent_t event);
FAKEGPU_API cudaError_t cudaEventQuery(cudaEvent_t event);
FAKEGPU_API cudaError_t cudaEventDestroy(cudaEvent_t event);

FAKEGPU_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
FAKEGPU_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
FAKEGPU_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                             unsigned long long flags);
FAKEGPU_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
FAKEGPU_API cudaError_t cudaGraphDestroy(cudaGraph_t graph);
FAKEGPU_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);

/* ---- driver API (libcuda.so.1) ---- */

typedef enum cudaError_enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
} CUresult;

/* CUdeviceptr is an integer, not a pointer, on 64-bit hosts. */
typedef unsigned long long CUdeviceptr;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUgraphExec_st *CUgraphExec;

typedef struct CUlaunchAttribute_st {
	int id;
	char pad[8 - sizeof(int)];
	union {
		char pad[64];
	} value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

FAKEGPU_API CUresult cuInit(unsigned int Flags);
/* cuLaunchKernel has 11 arguments: the first six in rdi..r9, blockDimZ, sharedMemBytes,
 * hStream, kernelParams and extra on the stack at 8(%rsp)..40(%rsp) on entry. */
FAKEGPU_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra);
FAKEGPU_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                         unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                         void **kernelParams, void **extra);
FAKEGPU_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                      void **extra);
FAKEGPU_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
FAKEGPU_API CUresult cuMemFree_v2(CUdeviceptr dptr);
FAKEGPU_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
FAKEGPU_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
FAKEGPU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
FAKEGPU_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
FAKEGPU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
FAKEGPU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                          CUstream hStream);
FAKEGPU_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream);
FAKEGPU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream);
FAKEGPU_API CUresult cuCtxSynchronize(void);
FAKEGPU_API CUresult cuStreamSynchronize(CUstream hStream);
FAKEGPU_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);

/* Layout facts the probes read through a pointer. */
_Static_assert(sizeof(dim3) == 12, "dim3 is three unsigned ints");
_Static_assert(offsetof(cudaLaunchConfig_t, blockDim) == 12, "cudaLaunchConfig_t.blockDim");
_Static_assert(offsetof(cudaLaunchConfig_t, dynamicSmemBytes) == 24, "cudaLaunchConfig_t.dynamicSmemBytes");
_Static_assert(offsetof(cudaLaunchConfig_t, stream) == 32, "cudaLaunchConfig_t.stream");
_Static_assert(offsetof(cudaLaunchConfig_t, attrs) == 40, "cudaLaunchConfig_t.attrs");
_Static_assert(offsetof(cudaLaunchConfig_t, numAttrs) == 48, "cudaLaunchConfig_t.numAttrs");
_Static_assert(sizeof(cudaLaunchAttribute) == 72, "cudaLaunchAttribute");
_Static_assert(offsetof(CUlaunchConfig, sharedMemBytes) == 24, "CUlaunchConfig.sharedMemBytes");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig.hStream");
_Static_assert(offsetof(CUlaunchConfig, attrs) == 40, "CUlaunchConfig.attrs");
_Static_assert(offsetof(CUlaunchConfig, numAttrs) == 48, "CUlaunchConfig.numAttrs");
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute");

#endif
