/*
 * The CUDA driver API in fakegpu-workload-hip: a HIP program loads no libcuda, so its
 * build of workload.c gets these instead, each failing with CUDA_ERROR_NOT_SUPPORTED.
 * They are only reached through the --driver-* options, which the HIP build refuses
 * that way; they live in the executable (not exported), so nothing probes them.
 */
#include "fake_cuda.h"

#define NOT_SUPPORTED 801 /* CUDA_ERROR_NOT_SUPPORTED */

CUresult cuInit(unsigned int f) { (void)f; return NOT_SUPPORTED; }
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
			unsigned int bz, unsigned int shm, CUstream s, void **p, void **e)
{
	(void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)s; (void)p; (void)e;
	return NOT_SUPPORTED;
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			     unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **p, void **e)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, p, e);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e)
{
	(void)c; (void)f; (void)p; (void)e;
	return NOT_SUPPORTED;
}
CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) { (void)d; (void)n; return NOT_SUPPORTED; }
CUresult cuMemFree_v2(CUdeviceptr d) { (void)d; return NOT_SUPPORTED; }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { (void)d; (void)s; (void)n; return NOT_SUPPORTED; }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)d; (void)s; (void)n; (void)st; return NOT_SUPPORTED; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { (void)d; (void)s; (void)n; return NOT_SUPPORTED; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { (void)d; (void)s; (void)n; return NOT_SUPPORTED; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { (void)d; (void)s; (void)n; return NOT_SUPPORTED; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)d; (void)s; (void)n; (void)st; return NOT_SUPPORTED; }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)d; (void)s; (void)n; (void)st; return NOT_SUPPORTED; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)d; (void)s; (void)n; (void)st; return NOT_SUPPORTED; }
CUresult cuCtxSynchronize(void) { return NOT_SUPPORTED; }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return NOT_SUPPORTED; }
CUresult cuGraphLaunch(CUgraphExec g, CUstream s) { (void)g; (void)s; return NOT_SUPPORTED; }
