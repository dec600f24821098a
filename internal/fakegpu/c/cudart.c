/*
 * libcudart.so.12: the CUDA 12 runtime API over the simulated device in engine.c.
 *
 * Streams keep a virtual "busy until" time on CLOCK_MONOTONIC. Launches and async copies
 * cost a little CPU and push that time forward; synchronizing calls sleep until it. Stream
 * capture records work into a graph instead, and a graph launch replays it. Handles live
 * in fixed pools, so a stale or foreign handle is detected without touching freed memory.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fake_cuda.h"

#define MAX_STREAMS 256
#define MAX_EVENTS 4096
#define MAX_GRAPHS 256
#define MAX_EXECS 256
#define CUDA_STREAM_NON_BLOCKING 0x1u

struct CUstream_st {
	int live;
	unsigned int flags;
	uint64_t busy_until;
	int capturing;
	enum cudaStreamCaptureMode capture_mode;
	int capture_invalid;
	struct CUgraph_st *capture;
};

struct CUevent_st {
	int live;
	uint64_t complete_at; /* 0 until recorded */
};

struct CUgraph_st {
	int live;
	uint32_t node_count;
	uint64_t total_ns;
	struct fg_graph_node *nodes;
};

/* streams[0] is the legacy default stream (NULL, cudaStreamLegacy, cudaStreamPerThread). */
static struct CUstream_st streams[MAX_STREAMS] = {[0] = {.live = 1}};
static struct CUevent_st events[MAX_EVENTS];
static struct CUgraph_st graphs[MAX_GRAPHS];
static struct CUgraphExec_st execs[MAX_EXECS];

static __thread cudaError_t last_error;
static __thread int current_device;

static cudaError_t fail(cudaError_t err)
{
	if (err != cudaSuccess)
		last_error = err;
	return err;
}

/* Every entry point calls this first; besides initializing, it keeps each exported function
 * a non-leaf, so the compiler gives all of them the same frame-pointer prologue. */
static __attribute__((noinline)) void enter(void) { fg_init(); }

static struct CUstream_st *lookup_stream(cudaStream_t s)
{
	if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
		return &streams[0];
	if (s < &streams[1] || s >= &streams[MAX_STREAMS] || !s->live)
		return NULL;
	return s;
}

static struct CUevent_st *lookup_event(cudaEvent_t e)
{
	if (e < &events[0] || e >= &events[MAX_EVENTS] || !e->live)
		return NULL;
	return e;
}

static struct CUgraph_st *lookup_graph(cudaGraph_t g)
{
	if (g < &graphs[0] || g >= &graphs[MAX_GRAPHS] || !g->live)
		return NULL;
	return g;
}

static struct CUgraphExec_st *lookup_exec(cudaGraphExec_t x)
{
	if (x < &execs[0] || x >= &execs[MAX_EXECS] || !x->live)
		return NULL;
	return x;
}

static uint64_t blocking_streams_busy(void)
{
	uint64_t t = 0;
	for (int i = 0; i < MAX_STREAMS; i++)
		if (streams[i].live && !(streams[i].flags & CUDA_STREAM_NON_BLOCKING))
			t = fg_max(t, streams[i].busy_until);
	return t;
}

static uint64_t all_streams_busy(void)
{
	uint64_t t = 0;
	for (int i = 0; i < MAX_STREAMS; i++)
		if (streams[i].live)
			t = fg_max(t, streams[i].busy_until);
	return t;
}

/*
 * Enqueues device work of the given duration and returns when it completes. Legacy
 * default-stream semantics: work on the legacy stream waits for every blocking stream,
 * and work on a blocking stream waits for the legacy stream. Caller holds fg_lock.
 */
static uint64_t enqueue(struct CUstream_st *s, uint64_t ns)
{
	uint64_t start = fg_max(fg_now_ns(), s->busy_until);
	if (s == &streams[0])
		start = fg_max(start, blocking_streams_busy());
	else if (!(s->flags & CUDA_STREAM_NON_BLOCKING))
		start = fg_max(start, streams[0].busy_until);
	s->busy_until = start + ns;
	return s->busy_until;
}

/* Adds a node to the graph a stream is capturing. Caller holds fg_lock. */
static cudaError_t capture_node(struct CUstream_st *s, uint64_t ns, void *dst, const void *src, size_t bytes)
{
	struct CUgraph_st *g = s->capture;
	if (g->node_count == FG_GRAPH_MAX_NODES) {
		s->capture_invalid = 1;
		return cudaErrorMemoryAllocation;
	}
	if ((g->node_count & (g->node_count - 1)) == 0) {
		uint32_t cap = g->node_count ? g->node_count * 2 : 8;
		struct fg_graph_node *nodes = realloc(g->nodes, cap * sizeof(*nodes));
		if (!nodes) {
			s->capture_invalid = 1;
			return cudaErrorMemoryAllocation;
		}
		g->nodes = nodes;
	}
	g->nodes[g->node_count++] = (struct fg_graph_node){.ns = ns, .dst = dst, .src = src, .bytes = bytes};
	g->total_ns += ns;
	return cudaSuccess;
}

static cudaError_t launch(const void *func, dim3 grid, dim3 block, cudaStream_t stream)
{
	if (!func)
		return fail(cudaErrorInvalidDeviceFunction);
	uint64_t threads = (uint64_t)block.x * block.y * block.z;
	if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024)
		return fail(cudaErrorInvalidConfiguration);
	fg_cpu_work(fg_cfg.launch_ns);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	struct CUstream_st *s = lookup_stream(stream);
	uint64_t ns = fg_kernel_ns((uint64_t)grid.x * grid.y * grid.z);
	if (!s)
		err = cudaErrorInvalidResourceHandle;
	else if (s->capturing)
		err = capture_node(s, ns, NULL, NULL, 0);
	else
		enqueue(s, ns);
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                         size_t sharedMem, cudaStream_t stream)
{
	(void)args;
	(void)sharedMem;
	enter();
	return launch(func, gridDim, blockDim, stream);
}

FAKEGPU_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	(void)args;
	enter();
	if (!config)
		return fail(cudaErrorInvalidValue);
	return launch(func, config->gridDim, config->blockDim, config->stream);
}

FAKEGPU_API cudaError_t cudaGetDeviceCount(int *count)
{
	enter();
	if (!count)
		return fail(cudaErrorInvalidValue);
	*count = fg_cfg.devices;
	return fail(fg_cfg.devices ? cudaSuccess : cudaErrorNoDevice);
}

FAKEGPU_API cudaError_t cudaSetDevice(int device)
{
	enter();
	if (device < 0 || device >= fg_cfg.devices)
		return fail(cudaErrorInvalidDevice);
	current_device = device;
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaGetDevice(int *device)
{
	enter();
	if (!device)
		return fail(cudaErrorInvalidValue);
	*device = current_device;
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	enter();
	if (!value || device < 0 || device >= fg_cfg.devices)
		return fail(!value ? cudaErrorInvalidValue : cudaErrorInvalidDevice);
	switch (attr) {
	case cudaDevAttrMultiProcessorCount:
		*value = (int)fg_cfg.sms;
		return cudaSuccess;
	case cudaDevAttrMaxThreadsPerBlock:
		*value = 1024;
		return cudaSuccess;
	default:
		return fail(cudaErrorInvalidValue);
	}
}

FAKEGPU_API cudaError_t cudaGetLastError(void)
{
	enter();
	cudaError_t err = last_error;
	last_error = cudaSuccess;
	return err;
}

FAKEGPU_API const char *cudaGetErrorString(cudaError_t error)
{
	enter();
	switch (error) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInitializationError: return "initialization error";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorInvalidDeviceFunction: return "invalid device function";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
	case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
	case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
	case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
	default: return "unrecognized error code";
	}
}

FAKEGPU_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	enter();
	if (!devPtr)
		return fail(cudaErrorInvalidValue);
	pthread_mutex_lock(&fg_lock);
	int rc = fg_mem_alloc(size, devPtr);
	pthread_mutex_unlock(&fg_lock);
	return fail(rc ? cudaErrorMemoryAllocation : cudaSuccess);
}

/* cudaFree implicitly synchronizes the device, a classic hidden stall in training loops. */
FAKEGPU_API cudaError_t cudaFree(void *devPtr)
{
	enter();
	if (!devPtr)
		return cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	uint64_t idle_at = all_streams_busy();
	pthread_mutex_unlock(&fg_lock);
	fg_wait_until(idle_at);
	pthread_mutex_lock(&fg_lock);
	int rc = fg_mem_free(devPtr);
	pthread_mutex_unlock(&fg_lock);
	return fail(rc ? cudaErrorInvalidValue : cudaSuccess);
}

/* Stream-ordered allocation: the memory is usable at once and freeing does not wait. */
FAKEGPU_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
	enter();
	if (!devPtr)
		return fail(cudaErrorInvalidValue);
	pthread_mutex_lock(&fg_lock);
	cudaError_t err = cudaSuccess;
	if (!lookup_stream(stream))
		err = cudaErrorInvalidResourceHandle;
	else if (fg_mem_alloc(size, devPtr))
		err = cudaErrorMemoryAllocation;
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	cudaError_t err = cudaSuccess;
	if (!lookup_stream(stream))
		err = cudaErrorInvalidResourceHandle;
	else if (devPtr && fg_mem_free(devPtr))
		err = cudaErrorInvalidValue;
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

/* Resolves cudaMemcpyDefault and checks that each device side lies inside one allocation.
 * Caller holds fg_lock. */
static cudaError_t check_copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, int *dir)
{
	if ((unsigned)kind > cudaMemcpyDefault)
		return cudaErrorInvalidValue;
	*dir = kind == cudaMemcpyDefault ? fg_copy_direction(dst, src) : (int)kind;
	if ((*dir == FG_H2D || *dir == FG_D2D) && !fg_mem_contains(dst, count))
		return cudaErrorInvalidValue;
	if ((*dir == FG_D2H || *dir == FG_D2D) && !fg_mem_contains(src, count))
		return cudaErrorInvalidValue;
	return cudaSuccess;
}

/*
 * cudaMemcpy runs on the legacy default stream. Host<->device copies block the caller
 * until the copy is done (after all earlier work, which is why a D2H after a kernel
 * "takes" the kernel's time); device-to-device copies return at once, as CUDA documents.
 */
FAKEGPU_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	enter();
	if (count == 0)
		return cudaSuccess;
	if (!dst || !src)
		return fail(cudaErrorInvalidValue);
	fg_cpu_work(fg_cfg.launch_ns);
	int dir;
	pthread_mutex_lock(&fg_lock);
	cudaError_t err = check_copy(dst, src, count, kind, &dir);
	uint64_t done = 0;
	if (!err && dir != FG_H2H)
		done = enqueue(&streams[0], fg_copy_ns(count, dir));
	pthread_mutex_unlock(&fg_lock);
	if (err)
		return fail(err);
	memcpy(dst, src, count);
	if (dir == FG_H2D || dir == FG_D2H)
		fg_wait_until(done);
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                        cudaStream_t stream)
{
	enter();
	if (count == 0)
		return cudaSuccess;
	if (!dst || !src)
		return fail(cudaErrorInvalidValue);
	fg_cpu_work(fg_cfg.launch_ns);
	int dir;
	int copy_now = 0;
	pthread_mutex_lock(&fg_lock);
	struct CUstream_st *s = lookup_stream(stream);
	cudaError_t err = s ? check_copy(dst, src, count, kind, &dir) : cudaErrorInvalidResourceHandle;
	if (!err && s->capturing) {
		err = capture_node(s, fg_copy_ns(count, dir), dst, src, count);
	} else if (!err) {
		enqueue(s, fg_copy_ns(count, dir));
		copy_now = 1;
	}
	pthread_mutex_unlock(&fg_lock);
	if (copy_now)
		memcpy(dst, src, count);
	return fail(err);
}

/* Public entry points never call each other, so a probe on one counts only its own calls. */
static cudaError_t create_stream(cudaStream_t *pStream, unsigned int flags)
{
	if (!pStream || (flags & ~CUDA_STREAM_NON_BLOCKING))
		return fail(cudaErrorInvalidValue);
	cudaError_t err = cudaErrorMemoryAllocation;
	pthread_mutex_lock(&fg_lock);
	for (int i = 1; i < MAX_STREAMS; i++) {
		if (!streams[i].live) {
			streams[i] = (struct CUstream_st){.live = 1, .flags = flags};
			*pStream = &streams[i];
			err = cudaSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	enter();
	return create_stream(pStream, flags);
}

FAKEGPU_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	enter();
	return create_stream(pStream, 0);
}

static void drop_graph(struct CUgraph_st *g)
{
	free(g->nodes);
	*g = (struct CUgraph_st){0};
}

/* Work already queued still runs after a destroy, as in CUDA; only the handle goes. */
FAKEGPU_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	struct CUstream_st *s = lookup_stream(stream);
	cudaError_t err = cudaSuccess;
	if (!s || s == &streams[0]) {
		err = cudaErrorInvalidResourceHandle;
	} else {
		if (s->capture)
			drop_graph(s->capture);
		s->live = 0;
		s->capture = NULL;
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

/* Host synchronization while a stream captures is illegal and invalidates the capture. */
static cudaError_t sync_target(struct CUstream_st *s, uint64_t *deadline)
{
	if (s->capturing) {
		s->capture_invalid = 1;
		return cudaErrorStreamCaptureUnsupported;
	}
	*deadline = s->busy_until;
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	enter();
	uint64_t deadline = 0;
	pthread_mutex_lock(&fg_lock);
	struct CUstream_st *s = lookup_stream(stream);
	cudaError_t err = s ? sync_target(s, &deadline) : cudaErrorInvalidResourceHandle;
	pthread_mutex_unlock(&fg_lock);
	if (err)
		return fail(err);
	fg_wait_until(deadline);
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaDeviceSynchronize(void)
{
	enter();
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	for (int i = 0; i < MAX_STREAMS; i++) {
		struct CUstream_st *s = &streams[i];
		if (s->live && s->capturing && s->capture_mode == cudaStreamCaptureModeGlobal) {
			s->capture_invalid = 1;
			err = cudaErrorStreamCaptureUnsupported;
		}
	}
	uint64_t deadline = all_streams_busy();
	pthread_mutex_unlock(&fg_lock);
	if (err)
		return fail(err);
	fg_wait_until(deadline);
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	enter();
	if (!event)
		return fail(cudaErrorInvalidValue);
	cudaError_t err = cudaErrorMemoryAllocation;
	pthread_mutex_lock(&fg_lock);
	for (int i = 0; i < MAX_EVENTS; i++) {
		if (!events[i].live) {
			events[i] = (struct CUevent_st){.live = 1};
			*event = &events[i];
			err = cudaSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

/* An event completes when all work queued on its stream before the record completes. */
FAKEGPU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	enter();
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	struct CUevent_st *e = lookup_event(event);
	struct CUstream_st *s = lookup_stream(stream);
	if (!e || !s)
		err = cudaErrorInvalidResourceHandle;
	else if (!s->capturing)
		e->complete_at = fg_max(s->busy_until, fg_now_ns());
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	struct CUevent_st *e = lookup_event(event);
	uint64_t deadline = e ? e->complete_at : 0;
	pthread_mutex_unlock(&fg_lock);
	if (!e)
		return fail(cudaErrorInvalidResourceHandle);
	fg_wait_until(deadline);
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	enter();
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	struct CUevent_st *e = lookup_event(event);
	struct CUstream_st *s = lookup_stream(stream);
	if (!e || !s || flags > 1)
		err = !e || !s ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue;
	else
		s->busy_until = fg_max(s->busy_until, e->complete_at);
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	struct CUevent_st *e = lookup_event(event);
	if (e)
		e->live = 0;
	pthread_mutex_unlock(&fg_lock);
	return fail(e ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

/* The legacy stream cannot be captured. */
FAKEGPU_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	enter();
	if ((unsigned)mode > cudaStreamCaptureModeRelaxed)
		return fail(cudaErrorInvalidValue);
	cudaError_t err = cudaErrorMemoryAllocation;
	pthread_mutex_lock(&fg_lock);
	struct CUstream_st *s = lookup_stream(stream);
	if (!s || s == &streams[0]) {
		err = s ? cudaErrorStreamCaptureUnsupported : cudaErrorInvalidResourceHandle;
	} else if (s->capturing) {
		err = cudaErrorIllegalState;
	} else {
		for (int i = 0; i < MAX_GRAPHS; i++) {
			if (!graphs[i].live) {
				graphs[i] = (struct CUgraph_st){.live = 1};
				s->capturing = 1;
				s->capture_mode = mode;
				s->capture_invalid = 0;
				s->capture = &graphs[i];
				err = cudaSuccess;
				break;
			}
		}
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	enter();
	if (!pGraph)
		return fail(cudaErrorInvalidValue);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	struct CUstream_st *s = lookup_stream(stream);
	if (!s) {
		err = cudaErrorInvalidResourceHandle;
	} else if (!s->capturing) {
		err = cudaErrorStreamCaptureUnmatched;
	} else {
		*pGraph = NULL;
		if (s->capture_invalid) {
			drop_graph(s->capture);
			err = cudaErrorStreamCaptureInvalidated;
		} else {
			*pGraph = s->capture;
		}
		s->capturing = 0;
		s->capture = NULL;
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                             unsigned long long flags)
{
	(void)flags;
	enter();
	if (!pGraphExec)
		return fail(cudaErrorInvalidValue);
	cudaError_t err = cudaErrorMemoryAllocation;
	pthread_mutex_lock(&fg_lock);
	struct CUgraph_st *g = lookup_graph(graph);
	if (!g)
		err = cudaErrorInvalidValue;
	for (int i = 0; g && i < MAX_EXECS; i++) {
		if (execs[i].live)
			continue;
		struct fg_graph_node *nodes = malloc((g->node_count ? g->node_count : 1) * sizeof(*nodes));
		if (!nodes)
			break;
		if (g->node_count)
			memcpy(nodes, g->nodes, g->node_count * sizeof(*nodes));
		execs[i] = (struct CUgraphExec_st){.magic = FG_EXEC_MAGIC,
		                                   .live = 1,
		                                   .node_count = g->node_count,
		                                   .total_ns = g->total_ns,
		                                   .nodes = nodes};
		*pGraphExec = &execs[i];
		err = cudaSuccess;
		break;
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

/* One launch overhead for the whole graph: the reason graphs exist. */
FAKEGPU_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	enter();
	fg_cpu_work(fg_cfg.launch_ns);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	struct CUgraphExec_st *x = lookup_exec(graphExec);
	struct CUstream_st *s = lookup_stream(stream);
	if (!x || !s)
		err = cudaErrorInvalidResourceHandle;
	else if (s->capturing)
		err = capture_node(s, x->total_ns, NULL, NULL, 0);
	else
		enqueue(s, fg_exec_replay(x));
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	struct CUgraph_st *g = lookup_graph(graph);
	if (g)
		drop_graph(g);
	pthread_mutex_unlock(&fg_lock);
	return fail(g ? cudaSuccess : cudaErrorInvalidValue);
}

FAKEGPU_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	enter();
	pthread_mutex_lock(&fg_lock);
	struct CUgraphExec_st *x = lookup_exec(graphExec);
	if (x) {
		free(x->nodes);
		*x = (struct CUgraphExec_st){0};
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(x ? cudaSuccess : cudaErrorInvalidResourceHandle);
}
