/*
 * libcudart.so.12: the CUDA 12 runtime API over the simulated device in engine.c.
 *
 * Streams keep a virtual "done at" time on CLOCK_MONOTONIC. Launches and async copies
 * cost a little CPU and push that time forward; synchronizing calls sleep until it. Stream
 * capture records work into a graph instead, and a graph launch replays it. Handles live
 * in fixed pools, so a stale or foreign handle is detected without touching freed memory.
 *
 * NCCL collectives (fake_hooks.h) make a stream's time depend on other rank processes:
 * until every rank's stream has reached the collective, its completion is unknown, so a
 * time behind one is kept as max(completion(dep) + dep_ns, at). Enqueuing more work only
 * grows dep_ns and at; a synchronizing call asks libnccl to resolve the collective (which
 * waits for the peers to enqueue theirs) and then sleeps until the resolved time. So, as
 * on a real GPU, ncclAllReduce returns at once and the host sees a late peer only in its
 * next cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, blocking copy
 * or cudaFree.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fake_cuda.h"
#include "fake_hooks.h"

#define MAX_STREAMS 256
#define MAX_EVENTS 4096
#define MAX_GRAPHS 256
#define MAX_EXECS 256
#define CUDA_STREAM_NON_BLOCKING 0x1u

/* A point on the device timeline: `at`, or max(completion(dep) + dep_ns, at) while dep
 * names a collective whose completion is not known yet. */
struct fg_when {
	uint64_t dep, dep_ns, at;
};

struct CUstream_st {
	int live;
	unsigned int flags;
	struct fg_when done; /* when all work queued so far is done */
	int capturing;
	enum cudaStreamCaptureMode capture_mode;
	int capture_invalid;
	struct CUgraph_st *capture;
};

struct CUevent_st {
	int live;
	struct fg_when complete; /* at 0 until recorded */
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
static int events_used; /* high-water mark: events[events_used..] were never live */
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

/* ---- device times that may wait on collectives ---- */

static fakegpu_resolver resolver;

/* acc = max(acc, x). Returns 0, or a dep to resolve first when acc and x wait on two
 * different collectives (rare: a max of the two cannot be kept symbolically). */
static uint64_t when_max(struct fg_when *acc, const struct fg_when *x)
{
	if (x->dep && acc->dep && x->dep != acc->dep)
		return acc->dep;
	if (x->dep && !acc->dep) {
		acc->dep = x->dep;
		acc->dep_ns = x->dep_ns;
	} else if (x->dep) {
		acc->dep_ns = fg_max(acc->dep_ns, x->dep_ns);
	}
	acc->at = fg_max(acc->at, x->at);
	return 0;
}

static void settle(struct fg_when *w, uint64_t dep, uint64_t complete_at)
{
	if (w->dep == dep) {
		w->at = fg_max(w->at, complete_at + w->dep_ns);
		w->dep = w->dep_ns = 0;
	}
}

FAKEGPU_API void fakegpu_collective_complete(uint64_t dep, uint64_t complete_at)
{
	pthread_mutex_lock(&fg_lock);
	for (int i = 0; i < MAX_STREAMS; i++)
		settle(&streams[i].done, dep, complete_at);
	for (int i = 0; i < events_used; i++)
		settle(&events[i].complete, dep, complete_at);
	pthread_mutex_unlock(&fg_lock);
}

FAKEGPU_API void fakegpu_set_resolver(fakegpu_resolver resolve)
{
	pthread_mutex_lock(&fg_lock);
	resolver = resolve;
	pthread_mutex_unlock(&fg_lock);
}

/* Waits until the completion of dep is known. Called without fg_lock: the resolver waits
 * for other processes and reports back through fakegpu_collective_complete. */
static void resolve(uint64_t dep)
{
	pthread_mutex_lock(&fg_lock);
	fakegpu_resolver fn = resolver;
	pthread_mutex_unlock(&fg_lock);
	if (!fn || fn(dep) != 0)
		fakegpu_collective_complete(dep, fg_now_ns());
}

/* Sleeps until the device reaches the time `read` takes under fg_lock, resolving the
 * collectives it waits on first. Returns read's error, if any. */
static cudaError_t wait_for(cudaError_t (*read)(void *arg, struct fg_when *w), void *arg)
{
	for (;;) {
		struct fg_when w = {0};
		pthread_mutex_lock(&fg_lock);
		cudaError_t err = read(arg, &w);
		pthread_mutex_unlock(&fg_lock);
		if (err)
			return err;
		if (!w.dep) {
			fg_wait_until(w.at);
			return cudaSuccess;
		}
		resolve(w.dep);
	}
}

/* acc = max(acc, every live stream, or every blocking one). Returns 0 or a dep to
 * resolve. Caller holds fg_lock. */
static uint64_t streams_done(struct fg_when *acc, int blocking_only)
{
	for (int i = 0; i < MAX_STREAMS; i++) {
		const struct CUstream_st *s = &streams[i];
		if (!s->live || (blocking_only && (s->flags & CUDA_STREAM_NON_BLOCKING)))
			continue;
		uint64_t conflict = when_max(acc, &s->done);
		if (conflict)
			return conflict;
	}
	return 0;
}

/* Where new work on s may start: after the stream's own work, and with legacy
 * default-stream semantics: work on the legacy stream waits for every blocking stream,
 * and work on a blocking stream waits for the legacy stream. Returns 0 or a dep to
 * resolve. Caller holds fg_lock. */
static uint64_t start_of(struct CUstream_st *s, struct fg_when *start)
{
	*start = s->done;
	start->at = fg_max(start->at, fg_now_ns());
	if (s == &streams[0])
		return streams_done(start, 1);
	if (!(s->flags & CUDA_STREAM_NON_BLOCKING))
		return when_max(start, &streams[0].done);
	return 0;
}

/* Enqueues device work of the given duration. Returns 0, or a dep the caller must
 * resolve (after dropping fg_lock) before trying again. Caller holds fg_lock. */
static uint64_t enqueue(struct CUstream_st *s, uint64_t ns)
{
	struct fg_when start;
	uint64_t conflict = start_of(s, &start);
	if (conflict)
		return conflict;
	s->done = (struct fg_when){.dep = start.dep, .dep_ns = start.dep ? start.dep_ns + ns : 0, .at = start.at + ns};
	return 0;
}

FAKEGPU_API int fakegpu_stream_collective(cudaStream_t stream, uint64_t dep, uint64_t prev,
                                          struct fakegpu_arrival *out)
{
	fg_init();
	fg_cpu_work(fg_cfg.launch_ns);
	for (;;) {
		cudaError_t err = cudaSuccess;
		uint64_t conflict = 0;
		struct fg_when start;
		pthread_mutex_lock(&fg_lock);
		struct CUstream_st *s = lookup_stream(stream);
		if (!s) {
			err = cudaErrorInvalidResourceHandle;
		} else if (s->capturing) {
			/* the fake cannot replay a collective from a graph */
			s->capture_invalid = 1;
			err = cudaErrorStreamCaptureUnsupported;
		} else if (!(conflict = start_of(s, &start)) && start.dep && start.dep != prev) {
			conflict = start.dep;
		} else if (!conflict) {
			*out = (struct fakegpu_arrival){.after_prev = start.dep != 0, .dep_ns = start.dep_ns, .at = start.at};
			s->done = (struct fg_when){.dep = dep};
		}
		pthread_mutex_unlock(&fg_lock);
		if (!conflict)
			return fail(err);
		resolve(conflict);
	}
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
	uint64_t ns = fg_kernel_ns((uint64_t)grid.x * grid.y * grid.z);
	for (;;) {
		cudaError_t err = cudaSuccess;
		uint64_t conflict = 0;
		pthread_mutex_lock(&fg_lock);
		struct CUstream_st *s = lookup_stream(stream);
		if (!s)
			err = cudaErrorInvalidResourceHandle;
		else if (s->capturing)
			err = capture_node(s, ns, NULL, NULL, 0);
		else
			conflict = enqueue(s, ns);
		pthread_mutex_unlock(&fg_lock);
		if (!conflict)
			return fail(err);
		resolve(conflict);
	}
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
	fg_board_select(device);
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

/* When every stream is done, for wait_for. */
static cudaError_t read_device_done(void *arg, struct fg_when *w)
{
	(void)arg;
	uint64_t conflict = streams_done(w, 0);
	if (conflict)
		*w = (struct fg_when){.dep = conflict};
	return cudaSuccess;
}

/* cudaFree implicitly synchronizes the device, a classic hidden stall in training loops. */
FAKEGPU_API cudaError_t cudaFree(void *devPtr)
{
	enter();
	if (!devPtr)
		return cudaSuccess;
	wait_for(read_device_done, NULL);
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

/* When the work queued on a stream is done, for wait_for. */
static cudaError_t read_stream_done(void *arg, struct fg_when *w)
{
	*w = ((struct CUstream_st *)arg)->done;
	return cudaSuccess;
}

/*
 * cudaMemcpy runs on the legacy default stream. Host<->device copies block the caller
 * until the copy is done (after all earlier work, which is why a D2H after a kernel
 * "takes" the kernel's time); device-to-device copies return at once, as CUDA documents.
 */
/* copy_blocking is cudaMemcpy's work, apart so that another library built from this
 * file (libamdhip64's hipMemcpyHtoD, hip.c) can do it without calling, and so probing,
 * an exported function. */
static cudaError_t copy_blocking(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	if (count == 0)
		return cudaSuccess;
	if (!dst || !src)
		return fail(cudaErrorInvalidValue);
	fg_cpu_work(fg_cfg.launch_ns);
	int dir;
	cudaError_t err;
	for (;;) {
		uint64_t conflict = 0;
		pthread_mutex_lock(&fg_lock);
		err = check_copy(dst, src, count, kind, &dir);
		if (!err && dir != FG_H2H)
			conflict = enqueue(&streams[0], fg_copy_ns(count, dir));
		pthread_mutex_unlock(&fg_lock);
		if (!conflict)
			break;
		resolve(conflict);
	}
	if (err)
		return fail(err);
	/* A blocking copy waits for the collectives before it, whose results land when they
	 * are resolved, so the bytes move only after that. */
	if (dir == FG_H2D || dir == FG_D2H)
		wait_for(read_stream_done, &streams[0]);
	memcpy(dst, src, count);
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	enter();
	return copy_blocking(dst, src, count, kind);
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
	cudaError_t err;
	for (;;) {
		uint64_t conflict = 0;
		pthread_mutex_lock(&fg_lock);
		struct CUstream_st *s = lookup_stream(stream);
		err = s ? check_copy(dst, src, count, kind, &dir) : cudaErrorInvalidResourceHandle;
		if (!err && s->capturing)
			err = capture_node(s, fg_copy_ns(count, dir), dst, src, count);
		else if (!err && !(conflict = enqueue(s, fg_copy_ns(count, dir))))
			copy_now = 1;
		pthread_mutex_unlock(&fg_lock);
		if (!conflict)
			break;
		resolve(conflict);
	}
	/* The bytes move at enqueue (there is no device to move them later): a copy queued
	 * behind a collective that is still in flight copies what was there before it. */
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
static cudaError_t read_sync_target(void *arg, struct fg_when *w)
{
	struct CUstream_st *s = lookup_stream(arg);
	if (!s)
		return cudaErrorInvalidResourceHandle;
	if (s->capturing) {
		s->capture_invalid = 1;
		return cudaErrorStreamCaptureUnsupported;
	}
	*w = s->done;
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	enter();
	return fail(wait_for(read_sync_target, stream));
}

static cudaError_t read_device_sync_target(void *arg, struct fg_when *w)
{
	cudaError_t err = cudaSuccess;
	for (int i = 0; i < MAX_STREAMS; i++) {
		struct CUstream_st *s = &streams[i];
		if (s->live && s->capturing && s->capture_mode == cudaStreamCaptureModeGlobal) {
			s->capture_invalid = 1;
			err = cudaErrorStreamCaptureUnsupported;
		}
	}
	return err ? err : read_device_done(arg, w);
}

FAKEGPU_API cudaError_t cudaDeviceSynchronize(void)
{
	enter();
	return fail(wait_for(read_device_sync_target, NULL));
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
			events_used = i + 1 > events_used ? i + 1 : events_used;
			*event = &events[i];
			err = cudaSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

/* An event completes when all work queued on its stream before the record completes. */
/* record_event is cudaEventRecord's work, apart for hip.c as copy_blocking is. */
static cudaError_t record_event(cudaEvent_t event, cudaStream_t stream)
{
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fg_lock);
	struct CUevent_st *e = lookup_event(event);
	struct CUstream_st *s = lookup_stream(stream);
	if (!e || !s)
		err = cudaErrorInvalidResourceHandle;
	else if (!s->capturing) {
		e->complete = s->done;
		e->complete.at = fg_max(e->complete.at, fg_now_ns());
	}
	pthread_mutex_unlock(&fg_lock);
	return fail(err);
}

FAKEGPU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	enter();
	return record_event(event, stream);
}

static cudaError_t read_event(void *arg, struct fg_when *w)
{
	struct CUevent_st *e = lookup_event(arg);
	if (!e)
		return cudaErrorInvalidResourceHandle;
	*w = e->complete;
	return cudaSuccess;
}

FAKEGPU_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	enter();
	return fail(wait_for(read_event, event));
}

/* Polls an event without blocking, as ProcessGroupNCCL's watchdog thread does: not
 * ready (not an error) while its work waits for a collective some rank has not reached,
 * or has not finished on the device. */
FAKEGPU_API cudaError_t cudaEventQuery(cudaEvent_t event)
{
	enter();
	struct fg_when w = {0};
	pthread_mutex_lock(&fg_lock);
	cudaError_t err = read_event(event, &w);
	pthread_mutex_unlock(&fg_lock);
	if (err)
		return fail(err);
	return w.dep || fg_now_ns() < w.at ? cudaErrorNotReady : cudaSuccess;
}

FAKEGPU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	enter();
	for (;;) {
		cudaError_t err = cudaSuccess;
		uint64_t conflict = 0;
		pthread_mutex_lock(&fg_lock);
		struct CUevent_st *e = lookup_event(event);
		struct CUstream_st *s = lookup_stream(stream);
		if (!e || !s || flags > 1) {
			err = !e || !s ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue;
		} else {
			struct fg_when done = s->done;
			if (!(conflict = when_max(&done, &e->complete)))
				s->done = done;
		}
		pthread_mutex_unlock(&fg_lock);
		if (!conflict)
			return fail(err);
		resolve(conflict);
	}
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
	for (;;) {
		cudaError_t err = cudaSuccess;
		uint64_t conflict = 0;
		pthread_mutex_lock(&fg_lock);
		struct CUgraphExec_st *x = lookup_exec(graphExec);
		struct CUstream_st *s = lookup_stream(stream);
		if (!x || !s)
			err = cudaErrorInvalidResourceHandle;
		else if (s->capturing)
			err = capture_node(s, x->total_ns, NULL, NULL, 0);
		else if (!(conflict = enqueue(s, x->total_ns)))
			fg_exec_replay(x);
		pthread_mutex_unlock(&fg_lock);
		if (!conflict)
			return fail(err);
		resolve(conflict);
	}
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
