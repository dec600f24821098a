/*
 * libcuda.so.1: the CUDA 12 driver API calls that cuBLAS-, Triton- and NCCL-style code
 * issues, over this library's own copy of the simulated device (engine.c).
 *
 * Stream handles come from the runtime (cudaStreamCreate) in real programs; the driver
 * side keys a timeline by the handle value, created on first use, so the driver never
 * reaches into the runtime library. The two libraries therefore keep separate timelines:
 * a program synchronizes driver work with driver calls (cuStreamSynchronize,
 * cuCtxSynchronize).
 */
#define _GNU_SOURCE
#include <string.h>

#include "engine.h"
#include "fake_cuda.h"

#define MAX_TIMELINES 256

struct timeline {
	CUstream handle;
	uint64_t busy_until;
};

/* timelines[0] is the default stream (NULL handle). */
static struct timeline timelines[MAX_TIMELINES];
static int timeline_count = 1;
static int initialized;

static __attribute__((noinline)) void enter(void) { fg_init(); }

/* The per-thread default stream handle (0x2) is folded into the legacy one. */
static struct timeline *lookup_timeline(CUstream h)
{
	if (h == NULL || h == (CUstream)0x1 || h == (CUstream)0x2)
		return &timelines[0];
	for (int i = 1; i < timeline_count; i++)
		if (timelines[i].handle == h)
			return &timelines[i];
	if (timeline_count == MAX_TIMELINES)
		return NULL;
	timelines[timeline_count] = (struct timeline){.handle = h};
	return &timelines[timeline_count++];
}

static uint64_t device_busy(void)
{
	uint64_t t = 0;
	for (int i = 0; i < timeline_count; i++)
		t = fg_max(t, timelines[i].busy_until);
	return t;
}

/* Caller holds fg_lock. The default stream orders against every other stream, as the
 * legacy stream does. */
static uint64_t enqueue(struct timeline *tl, uint64_t ns)
{
	uint64_t start = fg_max(fg_now_ns(), tl->busy_until);
	start = fg_max(start, tl == &timelines[0] ? device_busy() : timelines[0].busy_until);
	tl->busy_until = start + ns;
	return tl->busy_until;
}

FAKEGPU_API CUresult cuInit(unsigned int Flags)
{
	enter();
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fg_lock);
	initialized = 1;
	pthread_mutex_unlock(&fg_lock);
	return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                       unsigned int by, unsigned int bz, CUstream stream)
{
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	uint64_t threads = (uint64_t)bx * by * bz;
	if (!gx || !gy || !gz || !threads || threads > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	fg_cpu_work(fg_cfg.launch_ns);
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fg_lock);
	struct timeline *tl = lookup_timeline(stream);
	if (!initialized)
		rc = CUDA_ERROR_NOT_INITIALIZED;
	else if (!tl)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else
		enqueue(tl, fg_kernel_ns((uint64_t)gx * gy * gz));
	pthread_mutex_unlock(&fg_lock);
	return rc;
}

FAKEGPU_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	enter();
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream);
}

/* The _ptsz variant is what code built with --default-stream per-thread calls; it differs
 * only in what a NULL stream means, which this device does not distinguish. */
FAKEGPU_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                         unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                         void **kernelParams, void **extra)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	enter();
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream);
}

FAKEGPU_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                      void **extra)
{
	(void)kernelParams;
	(void)extra;
	enter();
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
	              config->blockDimY, config->blockDimZ, config->hStream);
}

FAKEGPU_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	enter();
	if (!dptr || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	void *p = NULL;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fg_lock);
	if (!initialized)
		rc = CUDA_ERROR_NOT_INITIALIZED;
	else if (fg_mem_alloc(bytesize, &p))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&fg_lock);
	if (rc == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return rc;
}

/* Like cudaFree, freeing device memory waits for the device to go idle. */
FAKEGPU_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	uint64_t idle_at = device_busy();
	int init = initialized;
	pthread_mutex_unlock(&fg_lock);
	if (!init)
		return CUDA_ERROR_NOT_INITIALIZED;
	fg_wait_until(idle_at);
	pthread_mutex_lock(&fg_lock);
	int rc = fg_mem_free((void *)(uintptr_t)dptr);
	pthread_mutex_unlock(&fg_lock);
	return rc ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/*
 * All driver copies go through here. want is the direction the entry point implies, or -1
 * for cuMemcpy/cuMemcpyAsync, which infer it from the addresses (unified addressing).
 * Synchronous host<->device copies wait for the copy; device-to-device ones do not.
 */
static CUresult copy(void *dst, const void *src, size_t bytes, int want, int async, CUstream stream)
{
	if (bytes == 0)
		return CUDA_SUCCESS;
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	fg_cpu_work(fg_cfg.launch_ns);
	CUresult rc = CUDA_SUCCESS;
	uint64_t done = 0;
	pthread_mutex_lock(&fg_lock);
	int dir = want >= 0 ? want : fg_copy_direction(dst, src);
	struct timeline *tl = lookup_timeline(async ? stream : NULL);
	if (!initialized)
		rc = CUDA_ERROR_NOT_INITIALIZED;
	else if (!tl)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (((dir == FG_H2D || dir == FG_D2D) && !fg_mem_contains(dst, bytes)) ||
	         ((dir == FG_D2H || dir == FG_D2D) && !fg_mem_contains(src, bytes)))
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (dir != FG_H2H)
		done = enqueue(tl, fg_copy_ns(bytes, dir));
	pthread_mutex_unlock(&fg_lock);
	if (rc != CUDA_SUCCESS)
		return rc;
	memcpy(dst, src, bytes);
	if (!async && (dir == FG_H2D || dir == FG_D2H))
		fg_wait_until(done);
	return CUDA_SUCCESS;
}

#define DPTR(p) ((void *)(uintptr_t)(p))

FAKEGPU_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	enter();
	return copy(DPTR(dst), DPTR(src), ByteCount, -1, 0, NULL);
}

FAKEGPU_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	enter();
	return copy(DPTR(dst), DPTR(src), ByteCount, -1, 1, hStream);
}

FAKEGPU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	enter();
	return copy(DPTR(dstDevice), srcHost, ByteCount, FG_H2D, 0, NULL);
}

FAKEGPU_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	enter();
	return copy(dstHost, DPTR(srcDevice), ByteCount, FG_D2H, 0, NULL);
}

FAKEGPU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	enter();
	return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, FG_D2D, 0, NULL);
}

FAKEGPU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                          CUstream hStream)
{
	enter();
	return copy(DPTR(dstDevice), srcHost, ByteCount, FG_H2D, 1, hStream);
}

FAKEGPU_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
	enter();
	return copy(dstHost, DPTR(srcDevice), ByteCount, FG_D2H, 1, hStream);
}

FAKEGPU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
	enter();
	return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, FG_D2D, 1, hStream);
}

FAKEGPU_API CUresult cuCtxSynchronize(void)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	uint64_t deadline = device_busy();
	int init = initialized;
	pthread_mutex_unlock(&fg_lock);
	if (!init)
		return CUDA_ERROR_NOT_INITIALIZED;
	fg_wait_until(deadline);
	return CUDA_SUCCESS;
}

FAKEGPU_API CUresult cuStreamSynchronize(CUstream hStream)
{
	enter();
	CUresult rc = CUDA_SUCCESS;
	uint64_t deadline = 0;
	pthread_mutex_lock(&fg_lock);
	struct timeline *tl = lookup_timeline(hStream);
	if (!initialized)
		rc = CUDA_ERROR_NOT_INITIALIZED;
	else if (!tl)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else
		deadline = tl->busy_until;
	pthread_mutex_unlock(&fg_lock);
	if (rc == CUDA_SUCCESS)
		fg_wait_until(deadline);
	return rc;
}

/* Accepts executable graphs instantiated by the runtime: the handle is checked by its
 * magic before anything else is read. */
FAKEGPU_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	enter();
	if (!hGraphExec || hGraphExec->magic != FG_EXEC_MAGIC || !hGraphExec->live)
		return CUDA_ERROR_INVALID_HANDLE;
	fg_cpu_work(fg_cfg.launch_ns);
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fg_lock);
	struct timeline *tl = lookup_timeline(hStream);
	if (!initialized)
		rc = CUDA_ERROR_NOT_INITIALIZED;
	else if (!tl)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else
		enqueue(tl, fg_exec_replay(hGraphExec));
	pthread_mutex_unlock(&fg_lock);
	return rc;
}
