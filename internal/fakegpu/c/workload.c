/*
 * fakegpu-workload: a training/inference-style loop over the CUDA runtime and driver APIs,
 * with knobs for the host-side trouble Fathom diagnoses (CPU contention on the dispatcher,
 * fork storms, I/O bursts, long stalls). It times every API call it makes and prints one
 * JSON line with exact counts, bytes and summed durations, so tests can hold probes to it.
 *
 * Every per-run total (--launches, --h2d, ...) is spread evenly over --steps: item j of N
 * runs in step floor(j * steps / N), so the first item of anything runs in step 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fake_cuda.h"

/* ---- options ---- */


struct options {
	long steps, step_gap_us, grid_blocks, block_threads;
	long launches, launches_ex, driver_launches, driver_launches_ptsz, driver_launches_ex;
	long h2d, h2d_async, d2h, d2h_async, d2d, d2d_async, h2h;
	long h2d_bytes, d2h_bytes, d2d_bytes, h2h_bytes, default_kind;
	long driver_h2d, driver_h2d_async, driver_d2h, driver_d2h_async, driver_d2d, driver_d2d_async;
	long driver_memcpy, driver_memcpy_async;
	long allocs, async_allocs, driver_allocs, alloc_bytes;
	long syncs, stream_waits, driver_syncs;
	long graph_captures, graph_kernels, graph_replays, driver_graph_launches;
	double kernel_us, launch_us, gbps;
	long contention_threads, pin_cpu, dispatcher_thread;
	long lock_holders, lock_hold_us;
	const char *lock_name;
	long forks, fork_work_us, fork_cuda_copies;
	long io_burst_mb, io_every_ms, io_inline;
	const char *io_dir;
	long hold_ms, wait_timeout_ms, wait_signal;
	const char *wait_file, *ready_file;
	long stall_ms;
	const char *stall_in;
	const char *tcp_send;
	long tcp_bytes;
	long help;
};

static struct options opt = {
	.steps = 10, .grid_blocks = 128, .block_threads = 256,
	.h2d_bytes = 1 << 20, .d2h_bytes = 64 << 10, .d2d_bytes = 1 << 20, .h2h_bytes = 4 << 10,
	.alloc_bytes = 1 << 20, .graph_kernels = 8,
	.kernel_us = -1, .launch_us = -1, .gbps = -1,
	.pin_cpu = -1, .fork_work_us = 2000, .io_every_ms = 100,
	.wait_timeout_ms = 120000, .stall_in = "stream-sync", .tcp_bytes = 4096, .lock_name = "tokenizer",
};

#define L(field) OPT_LONG, &opt.field
#define D(field) OPT_DOUBLE, &opt.field
#define S(field) OPT_STRING, &opt.field
#define F(field) OPT_FLAG, &opt.field
static const struct flag flags[] = {
	{"steps", L(steps), "loop iterations; every total below is spread evenly over them"},
	{"step-gap-us", L(step_gap_us), "host-side sleep at the end of each step (data loading)"},
	{"grid-blocks", L(grid_blocks), "blocks per kernel launch (one wave up to the SM count)"},
	{"block-threads", L(block_threads), "threads per block (1..1024)"},
	{"launches", L(launches), "cudaLaunchKernel calls on the compute stream"},
	{"launches-ex", L(launches_ex), "cudaLaunchKernelExC calls"},
	{"driver-launches", L(driver_launches), "cuLaunchKernel calls (as cuBLAS/Triton issue them)"},
	{"driver-launches-ptsz", L(driver_launches_ptsz), "cuLaunchKernel_ptsz calls"},
	{"driver-launches-ex", L(driver_launches_ex), "cuLaunchKernelEx calls"},
	{"h2d", L(h2d), "cudaMemcpy host-to-device copies of --h2d-bytes"},
	{"h2d-async", L(h2d_async), "cudaMemcpyAsync host-to-device copies on the copy stream"},
	{"d2h", L(d2h), "cudaMemcpy device-to-host copies of --d2h-bytes"},
	{"d2h-async", L(d2h_async), "cudaMemcpyAsync device-to-host copies on the compute stream"},
	{"d2d", L(d2d), "cudaMemcpy device-to-device copies of --d2d-bytes"},
	{"d2d-async", L(d2d_async), "cudaMemcpyAsync device-to-device copies on the compute stream"},
	{"h2h", L(h2h), "cudaMemcpy host-to-host copies of --h2h-bytes"},
	{"h2d-bytes", L(h2d_bytes), "bytes per host-to-device copy (runtime and driver)"},
	{"d2h-bytes", L(d2h_bytes), "bytes per device-to-host copy"},
	{"d2d-bytes", L(d2d_bytes), "bytes per device-to-device copy"},
	{"h2h-bytes", L(h2h_bytes), "bytes per host-to-host copy"},
	{"default-kind", F(default_kind), "pass cudaMemcpyDefault (4) and let the library infer directions"},
	{"driver-h2d", L(driver_h2d), "cuMemcpyHtoD_v2 copies"},
	{"driver-h2d-async", L(driver_h2d_async), "cuMemcpyHtoDAsync_v2 copies"},
	{"driver-d2h", L(driver_d2h), "cuMemcpyDtoH_v2 copies"},
	{"driver-d2h-async", L(driver_d2h_async), "cuMemcpyDtoHAsync_v2 copies"},
	{"driver-d2d", L(driver_d2d), "cuMemcpyDtoD_v2 copies"},
	{"driver-d2d-async", L(driver_d2d_async), "cuMemcpyDtoDAsync_v2 copies"},
	{"driver-memcpy", L(driver_memcpy), "cuMemcpy copies (host to device, direction inferred)"},
	{"driver-memcpy-async", L(driver_memcpy_async), "cuMemcpyAsync copies (host to device)"},
	{"allocs", L(allocs), "cudaMalloc+cudaFree pairs of --alloc-bytes (cudaFree syncs the device)"},
	{"async-allocs", L(async_allocs), "cudaMallocAsync+cudaFreeAsync pairs"},
	{"driver-allocs", L(driver_allocs), "cuMemAlloc_v2+cuMemFree_v2 pairs"},
	{"alloc-bytes", L(alloc_bytes), "bytes per allocation above"},
	{"syncs", L(syncs), "host syncs, rotating cudaStreamSynchronize, cudaDeviceSynchronize, "
	                    "cudaEventRecord+cudaEventSynchronize"},
	{"stream-waits", L(stream_waits), "cudaEventRecord on the copy stream + cudaStreamWaitEvent on compute"},
	{"driver-syncs", L(driver_syncs), "driver syncs, alternating cuStreamSynchronize, cuCtxSynchronize"},
	{"graph-captures", L(graph_captures), "stream captures (BeginCapture, kernels, EndCapture, Instantiate)"},
	{"graph-kernels", L(graph_kernels), "cudaLaunchKernel calls captured into each graph"},
	{"graph-replays", L(graph_replays), "cudaGraphLaunch calls of the latest graph"},
	{"driver-graph-launches", L(driver_graph_launches), "cuGraphLaunch calls of the latest graph"},
	{"kernel-us", D(kernel_us), "device time of one kernel wave (sets FAKEGPU_KERNEL_US)"},
	{"launch-us", D(launch_us), "CPU cost of one launch or copy call (sets FAKEGPU_LAUNCH_US)"},
	{"gbps", D(gbps), "host<->device bandwidth in GB/s (sets FAKEGPU_GBPS)"},
	{"contention-threads", L(contention_threads), "busy-looping threads that compete with the dispatcher"},
	{"lock-holders", L(lock_holders),
	 "threads that take a process-wide mutex the dispatcher also takes around each step's calls, "
	 "and hold it --lock-hold-us at a time (a framework lock, the GIL)"},
	{"lock-hold-us", L(lock_hold_us), "how long a lock holder keeps the mutex, spinning on its CPU"},
	{"lock-name", S(lock_name), "thread name (comm) of the lock holders, at most 15 bytes"},
	{"pin-cpu", L(pin_cpu), "pin the dispatcher and the contention threads to this CPU (-1: no pinning)"},
	{"dispatcher-thread", F(dispatcher_thread), "run the loop on a new thread, so its tid differs from the pid"},
	{"forks", L(forks), "short-lived child processes forked from the dispatcher (DataLoader-like)"},
	{"fork-work-us", L(fork_work_us), "CPU time each child burns before exiting"},
	{"fork-cuda-copies", L(fork_cuda_copies), "cudaMemcpy H2D calls each child makes (not in the report)"},
	{"io-burst-mb", L(io_burst_mb), "MiB written and fsynced per I/O burst (0: no I/O)"},
	{"io-every-ms", L(io_every_ms), "period of the I/O bursts"},
	{"io-dir", S(io_dir), "directory of the I/O burst file (default $TMPDIR or /tmp)"},
	{"io-inline", F(io_inline), "write the bursts from the dispatcher between steps, not a thread"},
	{"hold-ms", L(hold_ms), "sleep after the start gate, before the first CUDA call"},
	{"wait-file", S(wait_file), "start gate: wait until this path exists before any CUDA call"},
	{"wait-signal", F(wait_signal), "start gate: wait for SIGUSR1 before any CUDA call"},
	{"wait-timeout-ms", L(wait_timeout_ms), "give up on the gate after this long (exit status 3)"},
	{"ready-file", S(ready_file), "written ({\"pid\":..,\"tid\":..}) when the gate is reached"},
	{"stall-ms", L(stall_ms), "after the loop, launch one kernel this long and block on it"},
	{"stall-in", S(stall_in), "where the stall blocks: stream-sync, device-sync, event-sync, memcpy"},
	{"tcp-send", S(tcp_send), "IPv4 HOST:PORT: after the gate, connect and send --tcp-bytes each step (as NCCL's socket transport sends a rank's share)"},
	{"tcp-bytes", L(tcp_bytes), "bytes sent per step with --tcp-send"},
	{"help", F(help), "print this help"},
};

#define NFLAGS (sizeof(flags) / sizeof(flags[0]))
#define die(status, ...) cli_die("fakegpu-workload", status, __VA_ARGS__)

static void usage(FILE *f)
{
	fprintf(f, "usage: fakegpu-workload [--flag value]...\n\n"
	           "Runs a CUDA-style loop against the fake libcudart/libcuda and prints one JSON report\n"
	           "line on stdout. Setup and teardown always add: cudaGetDeviceCount, cudaSetDevice,\n"
	           "cudaDeviceGetAttribute, 3 cudaStreamCreate/Destroy, 2 cudaEventCreate/Destroy,\n"
	           "4 cudaMalloc/cudaFree, one final cudaDeviceSynchronize and cudaGetLastError; when any\n"
	           "driver flag is set also cuInit, 4 cuMemAlloc_v2/cuMemFree_v2, one cuCtxSynchronize.\n\n");
	cli_usage(f, flags, NFLAGS);
	fprintf(f, "\nEnvironment: FAKEGPU_KERNEL_US, FAKEGPU_LAUNCH_US, FAKEGPU_GBPS, FAKEGPU_D2D_GBPS,\n"
	           "FAKEGPU_SMS, FAKEGPU_SYNC (block|spin|yield), FAKEGPU_MEM_MB configure the libraries;\n"
	           "RANK, LOCAL_RANK, WORLD_SIZE are echoed (LOCAL_RANK picks the device).\n"
	           "Exit status: 0 ok, 1 a CUDA call failed, 2 bad flags, 3 start gate timed out.\n");
}

static void validate_flags(void)
{
	const long *counts[] = {&opt.launches, &opt.launches_ex, &opt.driver_launches, &opt.driver_launches_ptsz,
	                        &opt.driver_launches_ex, &opt.h2d, &opt.h2d_async, &opt.d2h, &opt.d2h_async,
	                        &opt.d2d, &opt.d2d_async, &opt.h2h, &opt.driver_h2d, &opt.driver_h2d_async,
	                        &opt.driver_d2h, &opt.driver_d2h_async, &opt.driver_d2d, &opt.driver_d2d_async,
	                        &opt.driver_memcpy, &opt.driver_memcpy_async, &opt.allocs, &opt.async_allocs,
	                        &opt.driver_allocs, &opt.syncs, &opt.stream_waits, &opt.driver_syncs,
	                        &opt.graph_captures, &opt.graph_replays, &opt.driver_graph_launches,
	                        &opt.contention_threads, &opt.forks, &opt.fork_cuda_copies, &opt.io_burst_mb,
	                        &opt.hold_ms, &opt.stall_ms, &opt.step_gap_us, &opt.fork_work_us,
	                        &opt.lock_holders, &opt.lock_hold_us};
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		if (*counts[i] < 0)
			die(2, "counts, sizes and times must not be negative");
	if (opt.steps < 1)
		die(2, "--steps must be at least 1");
	if (opt.block_threads < 1 || opt.block_threads > 1024 || opt.grid_blocks < 1 || opt.grid_blocks > INT_MAX)
		die(2, "--block-threads must be 1..1024 and --grid-blocks 1..%d", INT_MAX);
	if (opt.h2d_bytes < 1 || opt.d2h_bytes < 1 || opt.d2d_bytes < 1 || opt.h2h_bytes < 1 || opt.alloc_bytes < 1)
		die(2, "copy and allocation sizes must be at least 1 byte");
	if (opt.graph_kernels < 1 || opt.graph_kernels > 4096)
		die(2, "--graph-kernels must be 1..4096");
	if ((opt.graph_replays || opt.driver_graph_launches) && !opt.graph_captures)
		die(2, "graph launches need --graph-captures >= 1");
	if (opt.contention_threads > 64 || opt.forks > 100000 || opt.io_burst_mb > 4096)
		die(2, "--contention-threads <= 64, --forks <= 100000, --io-burst-mb <= 4096");
	if (opt.lock_holders > 64 || strlen(opt.lock_name) > 15)
		die(2, "--lock-holders <= 64 and --lock-name at most 15 bytes");
	if (opt.io_burst_mb && opt.io_every_ms < 1)
		die(2, "--io-every-ms must be at least 1");
	if (strcmp(opt.stall_in, "stream-sync") && strcmp(opt.stall_in, "device-sync") &&
	    strcmp(opt.stall_in, "event-sync") && strcmp(opt.stall_in, "memcpy"))
		die(2, "--stall-in must be stream-sync, device-sync, event-sync or memcpy");
	if (opt.wait_file && opt.wait_signal)
		die(2, "use one start gate: --wait-file or --wait-signal");
}

static int driver_used(void)
{
	return opt.driver_launches || opt.driver_launches_ptsz || opt.driver_launches_ex || opt.driver_h2d ||
	       opt.driver_h2d_async || opt.driver_d2h || opt.driver_d2h_async || opt.driver_d2d ||
	       opt.driver_d2d_async || opt.driver_memcpy || opt.driver_memcpy_async || opt.driver_allocs ||
	       opt.driver_syncs || opt.driver_graph_launches;
}

/* ---- timing and accounting ---- */

#define APIS(X)                                                                                            \
	X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaDeviceGetAttribute) X(cudaGetLastError)                \
	X(cudaStreamCreate) X(cudaStreamDestroy) X(cudaEventCreate) X(cudaEventDestroy) X(cudaEventRecord)  \
	X(cudaEventSynchronize) X(cudaStreamSynchronize) X(cudaDeviceSynchronize) X(cudaStreamWaitEvent)    \
	X(cudaLaunchKernel) X(cudaLaunchKernelExC) X(cudaMalloc) X(cudaFree) X(cudaMallocAsync)             \
	X(cudaFreeAsync) X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaStreamBeginCapture) X(cudaStreamEndCapture) \
	X(cudaGraphInstantiate) X(cudaGraphLaunch) X(cudaGraphDestroy) X(cudaGraphExecDestroy) X(cuInit)    \
	X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuMemAlloc_v2) X(cuMemFree_v2)       \
	X(cuMemcpy) X(cuMemcpyAsync) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2)                \
	X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoDAsync_v2) X(cuCtxSynchronize)         \
	X(cuStreamSynchronize) X(cuGraphLaunch)

#define AS_ENUM(name) API_##name,
#define AS_NAME(name) #name,
enum api { APIS(AS_ENUM) API_COUNT };
static const char *const api_names[] = {APIS(AS_NAME)};

struct api_stats {
	uint64_t calls, total_ns, max_ns;
};
static struct api_stats stats[API_COUNT];

static const char *const dir_names[] = {"h2h", "h2d", "d2h", "d2d"};
static uint64_t runtime_bytes[4], driver_bytes[4];
static uint64_t graph_captured_kernels, forks_done, fork_failures;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void check(enum api api, int rc)
{
	if (rc != 0)
		die(1, "%s failed with error %d", api_names[api], rc);
}

/* Times one API call, as a user-space tracer would see it from entry to return. Only the
 * dispatcher thread calls CUDA in this process, so the counters need no lock. */
#define CALL(name, ...)                                                                 \
	do {                                                                            \
		uint64_t t0_ = now_ns();                                                \
		int rc_ = (int)name(__VA_ARGS__);                                        \
		uint64_t dt_ = now_ns() - t0_;                                           \
		struct api_stats *s_ = &stats[API_##name];                               \
		s_->calls++;                                                            \
		s_->total_ns += dt_;                                                     \
		if (dt_ > s_->max_ns)                                                    \
			s_->max_ns = dt_;                                                \
		check(API_##name, rc_);                                                 \
	} while (0)

/* How many of `total` items fall in `step`: item j runs in step floor(j*steps/total). */
static long share(long total, long step)
{
	long steps = opt.steps;
	/* count of j in [0,total) with j*steps >= step*total, i.e. j >= ceil(step*total/steps) */
	long lo = (long)(((__int128)step * total + steps - 1) / steps);
	long hi = (long)(((__int128)(step + 1) * total + steps - 1) / steps);
	return hi - lo;
}

/* ---- host-side disturbances ---- */

static atomic_int stop_threads;
static long dispatcher_tid;

static void pin_to(long cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET((int)cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die(2, "cannot pin to CPU %ld: %s", cpu, strerror(errno));
}

static void *contention_main(void *arg)
{
	(void)arg;
	if (opt.pin_cpu >= 0)
		pin_to(opt.pin_cpu);
	while (!atomic_load_explicit(&stop_threads, memory_order_relaxed))
		__asm__ volatile("pause" ::: "memory");
	return NULL;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The process-wide mutex of --lock-holders: the dispatcher takes it around each step's
 * calls, the holders take it again and again and keep it --lock-hold-us each time, as
 * tokenizer threads hold a framework lock or the GIL. */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long lock_waits_ns, lock_waits;

static void *lock_holder_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, opt.lock_name, 0, 0, 0);
	while (!atomic_load_explicit(&stop_threads, memory_order_relaxed)) {
		pthread_mutex_lock(&shared_lock);
		uint64_t until = now_ns() + (uint64_t)opt.lock_hold_us * 1000ull;
		while (now_ns() < until)
			__asm__ volatile("pause" ::: "memory");
		pthread_mutex_unlock(&shared_lock);
		sched_yield();
	}
	return NULL;
}

/* take_lock takes the shared mutex for the dispatcher and counts how long it waited. */
static void take_lock(void)
{
	uint64_t t0 = now_ns();
	pthread_mutex_lock(&shared_lock);
	atomic_fetch_add(&lock_waits_ns, (long)(now_ns() - t0));
	atomic_fetch_add(&lock_waits, 1);
}

struct io_state {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	char path[PATH_MAX];
	uint64_t bursts, bytes;
	char *chunk;
};
static struct io_state io = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* A checkpoint-style burst: rewrite the file in 1 MiB writes, then fsync, so the block
 * layer really sees the writes (a tmpfs --io-dir would not). */
static void io_burst(void)
{
	int fd = open(io.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		die(1, "io burst: open %s: %s", io.path, strerror(errno));
	uint64_t written = 0;
	for (long i = 0; i < opt.io_burst_mb; i++) {
		ssize_t n = write(fd, io.chunk, 1 << 20);
		if (n < 0)
			die(1, "io burst: write %s: %s", io.path, strerror(errno));
		written += (uint64_t)n;
	}
	if (fsync(fd))
		die(1, "io burst: fsync %s: %s", io.path, strerror(errno));
	close(fd);
	pthread_mutex_lock(&io.mu);
	io.bursts++;
	io.bytes += written;
	pthread_mutex_unlock(&io.mu);
}

static struct timespec deadline_after_ms(long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static void *io_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec due = deadline_after_ms(opt.io_every_ms);
		pthread_mutex_lock(&io.mu);
		while (!atomic_load(&stop_threads) && pthread_cond_timedwait(&io.wake, &io.mu, &due) != ETIMEDOUT)
			;
		pthread_mutex_unlock(&io.mu);
		if (atomic_load(&stop_threads))
			return NULL;
		io_burst();
	}
}

static void io_setup(void)
{
	const char *dir = opt.io_dir ? opt.io_dir : getenv("TMPDIR");
	snprintf(io.path, sizeof(io.path), "%s/fakegpu-io-%d.bin", dir && *dir ? dir : "/tmp", (int)getpid());
	io.chunk = malloc(1 << 20);
	if (!io.chunk)
		die(1, "out of memory");
	memset(io.chunk, 0x5a, 1 << 20);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&io.wake, &attr);
}

/* ---- the start gate ---- */

static void write_ready_file(void)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s.tmp", opt.ready_file);
	FILE *f = fopen(tmp, "w");
	if (!f)
		die(2, "ready file %s: %s", tmp, strerror(errno));
	fprintf(f, "{\"pid\":%d,\"tid\":%ld}\n", (int)getpid(), dispatcher_tid);
	/* rename makes the file appear complete, never half-written */
	if (fclose(f) || rename(tmp, opt.ready_file))
		die(2, "ready file %s: %s", opt.ready_file, strerror(errno));
}

/* The gate sits before the first CUDA call, so probes attached while the workload waits
 * see every call the report counts. */
static void start_gate(void)
{
	if (opt.ready_file)
		write_ready_file();
	if (opt.wait_file || opt.wait_signal)
		fprintf(stderr, "fakegpu-workload: ready pid=%d tid=%ld, waiting for %s\n", (int)getpid(),
		        dispatcher_tid, opt.wait_file ? opt.wait_file : "SIGUSR1");
	if (opt.wait_signal) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGUSR1);
		struct timespec timeout = {opt.wait_timeout_ms / 1000, (opt.wait_timeout_ms % 1000) * 1000000L};
		if (sigtimedwait(&set, NULL, &timeout) < 0)
			die(3, "no SIGUSR1 within %ld ms", opt.wait_timeout_ms);
	}
	if (opt.wait_file) {
		uint64_t give_up = now_ns() + (uint64_t)opt.wait_timeout_ms * 1000000ull;
		while (access(opt.wait_file, F_OK) != 0) {
			if (now_ns() > give_up)
				die(3, "%s did not appear within %ld ms", opt.wait_file, opt.wait_timeout_ms);
			struct timespec ms = {0, 1000000L};
			nanosleep(&ms, NULL);
		}
	}
	if (opt.hold_ms) {
		struct timespec hold = {opt.hold_ms / 1000, (opt.hold_ms % 1000) * 1000000L};
		while (nanosleep(&hold, &hold) && errno == EINTR)
			;
	}
}

/* ---- the CUDA loop ---- */

/* Host stand-ins for kernels: CUDA only needs a distinct address per kernel. */
static void forward_kernel(void) {}
static char driver_kernel_object[64];

struct buffers {
	cudaStream_t compute, copy, capture;
	cudaEvent_t copy_done, sync_event;
	void *d_in, *d_out, *d_a, *d_b;
	CUdeviceptr dd_in, dd_out, dd_a, dd_b;
	char *h_in, *h_out, *h_src, *h_dst;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	int sms;
};

static enum cudaMemcpyKind kind(enum cudaMemcpyKind k)
{
	return opt.default_kind ? cudaMemcpyDefault : k;
}

static void *xmalloc_touched(size_t n)
{
	char *p = malloc(n);
	if (!p)
		die(1, "out of host memory (%zu bytes)", n);
	memset(p, 0xa5, n);
	return p;
}

static void setup(struct buffers *b)
{
	int count = 0;
	const char *local_rank = getenv("LOCAL_RANK");
	CALL(cudaGetDeviceCount, &count);
	int device = (local_rank ? atoi(local_rank) : 0) % count;
	CALL(cudaSetDevice, device);
	CALL(cudaDeviceGetAttribute, &b->sms, cudaDevAttrMultiProcessorCount, device);
	CALL(cudaStreamCreate, &b->compute);
	CALL(cudaStreamCreate, &b->copy);
	CALL(cudaStreamCreate, &b->capture);
	CALL(cudaEventCreate, &b->copy_done);
	CALL(cudaEventCreate, &b->sync_event);
	CALL(cudaMalloc, &b->d_in, (size_t)opt.h2d_bytes);
	CALL(cudaMalloc, &b->d_out, (size_t)opt.d2h_bytes);
	CALL(cudaMalloc, &b->d_a, (size_t)opt.d2d_bytes);
	CALL(cudaMalloc, &b->d_b, (size_t)opt.d2d_bytes);
	if (driver_used()) {
		CALL(cuInit, 0);
		CALL(cuMemAlloc_v2, &b->dd_in, (size_t)opt.h2d_bytes);
		CALL(cuMemAlloc_v2, &b->dd_out, (size_t)opt.d2h_bytes);
		CALL(cuMemAlloc_v2, &b->dd_a, (size_t)opt.d2d_bytes);
		CALL(cuMemAlloc_v2, &b->dd_b, (size_t)opt.d2d_bytes);
	}
	b->h_in = xmalloc_touched((size_t)opt.h2d_bytes);
	b->h_out = xmalloc_touched((size_t)opt.d2h_bytes);
	b->h_src = xmalloc_touched((size_t)opt.h2h_bytes);
	b->h_dst = xmalloc_touched((size_t)opt.h2h_bytes);
}

static void launch_runtime(struct buffers *b, cudaStream_t stream, unsigned int blocks)
{
	void *args[] = {&b->d_in, &b->d_out};
	dim3 grid = {blocks, 1, 1}, block = {(unsigned int)opt.block_threads, 1, 1};
	CALL(cudaLaunchKernel, (const void *)forward_kernel, grid, block, args, 0, stream);
}

static void capture_graph(struct buffers *b)
{
	cudaGraph_t graph;
	CALL(cudaStreamBeginCapture, b->capture, cudaStreamCaptureModeGlobal);
	for (long k = 0; k < opt.graph_kernels; k++)
		launch_runtime(b, b->capture, (unsigned int)opt.grid_blocks);
	CALL(cudaStreamEndCapture, b->capture, &graph);
	graph_captured_kernels += (uint64_t)opt.graph_kernels;
	if (b->exec) {
		CALL(cudaGraphExecDestroy, b->exec);
		CALL(cudaGraphDestroy, b->graph);
	}
	b->graph = graph;
	CALL(cudaGraphInstantiate, &b->exec, graph, 0);
}

static void fork_child(struct buffers *b)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		fork_failures++;
		return;
	}
	if (pid > 0) {
		forks_done++;
		return;
	}
	uint64_t until = thread_cpu_ns() + (uint64_t)opt.fork_work_us * 1000;
	while (thread_cpu_ns() < until)
		;
	for (long i = 0; i < opt.fork_cuda_copies; i++)
		if (cudaMemcpy(b->d_in, b->h_in, (size_t)opt.h2d_bytes, kind(cudaMemcpyHostToDevice)))
			_exit(1);
	_exit(0);
}

static void reap_children(int options)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, options)) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fork_failures++;
}

static void run_step(struct buffers *b, long step, long *sync_seq, long *driver_sync_seq, uint64_t *next_io)
{
	const size_t h2d = (size_t)opt.h2d_bytes, d2h = (size_t)opt.d2h_bytes, d2d = (size_t)opt.d2d_bytes;
	long n;

	for (n = share(opt.forks, step); n > 0; n--)
		fork_child(b);

	for (n = share(opt.h2d, step); n > 0; n--) {
		CALL(cudaMemcpy, b->d_in, b->h_in, h2d, kind(cudaMemcpyHostToDevice));
		runtime_bytes[cudaMemcpyHostToDevice] += h2d;
	}
	for (n = share(opt.h2d_async, step); n > 0; n--) {
		CALL(cudaMemcpyAsync, b->d_in, b->h_in, h2d, kind(cudaMemcpyHostToDevice), b->copy);
		runtime_bytes[cudaMemcpyHostToDevice] += h2d;
	}
	for (n = share(opt.stream_waits, step); n > 0; n--) {
		CALL(cudaEventRecord, b->copy_done, b->copy);
		CALL(cudaStreamWaitEvent, b->compute, b->copy_done, 0);
	}

	for (n = share(opt.launches, step); n > 0; n--)
		launch_runtime(b, b->compute, (unsigned int)opt.grid_blocks);
	for (n = share(opt.launches_ex, step); n > 0; n--) {
		void *args[] = {&b->d_in, &b->d_out};
		cudaLaunchConfig_t cfg = {.gridDim = {(unsigned int)opt.grid_blocks, 1, 1},
		                          .blockDim = {(unsigned int)opt.block_threads, 1, 1},
		                          .stream = b->compute};
		CALL(cudaLaunchKernelExC, &cfg, (const void *)forward_kernel, args);
	}

	CUfunction fn = (CUfunction)driver_kernel_object;
	unsigned int gx = (unsigned int)opt.grid_blocks, bx = (unsigned int)opt.block_threads;
	void *params[] = {&b->dd_in, &b->dd_out};
	for (n = share(opt.driver_launches, step); n > 0; n--)
		CALL(cuLaunchKernel, fn, gx, 1, 1, bx, 1, 1, 0, b->compute, params, NULL);
	for (n = share(opt.driver_launches_ptsz, step); n > 0; n--)
		CALL(cuLaunchKernel_ptsz, fn, gx, 1, 1, bx, 1, 1, 0, b->compute, params, NULL);
	for (n = share(opt.driver_launches_ex, step); n > 0; n--) {
		CUlaunchConfig cfg = {.gridDimX = gx, .gridDimY = 1, .gridDimZ = 1,
		                      .blockDimX = bx, .blockDimY = 1, .blockDimZ = 1, .hStream = b->compute};
		CALL(cuLaunchKernelEx, &cfg, fn, params, NULL);
	}

	for (n = share(opt.h2h, step); n > 0; n--) {
		CALL(cudaMemcpy, b->h_dst, b->h_src, (size_t)opt.h2h_bytes, kind(cudaMemcpyHostToHost));
		runtime_bytes[cudaMemcpyHostToHost] += (uint64_t)opt.h2h_bytes;
	}
	for (n = share(opt.d2d, step); n > 0; n--) {
		CALL(cudaMemcpy, b->d_b, b->d_a, d2d, kind(cudaMemcpyDeviceToDevice));
		runtime_bytes[cudaMemcpyDeviceToDevice] += d2d;
	}
	for (n = share(opt.d2d_async, step); n > 0; n--) {
		CALL(cudaMemcpyAsync, b->d_b, b->d_a, d2d, kind(cudaMemcpyDeviceToDevice), b->compute);
		runtime_bytes[cudaMemcpyDeviceToDevice] += d2d;
	}

	for (n = share(opt.graph_captures, step); n > 0; n--)
		capture_graph(b);
	for (n = share(opt.graph_replays, step); n > 0; n--)
		CALL(cudaGraphLaunch, b->exec, b->compute);
	for (n = share(opt.driver_graph_launches, step); n > 0; n--)
		CALL(cuGraphLaunch, (CUgraphExec)b->exec, b->compute);

	for (n = share(opt.allocs, step); n > 0; n--) {
		void *p;
		CALL(cudaMalloc, &p, (size_t)opt.alloc_bytes);
		CALL(cudaFree, p);
	}
	for (n = share(opt.async_allocs, step); n > 0; n--) {
		void *p;
		CALL(cudaMallocAsync, &p, (size_t)opt.alloc_bytes, b->compute);
		CALL(cudaFreeAsync, p, b->compute);
	}
	for (n = share(opt.driver_allocs, step); n > 0; n--) {
		CUdeviceptr p;
		CALL(cuMemAlloc_v2, &p, (size_t)opt.alloc_bytes);
		CALL(cuMemFree_v2, p);
	}

	for (n = share(opt.driver_h2d, step); n > 0; n--) {
		CALL(cuMemcpyHtoD_v2, b->dd_in, b->h_in, h2d);
		driver_bytes[cudaMemcpyHostToDevice] += h2d;
	}
	for (n = share(opt.driver_h2d_async, step); n > 0; n--) {
		CALL(cuMemcpyHtoDAsync_v2, b->dd_in, b->h_in, h2d, b->compute);
		driver_bytes[cudaMemcpyHostToDevice] += h2d;
	}
	for (n = share(opt.driver_memcpy, step); n > 0; n--) {
		CALL(cuMemcpy, b->dd_in, (CUdeviceptr)(uintptr_t)b->h_in, h2d);
		driver_bytes[cudaMemcpyHostToDevice] += h2d;
	}
	for (n = share(opt.driver_memcpy_async, step); n > 0; n--) {
		CALL(cuMemcpyAsync, b->dd_in, (CUdeviceptr)(uintptr_t)b->h_in, h2d, b->compute);
		driver_bytes[cudaMemcpyHostToDevice] += h2d;
	}
	for (n = share(opt.driver_d2d, step); n > 0; n--) {
		CALL(cuMemcpyDtoD_v2, b->dd_b, b->dd_a, d2d);
		driver_bytes[cudaMemcpyDeviceToDevice] += d2d;
	}
	for (n = share(opt.driver_d2d_async, step); n > 0; n--) {
		CALL(cuMemcpyDtoDAsync_v2, b->dd_b, b->dd_a, d2d, b->compute);
		driver_bytes[cudaMemcpyDeviceToDevice] += d2d;
	}
	for (n = share(opt.driver_d2h, step); n > 0; n--) {
		CALL(cuMemcpyDtoH_v2, b->h_out, b->dd_out, d2h);
		driver_bytes[cudaMemcpyDeviceToHost] += d2h;
	}
	for (n = share(opt.driver_d2h_async, step); n > 0; n--) {
		CALL(cuMemcpyDtoHAsync_v2, b->h_out, b->dd_out, d2h, b->compute);
		driver_bytes[cudaMemcpyDeviceToHost] += d2h;
	}

	for (n = share(opt.d2h, step); n > 0; n--) {
		CALL(cudaMemcpy, b->h_out, b->d_out, d2h, kind(cudaMemcpyDeviceToHost));
		runtime_bytes[cudaMemcpyDeviceToHost] += d2h;
	}
	for (n = share(opt.d2h_async, step); n > 0; n--) {
		CALL(cudaMemcpyAsync, b->h_out, b->d_out, d2h, kind(cudaMemcpyDeviceToHost), b->compute);
		runtime_bytes[cudaMemcpyDeviceToHost] += d2h;
	}

	for (n = share(opt.syncs, step); n > 0; n--, (*sync_seq)++) {
		switch (*sync_seq % 3) {
		case 0:
			CALL(cudaStreamSynchronize, b->compute);
			break;
		case 1:
			CALL(cudaDeviceSynchronize);
			break;
		default:
			CALL(cudaEventRecord, b->sync_event, b->compute);
			CALL(cudaEventSynchronize, b->sync_event);
		}
	}
	for (n = share(opt.driver_syncs, step); n > 0; n--, (*driver_sync_seq)++) {
		if (*driver_sync_seq % 2 == 0)
			CALL(cuStreamSynchronize, b->compute);
		else
			CALL(cuCtxSynchronize);
	}

	reap_children(WNOHANG);
	if (opt.io_burst_mb && opt.io_inline && now_ns() >= *next_io) {
		io_burst();
		*next_io = now_ns() + (uint64_t)opt.io_every_ms * 1000000ull;
	}
	if (opt.step_gap_us) {
		struct timespec gap = {opt.step_gap_us / 1000000, (opt.step_gap_us % 1000000) * 1000L};
		nanosleep(&gap, NULL);
	}
}

/* One kernel long enough to cover --stall-ms (the library bills kernels by waves of one
 * block per SM), then the blocking call a test wants to catch or kill mid-flight. */
static void stall(struct buffers *b)
{
	const char *us = getenv("FAKEGPU_KERNEL_US");
	double kernel_us = us && *us ? atof(us) : 20;
	uint64_t waves = (uint64_t)((double)opt.stall_ms * 1000.0 / (kernel_us > 0 ? kernel_us : 1)) + 1;
	uint64_t blocks = waves * (uint64_t)b->sms;
	unsigned int gx = blocks > INT_MAX ? INT_MAX : (unsigned int)blocks;
	unsigned int gy = (unsigned int)((blocks + gx - 1) / gx);
	void *args[] = {&b->d_in, &b->d_out};
	fprintf(stderr, "fakegpu-workload: stalling in %s for %ld ms\n", opt.stall_in, opt.stall_ms);
	CALL(cudaLaunchKernel, (const void *)forward_kernel, ((dim3){gx, gy, 1}),
	     ((dim3){(unsigned int)opt.block_threads, 1, 1}), args, 0, b->compute);
	if (!strcmp(opt.stall_in, "stream-sync")) {
		CALL(cudaStreamSynchronize, b->compute);
	} else if (!strcmp(opt.stall_in, "device-sync")) {
		CALL(cudaDeviceSynchronize);
	} else if (!strcmp(opt.stall_in, "event-sync")) {
		CALL(cudaEventRecord, b->sync_event, b->compute);
		CALL(cudaEventSynchronize, b->sync_event);
	} else {
		CALL(cudaMemcpy, b->h_out, b->d_out, (size_t)opt.d2h_bytes, kind(cudaMemcpyDeviceToHost));
		runtime_bytes[cudaMemcpyDeviceToHost] += (uint64_t)opt.d2h_bytes;
	}
}

static void teardown(struct buffers *b)
{
	CALL(cudaDeviceSynchronize);
	if (b->exec) {
		CALL(cudaGraphExecDestroy, b->exec);
		CALL(cudaGraphDestroy, b->graph);
	}
	CALL(cudaFree, b->d_in);
	CALL(cudaFree, b->d_out);
	CALL(cudaFree, b->d_a);
	CALL(cudaFree, b->d_b);
	if (driver_used()) {
		CALL(cuCtxSynchronize);
		CALL(cuMemFree_v2, b->dd_in);
		CALL(cuMemFree_v2, b->dd_out);
		CALL(cuMemFree_v2, b->dd_a);
		CALL(cuMemFree_v2, b->dd_b);
	}
	CALL(cudaEventDestroy, b->copy_done);
	CALL(cudaEventDestroy, b->sync_event);
	CALL(cudaStreamDestroy, b->compute);
	CALL(cudaStreamDestroy, b->copy);
	CALL(cudaStreamDestroy, b->capture);
	CALL(cudaGetLastError);
	free(b->h_in);
	free(b->h_out);
	free(b->h_src);
	free(b->h_dst);
}

/* ---- report ---- */

static void print_env_int(FILE *f, const char *key, const char *env)
{
	const char *v = getenv(env);
	char *end;
	long n = v ? strtol(v, &end, 10) : 0;
	if (v && *v && !*end)
		fprintf(f, ",\"%s\":%ld", key, n);
	else
		fprintf(f, ",\"%s\":null", key);
}

static void print_bytes(FILE *f, const char *key, const uint64_t *bytes)
{
	fprintf(f, ",\"%s\":{", key);
	for (int d = 0; d < 4; d++)
		fprintf(f, "%s\"%s\":%llu", d ? "," : "", dir_names[d], (unsigned long long)bytes[d]);
	fprintf(f, "}");
}

static void print_api_field(FILE *f, const char *key, int field)
{
	fprintf(f, ",\"%s\":{", key);
	for (int a = 0; a < API_COUNT; a++) {
		uint64_t v = field == 0 ? stats[a].calls : field == 1 ? stats[a].total_ns : stats[a].max_ns;
		fprintf(f, "%s\"%s\":%llu", a ? "," : "", api_names[a], (unsigned long long)v);
	}
	fprintf(f, "}");
}

static void report(struct buffers *b, uint64_t start, uint64_t end)
{
	FILE *f = stdout;
	fprintf(f, "{\"pid\":%d,\"tid\":%ld", (int)getpid(), dispatcher_tid);
	print_env_int(f, "rank", "RANK");
	print_env_int(f, "local_rank", "LOCAL_RANK");
	print_env_int(f, "world_size", "WORLD_SIZE");
	fprintf(f, ",\"steps\":%ld,\"sms\":%d,\"start_ns\":%llu,\"end_ns\":%llu,\"wall_ns\":%llu", opt.steps,
	        b->sms, (unsigned long long)start, (unsigned long long)end, (unsigned long long)(end - start));
	print_api_field(f, "calls", 0);
	print_api_field(f, "total_ns", 1);
	print_api_field(f, "max_ns", 2);
	print_bytes(f, "bytes", runtime_bytes);
	print_bytes(f, "driver_bytes", driver_bytes);
	fprintf(f,
	        ",\"graph\":{\"captures\":%llu,\"instantiations\":%llu,\"launches\":%llu,\"driver_launches\":%llu,"
	        "\"captured_kernels\":%llu}",
	        (unsigned long long)stats[API_cudaStreamEndCapture].calls,
	        (unsigned long long)stats[API_cudaGraphInstantiate].calls,
	        (unsigned long long)stats[API_cudaGraphLaunch].calls,
	        (unsigned long long)stats[API_cuGraphLaunch].calls, (unsigned long long)graph_captured_kernels);
	fprintf(f, ",\"forks\":%llu,\"fork_failures\":%llu", (unsigned long long)forks_done,
	        (unsigned long long)fork_failures);
	fprintf(f, ",\"io_bursts\":%llu,\"io_bytes\":%llu", (unsigned long long)io.bursts,
	        (unsigned long long)io.bytes);
	fprintf(f, ",\"lock_waits\":%ld,\"lock_wait_ns\":%ld", atomic_load(&lock_waits), atomic_load(&lock_waits_ns));
	fprintf(f, ",\"contention_threads\":%ld,\"pin_cpu\":%ld}\n", opt.contention_threads, opt.pin_cpu);
	fflush(f);
}

/* ---- main ---- */

static void set_env_knob(const char *name, double value)
{
	if (value < 0)
		return;
	char buf[64];
	snprintf(buf, sizeof(buf), "%g", value);
	setenv(name, buf, 1);
}

/* tcp_connect connects to an IPv4 "HOST:PORT", or dies. */
static int tcp_connect(const char *addr)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		die(2, "--tcp-send %s: want HOST:PORT", addr);
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die(2, "--tcp-send %s: not an IPv4 address", addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		die(1, "--tcp-send %s: %s", addr, strerror(errno));
	return fd;
}

static void *dispatcher_main(void *arg)
{
	(void)arg;
	dispatcher_tid = (long)syscall(SYS_gettid);
	if (opt.pin_cpu >= 0)
		pin_to(opt.pin_cpu);
	start_gate();

	uint64_t start = now_ns();
	pthread_t contenders[64], io_thread, holders[64];
	for (long i = 0; i < opt.contention_threads; i++)
		if (pthread_create(&contenders[i], NULL, contention_main, NULL))
			die(1, "cannot start contention thread");
	for (long i = 0; i < opt.lock_holders; i++)
		if (pthread_create(&holders[i], NULL, lock_holder_main, NULL))
			die(1, "cannot start lock holder thread");
	if (opt.io_burst_mb) {
		io_setup();
		if (!opt.io_inline && pthread_create(&io_thread, NULL, io_main, NULL))
			die(1, "cannot start io thread");
	}

	struct buffers b = {0};
	setup(&b);
	int tcp = opt.tcp_send ? tcp_connect(opt.tcp_send) : -1;
	char *tcp_buf = tcp >= 0 ? calloc(1, (size_t)opt.tcp_bytes) : NULL;
	long sync_seq = 0, driver_sync_seq = 0;
	uint64_t next_io = now_ns() + (uint64_t)opt.io_every_ms * 1000000ull;
	for (long step = 0; step < opt.steps; step++) {
		if (opt.lock_holders)
			take_lock();
		run_step(&b, step, &sync_seq, &driver_sync_seq, &next_io);
		if (opt.lock_holders)
			pthread_mutex_unlock(&shared_lock);
		for (long sent = 0; tcp_buf && sent < opt.tcp_bytes;) {
			ssize_t n = send(tcp, tcp_buf + sent, (size_t)(opt.tcp_bytes - sent), MSG_NOSIGNAL);
			if (n <= 0)
				die(1, "tcp send: %s", strerror(errno));
			sent += n;
		}
	}
	if (tcp >= 0) {
		close(tcp);
		free(tcp_buf);
	}
	if (opt.stall_ms)
		stall(&b);
	teardown(&b);
	reap_children(0);

	atomic_store(&stop_threads, 1);
	for (long i = 0; i < opt.contention_threads; i++)
		pthread_join(contenders[i], NULL);
	for (long i = 0; i < opt.lock_holders; i++)
		pthread_join(holders[i], NULL);
	if (opt.io_burst_mb) {
		if (!opt.io_inline) {
			pthread_mutex_lock(&io.mu);
			pthread_cond_signal(&io.wake);
			pthread_mutex_unlock(&io.mu);
			pthread_join(io_thread, NULL);
		}
		unlink(io.path);
	}
	report(&b, start, now_ns());
	return NULL;
}

int main(int argc, char **argv)
{
	cli_parse("fakegpu-workload", flags, NFLAGS, argc, argv);
	if (opt.help) {
		usage(stdout);
		return 0;
	}
	validate_flags();
	set_env_knob("FAKEGPU_KERNEL_US", opt.kernel_us);
	set_env_knob("FAKEGPU_LAUNCH_US", opt.launch_us);
	set_env_knob("FAKEGPU_GBPS", opt.gbps);

	/* SIGUSR1 must be blocked in every thread before it can arrive, or it kills us. */
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	if (opt.wait_signal)
		pthread_sigmask(SIG_BLOCK, &usr1, NULL);

	if (!opt.dispatcher_thread) {
		dispatcher_main(NULL);
		return 0;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, dispatcher_main, NULL))
		die(1, "cannot start dispatcher thread");
	pthread_join(t, NULL);
	return 0;
}
