#define _GNU_SOURCE
#include "engine.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct fg_config fg_cfg;
pthread_mutex_t fg_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static double spin_iters_per_ns;

#define FG_MAX_ALLOCS 4096
struct fg_alloc {
	char *base;
	size_t size;
};
static struct fg_alloc allocs[FG_MAX_ALLOCS];
static int alloc_count;
static uint64_t mem_in_use;

static double env_double(const char *name, double fallback, double min)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return fallback;
	char *end;
	double d = strtod(v, &end);
	if (*end || d < min)
		return fallback;
	return d;
}

uint64_t fg_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin_iterations(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");
}

/*
 * Launch overhead is CPU work, not wall time: a dispatcher starved by other threads on its
 * CPU takes longer to launch, as a real one does. The loop spins in slices of about a
 * microsecond and stops once the thread's own CPU clock has advanced enough, so the cost
 * holds whatever the core's speed (a busy hyperthread sibling slows a fixed loop).
 */
static void calibrate_spin(void)
{
	const uint64_t n = 100000;
	uint64_t t0 = thread_cpu_ns();
	spin_iterations(n);
	uint64_t dt = thread_cpu_ns() - t0;
	spin_iters_per_ns = dt ? (double)n / (double)dt : 1.0;
}

/*
 * The board (FAKEGPU_BOARD, read by the fake libnvidia-ml.so.1; see nvml.c) stands for
 * the node's GPUs. A process runs on the board GPU its CUDA device 0 maps to through
 * CUDA_VISIBLE_DEVICES (a rank launched with CUDA_VISIBLE_DEVICES=3 runs on GPU 3), as
 * a real rank that selects one GPU does. It lists itself in gpu<N>.procs/ from its first
 * CUDA call until it exits, as NVML lists the processes with a context on a GPU, and
 * its kernels run as much longer as the GPU's SM clock is below its maximum: a GPU the
 * board throttles is a slow GPU, not only a number.
 */
static pthread_mutex_t board_lock = PTHREAD_MUTEX_INITIALIZER;
static char board_dir[4096];
static int board_gpu = -1;
static double clock_scale = 1.0;    /* sm_clock_max / sm_clock of the board GPU */
static uint64_t clock_read_ns;      /* when the board GPU's clocks were last read */
#define CLOCK_REREAD_NS 100000000ull /* a throttle shows within 100 ms */

static void board_procs_path(char *out, size_t n, int pid)
{
	snprintf(out, n, "%s/gpu%d.procs/%d", board_dir, board_gpu, pid);
}

static void board_unregister(void)
{
	char path[8192];
	board_procs_path(path, sizeof path, (int)getpid()); /* a forked child has no entry */
	unlink(path);
}

/* physical_gpu maps a CUDA device number to the board GPU through
 * CUDA_VISIBLE_DEVICES ("3" or "4,5,6,7"; unset: the same number). */
static int physical_gpu(int device)
{
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	if (!visible || !*visible)
		return device;
	const char *p = visible;
	for (int i = 0; *p; i++) {
		char *end;
		long n = strtol(p, &end, 10);
		if (end == p || n < 0)
			return device; /* GPU-<uuid> and MIG names: not modelled */
		if (i == device)
			return (int)n;
		p = *end == ',' ? end + 1 : end;
		if (*end != ',')
			break;
	}
	return device;
}

/* FAKEGPU_BOARD_HIDDEN=1 keeps the process off the fake NVML's process lists, as a
 * driver shows no processes to a container that does not share its pid namespace: the
 * process still runs on (and is paced by) the GPU it selected. */
static void write_entry(void)
{
	const char *hidden = getenv("FAKEGPU_BOARD_HIDDEN");
	if (hidden && !strcmp(hidden, "1"))
		return;
	char path[8192];
	snprintf(path, sizeof path, "%s/gpu%d.procs", board_dir, board_gpu);
	mkdir(path, 0755);
	board_procs_path(path, sizeof path, (int)getpid());
	FILE *f = fopen(path, "we");
	if (f) {
		fprintf(f, "0\n");
		fclose(f);
	}
}

/* board_register lists the process on the GPU of its CUDA device 0, at its first CUDA
 * call; fg_board_select moves it when it selects another device. */
static void board_register(void)
{
	const char *b = getenv("FAKEGPU_BOARD");
	if (!b || !*b || strlen(b) >= sizeof board_dir)
		return;
	snprintf(board_dir, sizeof board_dir, "%s", b);
	board_gpu = physical_gpu(0);
	write_entry();
	atexit(board_unregister);
}

void fg_board_select(int device)
{
	fg_init();
	pthread_mutex_lock(&board_lock);
	int gpu = physical_gpu(device);
	if (board_gpu >= 0 && gpu != board_gpu) {
		board_unregister();
		board_gpu = gpu;
		write_entry();
		clock_read_ns = 0; /* the new GPU's clocks at the next launch */
		clock_scale = 1.0;
	}
	pthread_mutex_unlock(&board_lock);
}

/* Reads the board GPU's sm_clock and sm_clock_max (1980 MHz, the fake NVML's
 * defaults, where the file leaves them out). Called with board_lock held. */
static void read_board_clock(void)
{
	char path[8192], line[256];
	unsigned long clock = 1980, most = 1980;
	snprintf(path, sizeof path, "%s/gpu%d", board_dir, board_gpu);
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "sm_clock=", 9) == 0)
			clock = strtoul(line + 9, NULL, 0);
		else if (strncmp(line, "sm_clock_max=", 13) == 0)
			most = strtoul(line + 13, NULL, 0);
	}
	fclose(f);
	clock_scale = clock > 0 && clock < most ? (double)most / (double)clock : 1.0;
}

static void fork_prepare(void) { pthread_mutex_lock(&fg_lock); }
static void fork_release(void) { pthread_mutex_unlock(&fg_lock); }

static void load_config(void)
{
	fg_cfg.kernel_ns = (uint64_t)(env_double("FAKEGPU_KERNEL_US", 20, 0) * 1000);
	fg_cfg.launch_ns = (uint64_t)(env_double("FAKEGPU_LAUNCH_US", 4, 0) * 1000);
	fg_cfg.host_bytes_per_ns = env_double("FAKEGPU_GBPS", 10, 0.001);
	fg_cfg.d2d_bytes_per_ns = env_double("FAKEGPU_D2D_GBPS", 1000, 0.001);
	fg_cfg.sms = (unsigned int)env_double("FAKEGPU_SMS", 132, 1);
	fg_cfg.devices = (int)env_double("FAKEGPU_DEVICES", 1, 0);
	fg_cfg.mem_limit = (uint64_t)env_double("FAKEGPU_MEM_MB", 8192, 1) << 20;
	const char *mode = getenv("FAKEGPU_SYNC");
	fg_cfg.wait_mode = FG_WAIT_BLOCK;
	if (mode && strcmp(mode, "spin") == 0)
		fg_cfg.wait_mode = FG_WAIT_SPIN;
	else if (mode && strcmp(mode, "yield") == 0)
		fg_cfg.wait_mode = FG_WAIT_YIELD;
	calibrate_spin();
	board_register();
	pthread_atfork(fork_prepare, fork_release, fork_release);
}

/* Configuration is read on the first API call, not in a constructor, so a program may set
 * FAKEGPU_* in its own environment before it touches CUDA (the workload's flags do). */
void fg_init(void) { pthread_once(&init_once, load_config); }

void fg_wait_until(uint64_t deadline_ns)
{
	if (fg_cfg.wait_mode == FG_WAIT_BLOCK) {
		struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
		                      .tv_nsec = (long)(deadline_ns % 1000000000ull)};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		return;
	}
	while (fg_now_ns() < deadline_ns)
		if (fg_cfg.wait_mode == FG_WAIT_YIELD)
			sched_yield();
}

void fg_cpu_work(uint64_t ns)
{
	if (!ns)
		return;
	uint64_t slice = (uint64_t)(1000 * spin_iters_per_ns) + 1;
	uint64_t until = thread_cpu_ns() + ns;
	do
		spin_iterations(slice);
	while (thread_cpu_ns() < until);
}

/* A grid runs in waves of one block per SM, so duration grows with ceil(blocks / SMs):
 * a grid that fits the GPU costs one wave, and a caller can ask for a long kernel by
 * launching a big grid. */
uint64_t fg_kernel_ns(uint64_t blocks)
{
	uint64_t waves = (blocks + fg_cfg.sms - 1) / fg_cfg.sms;
	uint64_t ns = (waves ? waves : 1) * fg_cfg.kernel_ns;
	if (board_gpu >= 0) {
		/* Its own lock: the runtime's launches get here without fg_lock. */
		pthread_mutex_lock(&board_lock);
		uint64_t now = fg_now_ns();
		if (now - clock_read_ns >= CLOCK_REREAD_NS) {
			clock_read_ns = now;
			read_board_clock();
		}
		ns = (uint64_t)((double)ns * clock_scale);
		pthread_mutex_unlock(&board_lock);
	}
	return ns;
}

uint64_t fg_copy_ns(size_t bytes, int direction)
{
	switch (direction) {
	case FG_H2D:
	case FG_D2H:
		return (uint64_t)((double)bytes / fg_cfg.host_bytes_per_ns);
	case FG_D2D:
		return (uint64_t)((double)bytes / fg_cfg.d2d_bytes_per_ns);
	default:
		return 0;
	}
}

int fg_mem_alloc(size_t size, void **out)
{
	if (alloc_count == FG_MAX_ALLOCS || size > fg_cfg.mem_limit - mem_in_use)
		return -1;
	/* Never hand out a zero-sized block: each allocation must have a distinct address. */
	char *p = malloc(size ? size : 1);
	if (!p)
		return -1;
	allocs[alloc_count++] = (struct fg_alloc){p, size};
	mem_in_use += size;
	*out = p;
	return 0;
}

int fg_mem_free(void *ptr)
{
	for (int i = 0; i < alloc_count; i++) {
		if (allocs[i].base == ptr) {
			mem_in_use -= allocs[i].size;
			free(ptr);
			allocs[i] = allocs[--alloc_count];
			return 0;
		}
	}
	return -1;
}

int fg_mem_contains(const void *ptr, size_t len)
{
	const char *p = ptr;
	for (int i = 0; i < alloc_count; i++) {
		const struct fg_alloc *a = &allocs[i];
		if (p >= a->base && p < a->base + (a->size ? a->size : 1))
			return len <= (size_t)(a->base + a->size - p);
	}
	return 0;
}

int fg_copy_direction(const void *dst, const void *src)
{
	int dst_dev = fg_mem_contains(dst, 1), src_dev = fg_mem_contains(src, 1);
	if (src_dev && dst_dev)
		return FG_D2D;
	if (dst_dev)
		return FG_H2D;
	if (src_dev)
		return FG_D2H;
	return FG_H2H;
}

uint64_t fg_exec_replay(const struct CUgraphExec_st *exec)
{
	for (uint32_t i = 0; i < exec->node_count; i++) {
		const struct fg_graph_node *n = &exec->nodes[i];
		if (n->bytes)
			memcpy(n->dst, n->src, n->bytes);
	}
	return exec->total_ns;
}
