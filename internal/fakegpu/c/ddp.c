/*
 * fakegpu-ddp: a data-parallel training loop across rank processes, like PyTorch DDP over
 * NCCL. Each step does its host work (--host-compute-us of CPU), computes (kernels +
 * stream sync), all-reduces the gradient buckets, optionally exchanges a ring of
 * send/recv, runs the optimizer and synchronizes the stream, then checks the results.
 *
 * One rank can be made slow from a given step. With the fake NCCL's default asynchronous
 * collectives, ncclAllReduce returns in microseconds on every rank, the all-reduce
 * completes on the device when the late rank's stream reaches it, and the peers wait for
 * it in the step's final cudaStreamSynchronize, while the slow rank itself waits least
 * (the per-step stream_sync_ns of the report shows it). With FAKENCCL_MODE=blocking the
 * peers wait inside ncclAllReduce instead. A slow kernel (--slow-mode kernel) delays every
 * rank's sync alike: no host-side timing names a slow device.
 *
 * With --threads pytorch a rank makes its calls from the threads PyTorch DDP uses: the
 * main (Python) thread runs the forward pass (host work, forward kernels), the autograd
 * engine's device thread runs the backward pass (backward kernels, each gradient bucket's
 * all-reduce as it fills), the main thread then runs the optimizer and syncs on the loss
 * (loss.item()), and a watchdog thread polls the last collective's event, as
 * ProcessGroupNCCL's does. The main thread is named python3.
 *
 * `--spawn N` is the launcher (like torchrun): it makes the NCCL unique id and runs N rank
 * processes of this same program with RANK, LOCAL_RANK, WORLD_SIZE and FAKENCCL_UNIQUE_ID
 * set, then prints their JSON report lines in rank order. Without --spawn the process is
 * one rank and takes those variables from its environment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fake_cuda.h"
#include "fake_ibverbs.h"
#include "fake_nccl.h"

#define PROG "fakegpu-ddp"
#define die(status, ...) cli_die(PROG, status, __VA_ARGS__)
#define MAX_SPAWN 256
/* Enough for the detection matrix's longest row (about 17 minutes of 2 ms steps); the
 * per-step arrays are calloc'd, so only the steps made touch memory. */
#define MAX_STEPS 2000000

static struct {
	long spawn, steps, bucket_bytes, buckets, compute_kernels, optimizer_kernels;
	double kernel_us, host_compute_us, slow_us;
	long slow_rank, slow_ms, slow_from_step, slow_threads, host_compute_sleep;
	const char *slow_mode, *slow_while_file, *threads;
	long ring_bytes, ib, no_nccl, wait_timeout_ms, gate_after_init;
	const char *wait_file, *ready_file, *rank_env;
	long help;
} opt = {
	.steps = 200, .bucket_bytes = 1 << 20, .buckets = 1, .compute_kernels = 8, .optimizer_kernels = 2,
	.kernel_us = 50, .slow_rank = -1, .slow_threads = 2, .slow_mode = "compute", .wait_timeout_ms = 120000,
	.threads = "single",
};

static const struct flag flags[] = {
	{"spawn", OPT_LONG, &opt.spawn, "launcher: run this many rank processes (0: be one rank)"},
	{"steps", OPT_LONG, &opt.steps, "training steps"},
	{"bucket-bytes", OPT_LONG, &opt.bucket_bytes, "bytes per gradient bucket (float32, multiple of 4)"},
	{"buckets", OPT_LONG, &opt.buckets, "gradient buckets all-reduced per step"},
	{"compute-kernels", OPT_LONG, &opt.compute_kernels, "forward+backward kernels per step"},
	{"optimizer-kernels", OPT_LONG, &opt.optimizer_kernels, "optimizer kernels per step"},
	{"kernel-us", OPT_DOUBLE, &opt.kernel_us, "device time per kernel (sets FAKEGPU_KERNEL_US)"},
	{"host-compute-us", OPT_DOUBLE, &opt.host_compute_us,
	 "host CPU work per step on every rank before its kernels (data preparation, Python)"},
	{"host-compute-sleep", OPT_FLAG, &opt.host_compute_sleep,
	 "host work (--host-compute-us and compute slowness) sleeps instead of spinning: each rank "
	 "as if on cores of its own, for more ranks than this machine has CPUs"},
	{"slow-rank", OPT_LONG, &opt.slow_rank, "rank made slow (-1: none)"},
	{"slow-ms", OPT_LONG, &opt.slow_ms, "delay the slow rank adds per step, whole milliseconds"},
	{"slow-us", OPT_DOUBLE, &opt.slow_us,
	 "delay the slow rank adds per step, in microseconds (for steps of a few ms, whose 5% is a fraction of one); replaces --slow-ms"},
	{"slow-from-step", OPT_LONG, &opt.slow_from_step, "first slow step"},
	{"slow-mode", OPT_STRING, &opt.slow_mode,
	 "compute: --slow-ms more host CPU work per step; stall: sleep --slow-ms off-CPU before each "
	 "all-reduce (a data-loader wait; barrier is the old name); contention: --slow-ms of host CPU "
	 "work while --slow-threads busy threads share its CPU; kernel: one extra kernel of --slow-ms "
	 "(a slow device)"},
	{"slow-threads", OPT_LONG, &opt.slow_threads, "busy threads for --slow-mode contention"},
	{"threads", OPT_STRING, &opt.threads,
	 "single: one thread makes every call; pytorch: forward and the loss sync on the main thread "
	 "(named python3), backward kernels and the bucket all-reduces on an autograd thread, a "
	 "watchdog thread polling the collectives' events"},
	{"slow-while-file", OPT_STRING, &opt.slow_while_file,
	 "the slow rank is slow only in steps that start while PATH exists (from --slow-from-step on): "
	 "a test turns a slowdown on and off mid-run; a number in the file, when it appears, is the "
	 "delay in microseconds instead of --slow-us; the slow rank writes when the first step of each "
	 "slowdown began (nanoseconds since the epoch) to PATH.began"},
	{"ring-bytes", OPT_LONG, &opt.ring_bytes, "per step, send this many bytes to rank+1 and receive from rank-1"},
	{"ib", OPT_FLAG, &opt.ib,
	 "open verbs device local_rank mod devices, create a queue pair on it, and wait for its async events on a thread"},
	{"no-nccl", OPT_FLAG, &opt.no_nccl,
	 "replicas that never call NCCL (inference, or jobs that synchronise some other way): each step is host work, kernels and a sync"},
	{"rank-env", OPT_STRING, &opt.rank_env,
	 "launcher: NAME=VALUE set in each rank's environment, %r in VALUE replaced by its rank "
	 "(a wrapper's per-rank NCCL_IB_HCA==mlx5_%r:1)"},
	{"wait-file", OPT_STRING, &opt.wait_file, "start gate: each rank waits for this path before any CUDA/NCCL call"},
	{"ready-file", OPT_STRING, &opt.ready_file, "each rank writes PATH.RANK ({\"pid\":..,\"tid\":..}) at the gate"},
	{"gate-after-init", OPT_FLAG, &opt.gate_after_init,
	 "the start gate comes after the communicator is made and queried, before the first step: "
	 "a job already running when its collector starts"},
	{"wait-timeout-ms", OPT_LONG, &opt.wait_timeout_ms, "give up on the gate after this long (exit status 3)"},
	{"help", OPT_FLAG, &opt.help, "print this help"},
};
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long env_long(const char *name, long fallback)
{
	const char *v = getenv(name);
	return v && *v ? atol(v) : fallback;
}

/* ---- launcher ---- */

/* set_rank_env sets NAME=VALUE from spec, each %r in VALUE replaced by rank. */
static void set_rank_env(const char *spec, int rank)
{
	char name[256], value[1024];
	const char *eq = strchr(spec, '=');
	if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof name)
		die(2, "--rank-env wants NAME=VALUE, got %s", spec);
	memcpy(name, spec, (size_t)(eq - spec));
	name[eq - spec] = 0;
	size_t n = 0;
	for (const char *p = eq + 1; *p && n + 16 < sizeof value; p++) {
		if (p[0] == '%' && p[1] == 'r') {
			n += (size_t)snprintf(value + n, sizeof value - n, "%d", rank);
			p++;
		} else {
			value[n++] = *p;
		}
	}
	value[n] = 0;
	setenv(name, value, 1);
}

static int spawn_ranks(int argc, char **argv)
{
	int n = (int)opt.spawn;
	if (n < 1 || n > MAX_SPAWN)
		die(2, "--spawn must be 1..%d", MAX_SPAWN);
	ncclUniqueId id;
	if (ncclGetUniqueId(&id) != ncclSuccess)
		die(1, "ncclGetUniqueId failed");
	char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
		sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);

	/* the ranks run this program again, minus --spawn */
	char **child_argv = calloc((size_t)argc + 1, sizeof(char *));
	int k = 0;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--spawn") == 0) {
			i++;
			continue;
		}
		if (strncmp(argv[i], "--spawn=", 8) == 0)
			continue;
		child_argv[k++] = argv[i];
	}

	pid_t pids[MAX_SPAWN];
	int fds[MAX_SPAWN];
	char *out[MAX_SPAWN];
	size_t out_len[MAX_SPAWN];
	/* The ranks exec this program by its own path, not /proc/self/exe, so each rank's
	 * thread name (comm) is fakegpu-ddp, as a real launcher's ranks keep python3's. */
	char self[4096];
	ssize_t self_len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (self_len <= 0)
		die(1, "readlink /proc/self/exe: %s", strerror(errno));
	self[self_len] = 0;
	fflush(NULL);
	for (int r = 0; r < n; r++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) != 0)
			die(1, "pipe: %s", strerror(errno));
		pid_t pid = fork();
		if (pid < 0)
			die(1, "fork: %s", strerror(errno));
		if (pid == 0) {
			char v[32];
			dup2(p[1], STDOUT_FILENO);
			snprintf(v, sizeof(v), "%d", r);
			setenv("RANK", v, 1);
			setenv("LOCAL_RANK", v, 1);
			snprintf(v, sizeof(v), "%d", n);
			setenv("WORLD_SIZE", v, 1);
			setenv("FAKENCCL_UNIQUE_ID", hex, 1);
			/* Where the ranks met, as torchrun says it: one port per launch. */
			setenv("MASTER_ADDR", "127.0.0.1", 1);
			snprintf(v, sizeof(v), "%d", 20000 + (int)(getppid() % 40000));
			setenv("MASTER_PORT", v, 1);
			if (opt.rank_env)
				set_rank_env(opt.rank_env, r);
			execv(self, child_argv);
			_exit(127);
		}
		close(p[1]);
		pids[r] = pid;
		fds[r] = p[0];
		out[r] = NULL;
		out_len[r] = 0;
	}

	/* Collect each rank's stdout separately, so report lines never interleave. */
	int open_fds = n;
	while (open_fds) {
		struct pollfd pfd[MAX_SPAWN];
		for (int r = 0; r < n; r++)
			pfd[r] = (struct pollfd){.fd = fds[r], .events = POLLIN};
		if (poll(pfd, (nfds_t)(unsigned int)n, -1) < 0 && errno != EINTR)
			die(1, "poll: %s", strerror(errno));
		for (int r = 0; r < n; r++) {
			if (fds[r] < 0 || !(pfd[r].revents & (POLLIN | POLLHUP)))
				continue;
			char buf[65536];
			ssize_t got = read(fds[r], buf, sizeof(buf));
			if (got <= 0) {
				close(fds[r]);
				fds[r] = -1;
				open_fds--;
				continue;
			}
			if (out_len[r] + (size_t)got > (64u << 20))
				die(1, "rank %d wrote more than 64 MiB", r);
			out[r] = realloc(out[r], out_len[r] + (size_t)got);
			memcpy(out[r] + out_len[r], buf, (size_t)got);
			out_len[r] += (size_t)got;
		}
	}

	/* A failed rank would leave its peers waiting in a collective: stop them, as torchrun
	 * does. */
	int failed = 0;
	for (int done = 0; done < n; done++) {
		int status;
		pid_t pid = wait(&status);
		if (pid < 0)
			break;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			for (int r = 0; r < n; r++)
				if (pids[r] == pid)
					fprintf(stderr, PROG ": rank %d failed (status %d)\n", r, status);
			if (!failed++)
				for (int r = 0; r < n; r++)
					kill(pids[r], SIGTERM);
		}
	}
	for (int r = 0; r < n; r++) {
		if (out_len[r])
			fwrite(out[r], 1, out_len[r], stdout);
		free(out[r]);
	}
	fflush(stdout);
	free(child_argv);
	return failed ? 1 : 0;
}

/* ---- one rank ---- */

#define APIS(X)                                                                                          \
	X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaStreamCreate) X(cudaStreamDestroy) X(cudaMalloc)     \
	X(cudaFree) X(cudaMemcpy) X(cudaLaunchKernel) X(cudaStreamSynchronize) X(ncclCommInitRank)        \
	X(ncclCommCount) X(ncclCommUserRank) X(ncclCommDestroy) X(ncclAllReduce) X(ncclGroupStart)        \
	X(ncclGroupEnd) X(ncclSend) X(ncclRecv) X(ibv_get_device_list) X(ibv_open_device)                 \
	X(cudaEventCreate) X(cudaEventRecord) X(cudaEventQuery)                                           \
	X(ibv_free_device_list) X(ibv_alloc_pd) X(ibv_create_qp)
#define AS_ENUM(name) API_##name,
#define AS_NAME(name) #name,
enum api { APIS(AS_ENUM) API_COUNT };
static const char *const api_names[] = {APIS(AS_NAME)};
static struct {
	uint64_t calls, total_ns, max_ns;
} stats[API_COUNT];

/* Counts one call; atomically, since with --threads pytorch two threads make calls. */
static void record(enum api api, uint64_t t0)
{
	uint64_t dt = now_ns() - t0;
	__atomic_fetch_add(&stats[api].calls, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&stats[api].total_ns, dt, __ATOMIC_RELAXED);
	uint64_t max = __atomic_load_n(&stats[api].max_ns, __ATOMIC_RELAXED);
	while (dt > max && !__atomic_compare_exchange_n(&stats[api].max_ns, &max, dt, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* Times one call, from whichever thread makes it. */
#define CALL(name, ...)                                                                   \
	do {                                                                              \
		uint64_t t0_ = now_ns();                                                  \
		int rc_ = (int)name(__VA_ARGS__);                                          \
		record(API_##name, t0_);                                                  \
		if (rc_ != 0)                                                             \
			die(1, "rank %d: " #name " failed with error %d", rank, rc_);      \
	} while (0)

static int rank, world, local_rank;
static long tid;
static atomic_int stop_busy;
static atomic_long ib_events;
static atomic_int ib_last_event = -1;

static void write_ready_file(void)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s.%d", opt.ready_file, rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		die(2, "ready file %s: %s", tmp, strerror(errno));
	fprintf(f, "{\"pid\":%d,\"tid\":%ld}\n", (int)getpid(), tid);
	if (fclose(f) || rename(tmp, path))
		die(2, "ready file %s: %s", path, strerror(errno));
}

static void gate(void)
{
	if (opt.ready_file)
		write_ready_file();
	if (!opt.wait_file)
		return;
	uint64_t give_up = now_ns() + (uint64_t)opt.wait_timeout_ms * 1000000ull;
	while (access(opt.wait_file, F_OK) != 0) {
		if (now_ns() > give_up)
			die(3, "rank %d: %s did not appear within %ld ms", rank, opt.wait_file, opt.wait_timeout_ms);
		struct timespec ms = {0, 1000000L};
		nanosleep(&ms, NULL);
	}
}

static void *busy_main(void *arg)
{
	cpu_set_t *set = arg;
	sched_setaffinity(0, sizeof(*set), set);
	while (!atomic_load_explicit(&stop_busy, memory_order_relaxed))
		__asm__ volatile("pause" ::: "memory");
	return NULL;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Like NCCL's IB transport: a thread parked in ibv_get_async_event for the whole run. */
static void *ib_main(void *arg)
{
	struct ibv_context *ctx = arg;
	struct ibv_async_event ev;
	while (ibv_get_async_event(ctx, &ev) == 0) {
		atomic_store(&ib_last_event, (int)ev.event_type);
		atomic_fetch_add(&ib_events, 1);
		fprintf(stderr, PROG ": rank %d: verbs async event %d\n", rank, (int)ev.event_type);
		ibv_ack_async_event(&ev);
	}
	return NULL;
}

static void fake_kernel(void) {}

/* Spins for ns of this thread's CPU time: a rank whose CPU is shared takes longer. */
static void cpu_work(uint64_t ns)
{
	uint64_t until = thread_cpu_ns() + ns;
	while (thread_cpu_ns() < until)
		;
}

/* Host work is CPU time, not wall time. With --host-compute-sleep it is wall time
 * off-CPU instead: eight ranks on two cores would otherwise share them, and a rank's
 * extra work would cost it only a quarter of its length. */
static void host_work(uint64_t ns)
{
	if (!opt.host_compute_sleep) {
		cpu_work(ns);
		return;
	}
	struct timespec d = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&d, &d) == -1 && errno == EINTR)
		;
}

/* Sleeps ns off-CPU: a stall (a data-loader wait), whatever the host work does. */
static void nanosleep_ns(uint64_t ns)
{
	struct timespec d = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&d, &d) == -1 && errno == EINTR)
		;
}

static void launch(cudaStream_t stream, unsigned int blocks)
{
	dim3 grid = {blocks, 1, 1}, block = {256, 1, 1};
	CALL(cudaLaunchKernel, (const void *)fake_kernel, grid, block, NULL, 0, stream);
}

static void print_array(const char *key, const uint64_t *v, long n)
{
	printf(",\"%s\":[", key);
	for (long i = 0; i < n; i++)
		printf("%s%llu", i ? "," : "", (unsigned long long)v[i]);
	printf("]");
}

/* --threads pytorch: what the main thread hands the autograd thread each step. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	long step;      /* the step whose backward is asked for, -1 none */
	long done_step; /* the last step whose backward is done */
	int stop;
	cudaStream_t stream;
	ncclComm_t comm;
	float *grads, *reduced;
	size_t count, bucket;
	uint64_t *ar_entry, *ar_exit, allreduce_bytes;
	cudaEvent_t events[2];
	_Atomic long last_event; /* index of the event the watchdog polls, -1 none */
	_Atomic long tid, watchdog_tid;
} autograd = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .step = -1, .done_step = -1,
	      .last_event = -1};

/* The autograd engine's device thread: each step's backward kernels, each bucket's
 * all-reduce queued as its gradients are ready (DDP's reducer hooks), then the event the
 * watchdog polls. */
static void *autograd_main(void *arg)
{
	(void)arg;
	atomic_store(&autograd.tid, (long)syscall(SYS_gettid));
	long backward = opt.compute_kernels - opt.compute_kernels / 2;
	for (;;) {
		pthread_mutex_lock(&autograd.mu);
		while (autograd.step <= autograd.done_step && !autograd.stop)
			pthread_cond_wait(&autograd.cv, &autograd.mu);
		long s = autograd.step;
		int stop = autograd.stop;
		pthread_mutex_unlock(&autograd.mu);
		if (stop)
			return NULL;
		for (long b = 0; b < opt.buckets; b++) {
			for (long k = b * backward / opt.buckets; k < (b + 1) * backward / opt.buckets; k++)
				launch(autograd.stream, 128);
			if (autograd.comm) {
				if (b == 0)
					autograd.ar_entry[s] = now_ns();
				CALL(ncclAllReduce, autograd.grads + (size_t)b * autograd.count,
				     autograd.reduced + (size_t)b * autograd.count, autograd.count, ncclFloat32, ncclSum,
				     autograd.comm, autograd.stream);
				autograd.allreduce_bytes += autograd.bucket;
			}
		}
		autograd.ar_exit[s] = now_ns();
		if (autograd.comm) {
			CALL(cudaEventRecord, autograd.events[s & 1], autograd.stream);
			atomic_store(&autograd.last_event, s & 1);
		}
		pthread_mutex_lock(&autograd.mu);
		autograd.done_step = s;
		pthread_cond_broadcast(&autograd.cv);
		pthread_mutex_unlock(&autograd.mu);
	}
}

/* ProcessGroupNCCL's watchdog: polls the last collective's event without blocking. */
static void *watchdog_main(void *arg)
{
	(void)arg;
	atomic_store(&autograd.watchdog_tid, (long)syscall(SYS_gettid));
	for (;;) {
		pthread_mutex_lock(&autograd.mu);
		int stop = autograd.stop;
		pthread_mutex_unlock(&autograd.mu);
		if (stop)
			return NULL;
		long e = atomic_load(&autograd.last_event);
		if (e >= 0) {
			uint64_t t0 = now_ns();
			cudaError_t rc = cudaEventQuery(autograd.events[e]);
			record(API_cudaEventQuery, t0);
			if (rc != cudaSuccess && rc != cudaErrorNotReady)
				die(1, "rank %d: cudaEventQuery failed with error %d", rank, (int)rc);
		}
		struct timespec d = {0, 2000000L};
		nanosleep(&d, NULL);
	}
}

/* Runs the backward of step s on the autograd thread and waits for it. */
static void backward(long s)
{
	pthread_mutex_lock(&autograd.mu);
	autograd.step = s;
	pthread_cond_broadcast(&autograd.cv);
	while (autograd.done_step < s)
		pthread_cond_wait(&autograd.cv, &autograd.mu);
	pthread_mutex_unlock(&autograd.mu);
}

/* slow_delay_from is the delay, in microseconds, that the file at path holds as a
 * decimal number, or fallback when it holds none. */
static double slow_delay_from(const char *path, double fallback)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return fallback;
	double us = 0;
	int n = fscanf(f, "%lf", &us);
	fclose(f);
	return n == 1 && us > 0 ? us : fallback;
}

/* mark_slowdown writes the wall-clock time, in nanoseconds since the epoch, into
 * <--slow-while-file>.<what>: "began" as the first slowed step of a slowdown starts,
 * "ended" as the first step after its last slowed one starts. A benchmark times its
 * flag from the first step that is slower, which in steps of 600 ms starts up to a step
 * after the file appeared, and knows that a verdict on the slowdown can come as late
 * after the last slowed step, which ends up to a step after the file went. Written
 * whole and renamed into place, so a reader never sees half a number. */
static void mark_slowdown(const char *what)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char path[PATH_MAX], tmp[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s.%s", opt.slow_while_file, what) >= (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return;
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%llu\n", (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	if (fclose(f) == 0)
		rename(tmp, path);
}

static int run_rank(void)
{
	rank = (int)env_long("RANK", 0);
	world = (int)env_long("WORLD_SIZE", 1);
	local_rank = (int)env_long("LOCAL_RANK", rank);
	tid = (long)syscall(SYS_gettid);
	if (world < 1 || rank < 0 || rank >= world)
		die(2, "RANK=%d WORLD_SIZE=%d is not a rank", rank, world);

	ncclUniqueId id;
	const char *hex = getenv("FAKENCCL_UNIQUE_ID");
	if (hex && strlen(hex) == 2 * NCCL_UNIQUE_ID_BYTES) {
		for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
			unsigned int byte;
			sscanf(hex + 2 * i, "%2x", &byte);
			id.internal[i] = (char)byte;
		}
	} else if (world == 1) {
		if (ncclGetUniqueId(&id) != ncclSuccess)
			die(1, "ncclGetUniqueId failed");
	} else {
		die(2, "rank %d: FAKENCCL_UNIQUE_ID must hold the launcher's unique id (use --spawn)", rank);
	}

	if (!opt.gate_after_init)
		gate();
	uint64_t start = now_ns();
	int slow = rank == opt.slow_rank && opt.slow_us > 0;
	size_t count = (size_t)opt.bucket_bytes / sizeof(float), bucket = count * sizeof(float);
	int count_devices = 0;
	cudaStream_t stream;
	float *grads, *reduced, *host;
	char *ring_send = NULL, *ring_recv = NULL;
	CALL(cudaGetDeviceCount, &count_devices);
	CALL(cudaSetDevice, local_rank % count_devices);
	CALL(cudaStreamCreate, &stream);
	CALL(cudaMalloc, (void **)&grads, bucket * (size_t)opt.buckets);
	CALL(cudaMalloc, (void **)&reduced, bucket * (size_t)opt.buckets);
	if (opt.ring_bytes) {
		CALL(cudaMalloc, (void **)&ring_send, (size_t)opt.ring_bytes);
		CALL(cudaMalloc, (void **)&ring_recv, (size_t)opt.ring_bytes);
	}
	/* Gradients hold rank+1, so every element of the sum is world*(world+1)/2. */
	host = malloc(bucket * (size_t)opt.buckets + (size_t)opt.ring_bytes + 1);
	if (!host)
		die(1, "out of memory");
	for (size_t i = 0; i < count * (size_t)opt.buckets; i++)
		host[i] = (float)(rank + 1);
	CALL(cudaMemcpy, grads, host, bucket * (size_t)opt.buckets, cudaMemcpyHostToDevice);
	if (opt.ring_bytes) {
		memset(host, rank & 0xff, (size_t)opt.ring_bytes);
		CALL(cudaMemcpy, ring_send, host, (size_t)opt.ring_bytes, cudaMemcpyHostToDevice);
	}

	if (opt.ib) {
		int ndev = 0;
		uint64_t t0 = now_ns();
		struct ibv_device **list = ibv_get_device_list(&ndev);
		record(API_ibv_get_device_list, t0);
		if (!list || ndev < 1)
			die(1, "rank %d: no verbs device", rank);
		/* Like NCCL, each rank sends over the NIC next to its GPU: device
		 * local_rank modulo the devices, with a queue pair on it. */
		t0 = now_ns();
		struct ibv_context *ib_ctx = ibv_open_device(list[local_rank % ndev]);
		record(API_ibv_open_device, t0);
		if (!ib_ctx)
			die(1, "rank %d: ibv_open_device: %s", rank, strerror(errno));
		t0 = now_ns();
		struct ibv_pd *pd = ibv_alloc_pd(ib_ctx);
		record(API_ibv_alloc_pd, t0);
		if (!pd)
			die(1, "rank %d: ibv_alloc_pd: %s", rank, strerror(errno));
		struct ibv_qp_init_attr qp_attr = {.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1},
		                                   .qp_type = IBV_QPT_RC};
		t0 = now_ns();
		struct ibv_qp *qp = ibv_create_qp(pd, &qp_attr);
		record(API_ibv_create_qp, t0);
		if (!qp)
			die(1, "rank %d: ibv_create_qp: %s", rank, strerror(errno));
		t0 = now_ns();
		ibv_free_device_list(list);
		record(API_ibv_free_device_list, t0);
		/* parked in ibv_get_async_event until the process exits, as NCCL's thread is */
		pthread_t ib_thread;
		if (pthread_create(&ib_thread, NULL, ib_main, ib_ctx))
			die(1, "cannot start the verbs event thread");
		pthread_detach(ib_thread);
	}

	ncclComm_t comm = NULL;
	int nccl = !opt.no_nccl;
	if (nccl) {
		int comm_size = 0, comm_rank = -1;
		CALL(ncclCommInitRank, &comm, world, id, rank);
		CALL(ncclCommCount, comm, &comm_size);
		CALL(ncclCommUserRank, comm, &comm_rank);
		if (comm_size != world || comm_rank != rank)
			die(1, "rank %d: communicator says rank %d of %d", rank, comm_rank, comm_size);
	}
	if (opt.gate_after_init)
		gate();

	long steps = opt.steps;
	uint64_t *times = calloc((size_t)steps * 5, sizeof(uint64_t));
	if (!times)
		die(1, "out of memory");
	uint64_t *step_start = times, *ar_entry = times + steps, *ar_exit = times + 2 * steps,
	         *step_end = times + 3 * steps, *sync_ns = times + 4 * steps;
	uint64_t verify_errors = 0, allreduce_bytes = 0, send_bytes = 0, recv_bytes = 0;
	const float want = (float)world * (float)(world + 1) / 2;
	const char *mode = opt.slow_mode;
	pthread_t busy[64];
	int busy_started = 0;
	cpu_set_t cpu, unpinned;
	int pytorch = !strcmp(opt.threads, "pytorch");
	pthread_t autograd_thread, watchdog_thread;
	if (pytorch) {
		prctl(PR_SET_NAME, "python3", 0, 0, 0);
		autograd.stream = stream;
		autograd.comm = nccl ? comm : NULL;
		autograd.grads = grads;
		autograd.reduced = reduced;
		autograd.count = count;
		autograd.bucket = bucket;
		autograd.ar_entry = ar_entry;
		autograd.ar_exit = ar_exit;
		if (nccl) {
			CALL(cudaEventCreate, &autograd.events[0]);
			CALL(cudaEventCreate, &autograd.events[1]);
		}
		if (pthread_create(&autograd_thread, NULL, autograd_main, NULL) ||
		    pthread_create(&watchdog_thread, NULL, watchdog_main, NULL))
			die(1, "cannot start the autograd and watchdog threads");
	}

	/* The delay of the slowdown now: --slow-us, or what the --slow-while-file says as
	 * it appears, so that one run can be slowed by several amounts in turn. */
	double slow_us = opt.slow_us;
	int was_slow = 0;
	for (long s = 0; s < steps; s++) {
		/* Every rank looks for the file, not only the slow one: a system call a step
		 * that one rank alone makes is 7 ms/s more CPU time in a job whose host work
		 * sleeps, a difference the straggler loop's CPU-time evidence once flagged
		 * in a healthy job. */
		int file_says_slow = !opt.slow_while_file || access(opt.slow_while_file, F_OK) == 0;
		int slow_now = slow && s >= opt.slow_from_step && file_says_slow;
		if (slow_now && !was_slow && opt.slow_while_file) {
			slow_us = slow_delay_from(opt.slow_while_file, opt.slow_us);
			mark_slowdown("began");
		}
		if (!slow_now && was_slow && opt.slow_while_file)
			mark_slowdown("ended");
		if (!slow_now && was_slow && busy_started) {
			/* The contention ends with the slowdown: its busy threads stop and the
			 * rank may run on any CPU again. Left running, they kept the rank slow
			 * through the healthy minutes after a benchmark's first trial. */
			atomic_store(&stop_busy, 1);
			for (int i = 0; i < busy_started; i++)
				pthread_join(busy[i], NULL);
			busy_started = 0;
			atomic_store(&stop_busy, 0);
			sched_setaffinity(0, sizeof(unpinned), &unpinned);
		}
		was_slow = slow_now;
		uint64_t sync_before = stats[API_cudaStreamSynchronize].total_ns;
		step_start[s] = now_ns();
		host_work((uint64_t)(opt.host_compute_us * 1000.0));
		if (slow_now && !strcmp(mode, "compute"))
			host_work((uint64_t)(slow_us * 1000.0));
		for (long k = 0; k < (pytorch ? opt.compute_kernels / 2 : opt.compute_kernels); k++)
			launch(stream, 128);
		if (slow_now && !strcmp(mode, "kernel")) {
			/* kernels are billed by waves of one block per SM (132 by default) */
			uint64_t waves = (uint64_t)(slow_us / opt.kernel_us + 0.5);
			launch(stream, (unsigned int)(waves ? waves : 1) * 132);
		}
		if (slow_now && !strcmp(mode, "contention")) {
			if (!busy_started) {
				sched_getaffinity(0, sizeof(unpinned), &unpinned);
				CPU_ZERO(&cpu);
				CPU_SET(sched_getcpu(), &cpu);
				sched_setaffinity(0, sizeof(cpu), &cpu);
				for (; busy_started < opt.slow_threads; busy_started++)
					pthread_create(&busy[busy_started], NULL, busy_main, &cpu);
			}
			cpu_work((uint64_t)(slow_us * 1000.0));
		}
		if (pytorch) {
			/* The forward pass queued its kernels without waiting; a data-loader
			 * stall comes before the backward, and backward() returns once the
			 * autograd thread has queued every bucket's all-reduce. */
			if (slow_now && (!strcmp(mode, "stall") || !strcmp(mode, "barrier"))) {
					nanosleep_ns((uint64_t)(slow_us * 1000.0));
			}
			backward(s);
			goto optimizer;
		}
		CALL(cudaStreamSynchronize, stream);
		if (slow_now && (!strcmp(mode, "stall") || !strcmp(mode, "barrier"))) {
			nanosleep_ns((uint64_t)(slow_us * 1000.0));
		}

		ar_entry[s] = now_ns();
		for (long b = 0; nccl && b < opt.buckets; b++) {
			CALL(ncclAllReduce, grads + (size_t)b * count, reduced + (size_t)b * count, count, ncclFloat32,
			     ncclSum, comm, stream);
			allreduce_bytes += bucket;
		}
		ar_exit[s] = now_ns();

		if (nccl && opt.ring_bytes && world > 1) {
			int next = (rank + 1) % world, prev = (rank + world - 1) % world;
			CALL(ncclGroupStart);
			CALL(ncclSend, ring_send, (size_t)opt.ring_bytes, ncclUint8, next, comm, stream);
			CALL(ncclRecv, ring_recv, (size_t)opt.ring_bytes, ncclUint8, prev, comm, stream);
			CALL(ncclGroupEnd);
			send_bytes += (uint64_t)opt.ring_bytes;
			recv_bytes += (uint64_t)opt.ring_bytes;
		}

	optimizer:
		for (long k = 0; k < opt.optimizer_kernels; k++)
			launch(stream, 128);
		CALL(cudaStreamSynchronize, stream);
		/* Results are read only after the sync, as from a GPU: an asynchronous all-reduce
		 * has written nothing when its call returns. What was checked is cleared, so a
		 * result that never lands shows in the next step. Spot-check: a stride through
		 * each bucket plus its end. */
		for (long b = 0; nccl && b < opt.buckets; b++)
			for (size_t i = 0; i < count; i += (i + 1021 < count || i + 1 == count) ? 1021 : count - 1 - i) {
				verify_errors += reduced[(size_t)b * count + i] != want;
				reduced[(size_t)b * count + i] = 0;
			}
		if (nccl && opt.ring_bytes && world > 1) {
			int prev = (rank + world - 1) % world;
			verify_errors += (unsigned char)ring_recv[0] != (prev & 0xff) ||
			                 (unsigned char)ring_recv[opt.ring_bytes - 1] != (prev & 0xff);
			ring_recv[0] = ring_recv[opt.ring_bytes - 1] = (char)~prev;
		}
		step_end[s] = now_ns();
		sync_ns[s] = stats[API_cudaStreamSynchronize].total_ns - sync_before;
	}

	atomic_store(&stop_busy, 1);
	for (int i = 0; i < busy_started; i++)
		pthread_join(busy[i], NULL);
	if (pytorch) {
		pthread_mutex_lock(&autograd.mu);
		autograd.stop = 1;
		pthread_cond_broadcast(&autograd.cv);
		pthread_mutex_unlock(&autograd.mu);
		pthread_join(autograd_thread, NULL);
		pthread_join(watchdog_thread, NULL);
		allreduce_bytes += autograd.allreduce_bytes;
	}
	if (nccl)
		CALL(ncclCommDestroy, comm);
	CALL(cudaFree, grads);
	CALL(cudaFree, reduced);
	if (opt.ring_bytes) {
		CALL(cudaFree, ring_send);
		CALL(cudaFree, ring_recv);
	}
	CALL(cudaStreamDestroy, stream);
	uint64_t end = now_ns();

	printf("{\"rank\":%d,\"local_rank\":%d,\"world_size\":%d,\"pid\":%d,\"tid\":%ld,\"unique_id\":\"", rank,
	       local_rank, world, (int)getpid(), tid);
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
		printf("%02x", (unsigned char)id.internal[i]);
	printf("\",\"autograd_tid\":%ld,\"watchdog_tid\":%ld", atomic_load(&autograd.tid), atomic_load(&autograd.watchdog_tid));
	printf(",\"slow\":%s,\"steps\":%ld,\"bucket_bytes\":%zu,\"buckets\":%ld,\"start_ns\":%llu,\"end_ns\":%llu",
	       slow ? "true" : "false", steps, bucket, opt.buckets, (unsigned long long)start,
	       (unsigned long long)end);
	const char *fields[] = {"calls", "total_ns", "max_ns"};
	for (int f = 0; f < 3; f++) {
		printf(",\"%s\":{", fields[f]);
		for (int a = 0; a < API_COUNT; a++) {
			uint64_t v = f == 0 ? stats[a].calls : f == 1 ? stats[a].total_ns : stats[a].max_ns;
			printf("%s\"%s\":%llu", a ? "," : "", api_names[a], (unsigned long long)v);
		}
		printf("}");
	}
	printf(",\"bytes\":{\"allreduce\":%llu,\"send\":%llu,\"recv\":%llu}", (unsigned long long)allreduce_bytes,
	       (unsigned long long)send_bytes, (unsigned long long)recv_bytes);
	printf(",\"verify_errors\":%llu,\"ib_events\":%ld,\"ib_last_event\":%d", (unsigned long long)verify_errors,
	       atomic_load(&ib_events), atomic_load(&ib_last_event));
	const char *nccl_mode = getenv("FAKENCCL_MODE");
	printf(",\"nccl_mode\":\"%s\"", nccl_mode && !strcmp(nccl_mode, "blocking") ? "blocking" : "async");
	print_array("step_start_ns", step_start, steps);
	print_array("allreduce_entry_ns", ar_entry, steps);
	print_array("allreduce_exit_ns", ar_exit, steps);
	print_array("step_end_ns", step_end, steps);
	print_array("stream_sync_ns", sync_ns, steps);
	printf("}\n");
	fflush(stdout);
	free(times);
	free(host);
	return verify_errors ? 1 : 0;
}

int main(int argc, char **argv)
{
	cli_parse(PROG, flags, NFLAGS, argc, argv);
	if (opt.help) {
		printf("usage: " PROG " [--spawn N] [--flag value]...\n\n"
		       "A DDP-style training loop over the fake libcudart and libnccl. Each rank prints one JSON\n"
		       "line; --spawn N runs N ranks and prints their lines in rank order.\n\n");
		cli_usage(stdout, flags, NFLAGS);
		printf("\nEnvironment: RANK, LOCAL_RANK, WORLD_SIZE, FAKENCCL_UNIQUE_ID (set by --spawn),\n"
		       "FAKENCCL_MODE (async, the default, or blocking), FAKENCCL_QUEUE_DEPTH, FAKENCCL_GBPS,\n"
		       "FAKENCCL_TIMEOUT_MS, FAKENCCL_SLOT_KB, FAKEIBV_EVENT_FIFO, and the FAKEGPU_* knobs.\n"
		       "Exit status: 0 ok, 1 a call failed or results were wrong, 2 bad flags, 3 gate timeout.\n");
		return 0;
	}
	if (opt.spawn < 0 || opt.spawn > MAX_SPAWN || opt.steps < 1 || opt.steps > MAX_STEPS || opt.buckets < 1 ||
	    opt.buckets > 1024 || opt.bucket_bytes < 4 || opt.bucket_bytes % 4 || opt.compute_kernels < 0 ||
	    opt.optimizer_kernels < 0 || opt.kernel_us <= 0 || opt.host_compute_us < 0 || opt.slow_ms < 0 || opt.slow_us < 0 || opt.ring_bytes < 0 ||
	    opt.slow_threads < 0 || opt.slow_threads > 64)
		die(2, "bad flags: --spawn 0..%d, --steps 1..%d, --buckets 1..1024, --bucket-bytes a positive "
		       "multiple of 4, --slow-threads 0..64, no negative values",
		    MAX_SPAWN, MAX_STEPS);
	if (strcmp(opt.threads, "single") && strcmp(opt.threads, "pytorch"))
		die(2, "--threads must be single or pytorch");
	if (opt.slow_ms && opt.slow_us)
		die(2, "--slow-ms and --slow-us are the same delay: give one");
	if (opt.slow_ms)
		opt.slow_us = (double)opt.slow_ms * 1000.0;
	if (strcmp(opt.slow_mode, "compute") && strcmp(opt.slow_mode, "stall") && strcmp(opt.slow_mode, "barrier") &&
	    strcmp(opt.slow_mode, "contention") && strcmp(opt.slow_mode, "kernel"))
		die(2, "--slow-mode must be compute, stall, contention or kernel");
	char kus[32];
	snprintf(kus, sizeof(kus), "%g", opt.kernel_us);
	setenv("FAKEGPU_KERNEL_US", kus, 1);
	if (opt.spawn)
		return spawn_ranks(argc, argv);
	return run_rank();
}
