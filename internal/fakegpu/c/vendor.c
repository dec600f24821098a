/*
 * fakegpu-vendor: calls the probed CUDA runtime and driver API functions of NVIDIA's own
 * libraries (not the fake ones) a planned number of times each and reports every call's
 * outcome; with --hip, the probed HIP functions of AMD's own libamdhip64.so.5 instead. It dlopens them by soname, as a framework does (libcudart.so.11.0 and
 * libcuda.so.1, found through LD_LIBRARY_PATH), so it builds without them; libcudart
 * itself dlopens libcuda.so.1 when it first initialises.
 *
 * Without a GPU every call goes through NVIDIA's code and returns an error at once (no
 * device, driver not initialised, insufficient driver): what Fathom's uprobes see is the
 * real entry and return of each exported function. The report is one JSON line on stdout:
 *
 *   {"pid":..,"tid":..,"cuInit":3,"apis":{"cudaLaunchKernel":{"calls":N,"errors":E,"ret":R,"ns":T},..}}
 *
 * with R the return code of the last call and T the time spent inside the calls. The libraries are opened, and cuInit called,
 * before the start gate, so the collector finds them mapped and attaches before the
 * first counted call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fake_cuda.h"

static const char *prog = "fakegpu-vendor";

static struct {
	const char *cudart, *cuda, *hip;
	const char *plan;
	const char *wait_file, *ready_file;
	long wait_timeout_ms;
} opt = {.cudart = "libcudart.so.11.0", .cuda = "libcuda.so.1", .wait_timeout_ms = 60000};

static const struct flag flags[] = {
	{"cudart", OPT_STRING, &opt.cudart, "CUDA runtime to dlopen"},
	{"cuda", OPT_STRING, &opt.cuda, "CUDA driver library to dlopen"},
	{"hip", OPT_STRING, &opt.hip, "call HIP's functions in this library (libamdhip64.so.5) instead of CUDA's"},
	{"plan", OPT_STRING, &opt.plan, "API=COUNT,...: how many times to call each probed function (interleaved)"},
	{"wait-file", OPT_STRING, &opt.wait_file, "start gate: wait until this path exists before the first planned call"},
	{"wait-timeout-ms", OPT_LONG, &opt.wait_timeout_ms, "give up on the gate after this long (exit status 3)"},
	{"ready-file", OPT_STRING, &opt.ready_file, "written ({\"pid\":..,\"tid\":..}) when the gate is reached"},
};

/* The functions, looked up in the opened libraries; their types are the ones the fake
 * stack exports, which match NVIDIA's ABI (fake_cuda.h). */
static struct {
	__typeof__(&cudaSetDevice) cudaSetDevice;
	__typeof__(&cudaLaunchKernel) cudaLaunchKernel;
	__typeof__(&cudaLaunchKernelExC) cudaLaunchKernelExC;
	__typeof__(&cudaMalloc) cudaMalloc;
	__typeof__(&cudaFree) cudaFree;
	__typeof__(&cudaMallocAsync) cudaMallocAsync;
	__typeof__(&cudaFreeAsync) cudaFreeAsync;
	__typeof__(&cudaMemcpy) cudaMemcpy;
	__typeof__(&cudaMemcpyAsync) cudaMemcpyAsync;
	__typeof__(&cudaStreamSynchronize) cudaStreamSynchronize;
	__typeof__(&cudaDeviceSynchronize) cudaDeviceSynchronize;
	__typeof__(&cudaEventSynchronize) cudaEventSynchronize;
	__typeof__(&cudaStreamWaitEvent) cudaStreamWaitEvent;
	__typeof__(&cudaStreamBeginCapture) cudaStreamBeginCapture;
	__typeof__(&cudaStreamEndCapture) cudaStreamEndCapture;
	__typeof__(&cudaGraphInstantiate) cudaGraphInstantiate;
	__typeof__(&cudaGraphLaunch) cudaGraphLaunch;

	__typeof__(&cuInit) cuInit;
	__typeof__(&cuLaunchKernel) cuLaunchKernel;
	__typeof__(&cuLaunchKernel_ptsz) cuLaunchKernel_ptsz;
	__typeof__(&cuLaunchKernelEx) cuLaunchKernelEx;
	__typeof__(&cuMemAlloc_v2) cuMemAlloc_v2;
	__typeof__(&cuMemFree_v2) cuMemFree_v2;
	__typeof__(&cuMemcpy) cuMemcpy;
	__typeof__(&cuMemcpyAsync) cuMemcpyAsync;
	__typeof__(&cuMemcpyHtoD_v2) cuMemcpyHtoD_v2;
	__typeof__(&cuMemcpyDtoH_v2) cuMemcpyDtoH_v2;
	__typeof__(&cuMemcpyDtoD_v2) cuMemcpyDtoD_v2;
	__typeof__(&cuMemcpyHtoDAsync_v2) cuMemcpyHtoDAsync_v2;
	__typeof__(&cuMemcpyDtoHAsync_v2) cuMemcpyDtoHAsync_v2;
	__typeof__(&cuMemcpyDtoDAsync_v2) cuMemcpyDtoDAsync_v2;
	__typeof__(&cuCtxSynchronize) cuCtxSynchronize;
	__typeof__(&cuStreamSynchronize) cuStreamSynchronize;
	__typeof__(&cuGraphLaunch) cuGraphLaunch;
} fn;

/* HIP's functions (hip_runtime_api.h, HIP 5.2): the CUDA runtime's and driver's
 * layouts under other names, so the fake stack's types describe them. */
static struct {
	__typeof__(&cudaGetDeviceCount) hipGetDeviceCount;
	__typeof__(&cudaSetDevice) hipSetDevice;
	__typeof__(&cudaLaunchKernel) hipLaunchKernel;
	__typeof__(&cuLaunchKernel) hipModuleLaunchKernel;
	cudaError_t (*hipExtLaunchKernel)(const void *, dim3, dim3, void **, size_t, cudaStream_t, cudaEvent_t,
					  cudaEvent_t, int);
	__typeof__(&cudaGraphLaunch) hipGraphLaunch;
	__typeof__(&cudaMemcpy) hipMemcpy;
	__typeof__(&cudaMemcpyAsync) hipMemcpyAsync;
	__typeof__(&cuMemcpyHtoD_v2) hipMemcpyHtoD;
	__typeof__(&cuMemcpyDtoH_v2) hipMemcpyDtoH;
	__typeof__(&cudaMalloc) hipMalloc;
	__typeof__(&cudaFree) hipFree;
	__typeof__(&cudaMallocAsync) hipMallocAsync;
	__typeof__(&cudaFreeAsync) hipFreeAsync;
	__typeof__(&cudaStreamSynchronize) hipStreamSynchronize;
	__typeof__(&cudaDeviceSynchronize) hipDeviceSynchronize;
	__typeof__(&cudaEventSynchronize) hipEventSynchronize;
	__typeof__(&cudaStreamWaitEvent) hipStreamWaitEvent;
} hip;

/* A host function's address stands in for a kernel: with no device the runtime fails
 * the launch before it would look the function up. */
static void kernel_stub(void) {}

/* Copies name 4 KiB of host memory, and device addresses no allocation returned. */
#define COPY_BYTES 4096
#define ALLOC_BYTES (1 << 20)
static char host_buf[2][COPY_BYTES];

static int call(const char *name)
{
	void *args[1] = {NULL};
	void *dptr = NULL;
	CUdeviceptr d = 0;
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	dim3 grid = {128, 1, 1}, block = {256, 1, 1};
	cudaLaunchConfig_t rcfg = {.gridDim = grid, .blockDim = block};
	CUlaunchConfig dcfg = {.gridDimX = 128, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1};

#define IS(x) (strcmp(name, #x) == 0)
	if (IS(cudaSetDevice))
		return fn.cudaSetDevice(0);
	if (IS(cudaLaunchKernel))
		return fn.cudaLaunchKernel((const void *)kernel_stub, grid, block, args, 0, NULL);
	if (IS(cudaLaunchKernelExC))
		return fn.cudaLaunchKernelExC(&rcfg, (const void *)kernel_stub, args);
	if (IS(cudaMalloc))
		return fn.cudaMalloc(&dptr, ALLOC_BYTES);
	if (IS(cudaFree))
		return fn.cudaFree(NULL);
	if (IS(cudaMallocAsync))
		return fn.cudaMallocAsync(&dptr, ALLOC_BYTES, NULL);
	if (IS(cudaFreeAsync))
		return fn.cudaFreeAsync(NULL, NULL);
	if (IS(cudaMemcpy))
		return fn.cudaMemcpy(host_buf[1], host_buf[0], COPY_BYTES, cudaMemcpyHostToDevice);
	if (IS(cudaMemcpyAsync))
		return fn.cudaMemcpyAsync(host_buf[1], host_buf[0], COPY_BYTES, cudaMemcpyHostToDevice, NULL);
	if (IS(cudaStreamSynchronize))
		return fn.cudaStreamSynchronize(NULL);
	if (IS(cudaDeviceSynchronize))
		return fn.cudaDeviceSynchronize();
	if (IS(cudaEventSynchronize))
		return fn.cudaEventSynchronize(NULL);
	if (IS(cudaStreamWaitEvent))
		return fn.cudaStreamWaitEvent(NULL, NULL, 0);
	if (IS(cudaStreamBeginCapture))
		return fn.cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal);
	if (IS(cudaStreamEndCapture))
		return fn.cudaStreamEndCapture(NULL, &graph);
	if (IS(cudaGraphInstantiate))
		return fn.cudaGraphInstantiate(&exec, NULL, 0);
	if (IS(cudaGraphLaunch))
		return fn.cudaGraphLaunch(NULL, NULL);

	if (IS(cuLaunchKernel))
		return fn.cuLaunchKernel(NULL, 128, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
	if (IS(cuLaunchKernel_ptsz))
		return fn.cuLaunchKernel_ptsz(NULL, 128, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
	if (IS(cuLaunchKernelEx))
		return fn.cuLaunchKernelEx(&dcfg, NULL, args, NULL);
	if (IS(cuMemAlloc_v2))
		return fn.cuMemAlloc_v2(&d, ALLOC_BYTES);
	if (IS(cuMemFree_v2))
		return fn.cuMemFree_v2(0);
	if (IS(cuMemcpy))
		return fn.cuMemcpy(0, 0, COPY_BYTES);
	if (IS(cuMemcpyAsync))
		return fn.cuMemcpyAsync(0, 0, COPY_BYTES, NULL);
	if (IS(cuMemcpyHtoD_v2))
		return fn.cuMemcpyHtoD_v2(0, host_buf[0], COPY_BYTES);
	if (IS(cuMemcpyDtoH_v2))
		return fn.cuMemcpyDtoH_v2(host_buf[1], 0, COPY_BYTES);
	if (IS(cuMemcpyDtoD_v2))
		return fn.cuMemcpyDtoD_v2(0, 0, COPY_BYTES);
	if (IS(cuMemcpyHtoDAsync_v2))
		return fn.cuMemcpyHtoDAsync_v2(0, host_buf[0], COPY_BYTES, NULL);
	if (IS(cuMemcpyDtoHAsync_v2))
		return fn.cuMemcpyDtoHAsync_v2(host_buf[1], 0, COPY_BYTES, NULL);
	if (IS(cuMemcpyDtoDAsync_v2))
		return fn.cuMemcpyDtoDAsync_v2(0, 0, COPY_BYTES, NULL);
	if (IS(cuCtxSynchronize))
		return fn.cuCtxSynchronize();
	if (IS(cuStreamSynchronize))
		return fn.cuStreamSynchronize(NULL);
	if (IS(cuGraphLaunch))
		return fn.cuGraphLaunch(NULL, NULL);

	if (IS(hipSetDevice))
		return hip.hipSetDevice(0);
	if (IS(hipLaunchKernel))
		return hip.hipLaunchKernel((const void *)kernel_stub, grid, block, args, 0, NULL);
	if (IS(hipModuleLaunchKernel))
		return hip.hipModuleLaunchKernel(NULL, 128, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
	if (IS(hipExtLaunchKernel))
		return hip.hipExtLaunchKernel((const void *)kernel_stub, grid, block, args, 0, NULL, NULL, NULL, 0);
	if (IS(hipGraphLaunch))
		return hip.hipGraphLaunch(NULL, NULL);
	if (IS(hipMemcpy))
		return hip.hipMemcpy(host_buf[1], host_buf[0], COPY_BYTES, cudaMemcpyHostToDevice);
	if (IS(hipMemcpyAsync))
		return hip.hipMemcpyAsync(host_buf[1], host_buf[0], COPY_BYTES, cudaMemcpyHostToDevice, NULL);
	if (IS(hipMemcpyHtoD))
		return hip.hipMemcpyHtoD(0, host_buf[0], COPY_BYTES);
	if (IS(hipMemcpyDtoH))
		return hip.hipMemcpyDtoH(host_buf[1], 0, COPY_BYTES);
	if (IS(hipMalloc))
		return hip.hipMalloc(&dptr, ALLOC_BYTES);
	if (IS(hipFree))
		return hip.hipFree(NULL);
	if (IS(hipMallocAsync))
		return hip.hipMallocAsync(&dptr, ALLOC_BYTES, NULL);
	if (IS(hipFreeAsync))
		return hip.hipFreeAsync(NULL, NULL);
	if (IS(hipStreamSynchronize))
		return hip.hipStreamSynchronize(NULL);
	if (IS(hipDeviceSynchronize))
		return hip.hipDeviceSynchronize();
	if (IS(hipEventSynchronize))
		return hip.hipEventSynchronize(NULL);
	if (IS(hipStreamWaitEvent))
		return hip.hipStreamWaitEvent(NULL, NULL, 0);
#undef IS
	cli_die(prog, 2, "no way to call %s", name);
}

static void *open_library(const char *name)
{
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		cli_die(prog, 4, "dlopen %s: %s (NVIDIA's libraries: put them on LD_LIBRARY_PATH, make vendor-libs; AMD's: apt-get install libamdhip64-5)", name, dlerror());
	return h;
}

static void *lookup(void *lib, const char *libname, const char *sym)
{
	dlerror();
	void *p = dlsym(lib, sym);
	if (!p)
		cli_die(prog, 4, "%s does not export %s", libname, sym);
	return p;
}

/* Every function call() knows, in the order of Fathom's probe list. */
static const char *const known[] = {
	"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpy", "cudaMemcpyAsync", "cudaMalloc", "cudaFree",
	"cudaMallocAsync", "cudaFreeAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
	"cudaStreamWaitEvent", "cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate",
	"cudaGraphLaunch", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuMemAlloc_v2",
	"cuMemFree_v2", "cuMemcpy", "cuMemcpyAsync", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
	"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuCtxSynchronize",
	"cuStreamSynchronize", "cuGraphLaunch", "cudaSetDevice",
};

static const char *const known_hip[] = {
	"hipLaunchKernel", "hipModuleLaunchKernel", "hipExtLaunchKernel", "hipGraphLaunch", "hipMemcpy",
	"hipMemcpyAsync", "hipMemcpyHtoD", "hipMemcpyDtoH", "hipMalloc", "hipFree", "hipMallocAsync", "hipFreeAsync",
	"hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipStreamWaitEvent", "hipSetDevice",
};

static int is_known(const char *name)
{
	if (opt.hip) {
		for (size_t i = 0; i < sizeof(known_hip) / sizeof(known_hip[0]); i++)
			if (strcmp(known_hip[i], name) == 0)
				return 1;
		return 0;
	}
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(known[i], name) == 0)
			return 1;
	return 0;
}

struct planned {
	char name[64];
	long want, calls, errors;
	int ret;
	uint64_t ns; /* time inside the calls, for the probe-cost benchmark */
};

#define MAX_PLANNED 64

static int parse_plan(struct planned *plan)
{
	if (!opt.plan)
		cli_die(prog, 2, "--plan is required");
	char *copy = strdup(opt.plan);
	int n = 0;
	for (char *item = strtok(copy, ","); item; item = strtok(NULL, ",")) {
		char *eq = strchr(item, '=');
		if (!eq || eq == item || (size_t)(eq - item) >= sizeof(plan[0].name) || n == MAX_PLANNED)
			cli_die(prog, 2, "--plan item %s: want API=COUNT", item);
		*eq = 0;
		if (!is_known(item))
			cli_die(prog, 2, "--plan: %s is not a function this program calls", item);
		char *end;
		errno = 0;
		long want = strtol(eq + 1, &end, 10);
		if (errno || *end || want < 0)
			cli_die(prog, 2, "--plan %s=%s: not a count", item, eq + 1);
		snprintf(plan[n].name, sizeof(plan[n].name), "%s", item);
		plan[n].want = want;
		n++;
	}
	free(copy);
	return n;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void start_gate(void)
{
	if (opt.ready_file) {
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof(tmp), "%s.tmp", opt.ready_file);
		FILE *f = fopen(tmp, "w");
		if (!f)
			cli_die(prog, 2, "ready file %s: %s", tmp, strerror(errno));
		fprintf(f, "{\"pid\":%d,\"tid\":%ld}\n", (int)getpid(), (long)syscall(SYS_gettid));
		if (fclose(f) || rename(tmp, opt.ready_file))
			cli_die(prog, 2, "ready file %s: %s", opt.ready_file, strerror(errno));
	}
	if (!opt.wait_file)
		return;
	uint64_t give_up = now_ns() + (uint64_t)opt.wait_timeout_ms * 1000000ull;
	while (access(opt.wait_file, F_OK) != 0) {
		if (now_ns() > give_up)
			cli_die(prog, 3, "%s did not appear within %ld ms", opt.wait_file, opt.wait_timeout_ms);
		struct timespec ms = {0, 1000000L};
		nanosleep(&ms, NULL);
	}
}

/* open_cuda opens NVIDIA's runtime and driver and looks up every function call() may
 * make; it returns cuInit's answer. */
static int open_cuda(void)
{
	void *cudart = open_library(opt.cudart);
	void *cuda = open_library(opt.cuda);
#define RT(x) fn.x = (__typeof__(fn.x))lookup(cudart, opt.cudart, #x)
#define DRV(x) fn.x = (__typeof__(fn.x))lookup(cuda, opt.cuda, #x)
	RT(cudaSetDevice);
	RT(cudaLaunchKernel);
	RT(cudaLaunchKernelExC);
	RT(cudaMalloc);
	RT(cudaFree);
	RT(cudaMallocAsync);
	RT(cudaFreeAsync);
	RT(cudaMemcpy);
	RT(cudaMemcpyAsync);
	RT(cudaStreamSynchronize);
	RT(cudaDeviceSynchronize);
	RT(cudaEventSynchronize);
	RT(cudaStreamWaitEvent);
	RT(cudaStreamBeginCapture);
	RT(cudaStreamEndCapture);
	RT(cudaGraphInstantiate);
	RT(cudaGraphLaunch);
	DRV(cuInit);
	DRV(cuLaunchKernel);
	DRV(cuLaunchKernel_ptsz);
	DRV(cuLaunchKernelEx);
	DRV(cuMemAlloc_v2);
	DRV(cuMemFree_v2);
	DRV(cuMemcpy);
	DRV(cuMemcpyAsync);
	DRV(cuMemcpyHtoD_v2);
	DRV(cuMemcpyDtoH_v2);
	DRV(cuMemcpyDtoD_v2);
	DRV(cuMemcpyHtoDAsync_v2);
	DRV(cuMemcpyDtoHAsync_v2);
	DRV(cuMemcpyDtoDAsync_v2);
	DRV(cuCtxSynchronize);
	DRV(cuStreamSynchronize);
	DRV(cuGraphLaunch);
#undef RT
#undef DRV
	/* What a framework does first; not probed, so not counted. */
	return fn.cuInit(0);

}

/* open_hip opens AMD's HIP runtime and looks up its functions; it returns
 * hipGetDeviceCount's answer (100, hipErrorNoDevice, without an AMD GPU). */
static int open_hip(void)
{
	void *lib = open_library(opt.hip);
#define HIP(x) hip.x = (__typeof__(hip.x))lookup(lib, opt.hip, #x)
	HIP(hipGetDeviceCount);
	HIP(hipSetDevice);
	HIP(hipLaunchKernel);
	HIP(hipModuleLaunchKernel);
	HIP(hipExtLaunchKernel);
	HIP(hipGraphLaunch);
	HIP(hipMemcpy);
	HIP(hipMemcpyAsync);
	HIP(hipMemcpyHtoD);
	HIP(hipMemcpyDtoH);
	HIP(hipMalloc);
	HIP(hipFree);
	HIP(hipMallocAsync);
	HIP(hipFreeAsync);
	HIP(hipStreamSynchronize);
	HIP(hipDeviceSynchronize);
	HIP(hipEventSynchronize);
	HIP(hipStreamWaitEvent);
#undef HIP
	int count = 0;
	return hip.hipGetDeviceCount(&count);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--help") == 0) {
		fprintf(stdout, "usage: %s --plan API=COUNT,... [flags]\n", prog);
		cli_usage(stdout, flags, sizeof(flags) / sizeof(flags[0]));
		return 0;
	}
	cli_parse(prog, flags, sizeof(flags) / sizeof(flags[0]), argc, argv);
	struct planned plan[MAX_PLANNED] = {0};
	int n = parse_plan(plan);

	int init;
	if (opt.hip)
		init = open_hip();
	else
		init = open_cuda();

	start_gate();
	/* Round-robin, so entries and returns of different functions interleave on the
	 * thread as they do in a training step. */
	for (int busy = 1; busy;) {
		busy = 0;
		for (int i = 0; i < n; i++) {
			if (plan[i].calls == plan[i].want)
				continue;
			uint64_t t0 = now_ns();
			int ret = call(plan[i].name);
			plan[i].ns += now_ns() - t0;
			plan[i].calls++;
			plan[i].errors += ret != 0;
			plan[i].ret = ret;
			busy = 1;
		}
	}

	printf("{\"pid\":%d,\"tid\":%ld,\"cuInit\":%d,\"apis\":{", (int)getpid(), (long)syscall(SYS_gettid), init);
	for (int i = 0; i < n; i++)
		printf("%s\"%s\":{\"calls\":%ld,\"errors\":%ld,\"ret\":%d,\"ns\":%llu}", i ? "," : "", plan[i].name,
		       plan[i].calls, plan[i].errors, plan[i].ret, (unsigned long long)plan[i].ns);
	printf("}}\n");
	return 0;
}
