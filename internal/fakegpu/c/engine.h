/*
 * The simulated device behind the fake CUDA libraries: clocks, the cost model, the wait
 * policy and the device-memory table. libcudart.so.12 and libcuda.so.1 each link their
 * own private copy (hidden visibility), so neither library ever calls the other's public
 * symbols and a probe never sees one API call counted twice.
 */
#ifndef FAKEGPU_ENGINE_H
#define FAKEGPU_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct fg_config {
	uint64_t kernel_ns;        /* one wave of a kernel (FAKEGPU_KERNEL_US) */
	uint64_t launch_ns;        /* CPU cost of any enqueue (FAKEGPU_LAUNCH_US) */
	double host_bytes_per_ns;  /* H2D/D2H link (FAKEGPU_GBPS, 1 GB/s = 1 byte/ns) */
	double d2d_bytes_per_ns;   /* device memory (FAKEGPU_D2D_GBPS) */
	unsigned int sms;          /* blocks per wave (FAKEGPU_SMS) */
	int devices;               /* FAKEGPU_DEVICES */
	int wait_mode;             /* FAKEGPU_SYNC: how a host thread waits for the device */
	uint64_t mem_limit;        /* FAKEGPU_MEM_MB: device memory capacity */
};

enum { FG_WAIT_BLOCK, FG_WAIT_SPIN, FG_WAIT_YIELD };

/* Copy directions, numbered like enum cudaMemcpyKind. */
enum { FG_H2H = 0, FG_H2D = 1, FG_D2H = 2, FG_D2D = 3 };

extern struct fg_config fg_cfg;
/* One lock per library: the fake device is small and calls are short, and a fork handler
 * keeps the lock consistent in children (DataLoader-style workers fork a CUDA process). */
extern pthread_mutex_t fg_lock;

void fg_init(void);
uint64_t fg_now_ns(void);
void fg_wait_until(uint64_t deadline_ns);
void fg_cpu_work(uint64_t ns);
uint64_t fg_kernel_ns(uint64_t blocks);
/* The process now runs on CUDA device `device`: on the board (FAKEGPU_BOARD), its
 * entry moves to that device's GPU, whose clocks pace its kernels from then on. */
void fg_board_select(int device);
uint64_t fg_copy_ns(size_t bytes, int direction);
static inline uint64_t fg_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Device memory is host memory handed out from a bounded table; the table lets a copy
 * check its device side and lets cudaMemcpyDefault infer the direction. Caller holds
 * fg_lock. */
int fg_mem_alloc(size_t size, void **out);
int fg_mem_free(void *ptr);
int fg_mem_contains(const void *ptr, size_t len);
int fg_copy_direction(const void *dst, const void *src);

/*
 * Graph nodes and executable graphs. The executable graph's layout is shared by both
 * libraries because cuGraphLaunch (driver) accepts graphs instantiated through the
 * runtime, as in real CUDA, where CUgraphExec and cudaGraphExec_t are one type.
 */
#define FG_GRAPH_MAX_NODES 4096
#define FG_EXEC_MAGIC 0x66676578u /* "fgex" */

struct fg_graph_node {
	uint64_t ns;
	void *dst;        /* copy nodes only */
	const void *src;
	size_t bytes;
};

struct CUgraphExec_st {
	uint32_t magic;
	uint32_t live;
	uint32_t node_count;
	uint64_t total_ns;
	struct fg_graph_node *nodes;
};

/* Performs the copy nodes and returns the device time the whole graph takes. */
uint64_t fg_exec_replay(const struct CUgraphExec_st *exec);

#endif
