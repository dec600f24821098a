/*
 * libnccl.so.2: NCCL collectives and point-to-point between rank processes on one host.
 *
 * Ranks of a communicator share one POSIX shared-memory region named from the unique id.
 * Every wait sleeps on a futex in the shared region. FAKENCCL_GBPS adds bus time (0
 * disables it). Two modes, chosen by FAKENCCL_MODE (the same on every rank):
 *
 * async (the default), like NCCL: a collective is enqueued on the CUDA stream passed to
 * it and the call returns after the CPU cost of a launch. The rank copies its send buffer
 * into its part of a shared ring entry (FAKENCCL_QUEUE_DEPTH entries per communicator) and
 * publishes where its stream reaches the collective; libcudart (fake_hooks.h) makes later
 * work on the stream wait for the collective's completion. The collective completes on
 * the device timeline when every rank's stream has reached it, plus bus time:
 *
 *   arrival(k, r)  = max(completion(k-1) + A_r, B_r)  if r's stream was still behind k-1
 *                  = B_r                              otherwise
 *   completion(k)  = max over ranks r of arrival(k, r) + bus(k)
 *
 * where A_r is the device time r queued on the stream between k-1 and k, and B_r is the
 * time the stream reaches k counting only work whose start was known (each op's enqueue
 * time plus its duration, and the collective's own enqueue time). Every rank computes the
 * same completion from the published (A, B). A host learns it only when it synchronizes
 * (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a blocking copy,
 * cudaFree): libcudart calls the resolver here, which waits until every rank has
 * published k, computes completion(k), writes this rank's result bytes from the ring and
 * frees the rank's hold on the entry; libcudart then sleeps until completion(k). So a
 * late rank's peers wait in their next synchronizing call and the late rank itself waits
 * least, as on a cluster. A rank may run FAKENCCL_QUEUE_DEPTH collectives ahead of the
 * slowest rank's host; the next enqueue blocks until the slot is free, as a full launch
 * queue does. A collective larger than FAKENCCL_SLOT_KB per rank is refused in this mode.
 * Send/recv and ncclCommSplit's exchange still complete on the host inside the call (at
 * ncclGroupEnd in a group), as in blocking mode.
 *
 * blocking (FAKENCCL_MODE=blocking), the fake's original model: collectives copy and
 * reduce real bytes through per-rank slots, in chunks, separated by a cross-process
 * barrier, and return only when complete on the host, ignoring the stream; a rank that
 * enters late makes every peer wait inside the collective call. Send/recv pair up through
 * per-pair channels in both modes.
 *
 * An aborted communicator (ncclCommAbort on any rank) or a peer silent for
 * FAKENCCL_TIMEOUT_MS completes whatever a host waits on at once, with the error reported
 * by ncclCommGetAsyncError, so no host waits forever.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_hooks.h"
#include "fake_nccl.h"

#define MAX_RANKS 256
#define MAX_GROUP_OPS 4096
#define MAX_QUEUE_DEPTH 64
#define MAX_LOCAL_COMMS 1024 /* communicators one process has in async mode */
#define DEP_SEQ_BITS 40
#define COMM_MAGIC 0x6e63636cu
#define ID_MAGIC "fakenccl"

/* One cache line of bookkeeping per direction pair, followed by its data. */
struct channel {
	_Atomic uint64_t sent, taken;
	uint64_t len;
	char pad[40];
};

struct shm_header {
	_Atomic uint32_t nranks;   /* claimed by the first rank to attach */
	_Atomic uint32_t aborted;  /* set by ncclCommAbort on any rank */
	_Atomic uint64_t arrivals; /* barrier: total arrivals, never reset */
	_Atomic uint32_t progress; /* futex word, bumped on every change */
	_Atomic uint32_t mode;     /* mode_word() of the first rank to attach */
};

/* Async mode, one cache line per rank: how many collectives it has resolved. */
struct rank_line {
	_Atomic uint64_t resolved;
	char pad[56];
};

/* Async mode, one per ring entry and rank: where the rank's stream reaches the collective. */
struct ring_meta {
	_Atomic uint64_t published; /* sequence + 1 once a, b and the data are in */
	uint64_t a, b;
	uint32_t after_prev;
	char pad[36];
};

enum op_kind { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST, OP_REDUCE, OP_SEND, OP_RECV };

struct op {
	enum op_kind kind;
	struct ncclComm *comm;
	const char *send;
	char *recv;
	size_t count; /* elements: per rank for allgather/reducescatter */
	size_t esize;
	ncclDataType_t type;
	ncclRedOp_t redop;
	int root; /* root, or peer for send/recv */
	size_t done, chunk;
	int phase;
	uint64_t target;
	int finished;
	cudaStream_t stream;
};

/* Async mode: this process's side of one collective in flight. */
struct pending {
	struct op op;
	uint64_t bus_ns;
};

struct ncclComm {
	uint32_t magic;
	int nranks, rank, device;
	struct shm_header *shm;
	size_t map_bytes;
	char *slots, *chans;
	size_t slot_bytes, chan_bytes;
	ncclUniqueId id;
	char shm_name[96];
	uint64_t episodes; /* barrier episodes this rank has arrived at */
	unsigned int splits;
	ncclResult_t async_error;
	/* async mode */
	int async, local_index;
	unsigned int depth;
	struct rank_line *lines;
	struct ring_meta *meta; /* depth x nranks */
	char *ring;             /* depth x nranks slots */
	struct pending *pending; /* depth */
	uint64_t enqueued, resolved, last_complete;
	pthread_mutex_t lock; /* recursive: a resolver may run inside an enqueue */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t env_u64(const char *name, uint64_t fallback)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return fallback;
	unsigned long long n = strtoull(v, &end, 10);
	return *end ? fallback : n;
}

static double bus_gbps(void)
{
	const char *v = getenv("FAKENCCL_GBPS");
	return v && *v ? atof(v) : 20.0;
}

/* ---- mode (FAKENCCL_MODE, FAKENCCL_QUEUE_DEPTH), read once on the first call ---- */

static pthread_once_t mode_once = PTHREAD_ONCE_INIT;
static int async_mode = 1, mode_bad;
static unsigned int queue_depth = 8;

static int resolve_dep(uint64_t dep);
static void drain(struct ncclComm *c);

static void load_mode(void)
{
	const char *m = getenv("FAKENCCL_MODE");
	if (m && *m && strcmp(m, "async") != 0) {
		if (strcmp(m, "blocking") == 0) {
			async_mode = 0;
		} else {
			mode_bad = 1;
			fprintf(stderr, "fakenccl: FAKENCCL_MODE=%s: want async (the default) or blocking\n", m);
		}
	}
	const char *d = getenv("FAKENCCL_QUEUE_DEPTH");
	if (d && *d) {
		char *end;
		unsigned long n = strtoul(d, &end, 10);
		if (*end || n < 1 || n > MAX_QUEUE_DEPTH) {
			mode_bad = 1;
			fprintf(stderr, "fakenccl: FAKENCCL_QUEUE_DEPTH=%s: want 1..%d\n", d, MAX_QUEUE_DEPTH);
		} else {
			queue_depth = (unsigned int)n;
		}
	}
	if (async_mode && !mode_bad)
		fakegpu_set_resolver(resolve_dep);
}

/* What a communicator's ranks must agree on, stored in the shared header. */
static uint32_t mode_word(void) { return async_mode ? 2u | queue_depth << 8 : 1u; }

static __attribute__((noinline)) void enter(void) { __asm__ volatile("" ::: "memory"); }

static void bump(struct shm_header *h)
{
	atomic_fetch_add(&h->progress, 1);
	syscall(SYS_futex, &h->progress, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void sleep_on(struct shm_header *h, uint32_t seen, long max_ns)
{
	struct timespec ts = {0, max_ns};
	syscall(SYS_futex, &h->progress, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static size_t type_size(ncclDataType_t t)
{
	static const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
	return (unsigned)t < ncclNumTypes ? sizes[t] : 0;
}

/* ---- reductions ---- */

static float bf16_to_float(uint16_t v)
{
	uint32_t bits = (uint32_t)v << 16;
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static uint16_t float_to_bf16(float f)
{
	uint32_t bits;
	memcpy(&bits, &f, sizeof(bits));
	if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
		return (uint16_t)((bits >> 16) | 0x40);
	bits += 0x7fffu + ((bits >> 16) & 1); /* round to nearest even */
	return (uint16_t)(bits >> 16);
}

#define COMBINE(acc, v, op)                                                      \
	switch (op) {                                                            \
	case ncclProd: acc = acc * v; break;                                     \
	case ncclMax: acc = v > acc ? v : acc; break;                           \
	case ncclMin: acc = v < acc ? v : acc; break;                           \
	default: acc = acc + v; break; /* ncclSum, ncclAvg */                   \
	}

#define REDUCE_AS(T, LOAD, STORE)                                                           \
	for (size_t i = 0; i < n; i++) {                                                     \
		T acc = LOAD(((const T##_raw *)(src[0]))[i]);                                \
		for (int r = 1; r < nsrc; r++) {                                             \
			T v = LOAD(((const T##_raw *)(src[r]))[i]);                          \
			COMBINE(acc, v, op);                                                 \
		}                                                                            \
		if (op == ncclAvg)                                                           \
			acc = acc / (T)nsrc;                                                 \
		((T##_raw *)dst)[i] = STORE(acc);                                            \
	}

typedef int8_t i8;
typedef uint8_t u8;
typedef int32_t i32;
typedef uint32_t u32;
typedef int64_t i64;
typedef uint64_t u64;
typedef double f64;
typedef float f32;
typedef i8 i8_raw;
typedef u8 u8_raw;
typedef i32 i32_raw;
typedef u32 u32_raw;
typedef i64 i64_raw;
typedef u64 u64_raw;
typedef f32 f32_raw;
typedef f64 f64_raw;
typedef float h16;
typedef _Float16 h16_raw;
typedef float b16;
typedef uint16_t b16_raw;
#define AS_IS(x) (x)
#define TO_FLOAT(x) ((float)(x))
#define TO_HALF(x) ((_Float16)(x))

/* dst[i] = op over r of src[r][i]; dst may alias one of the sources. */
static void reduce(void *dst, const void *const *src, int nsrc, size_t n, ncclDataType_t t, ncclRedOp_t op)
{
	switch (t) {
	case ncclInt8: REDUCE_AS(i8, AS_IS, AS_IS); break;
	case ncclUint8: REDUCE_AS(u8, AS_IS, AS_IS); break;
	case ncclInt32: REDUCE_AS(i32, AS_IS, AS_IS); break;
	case ncclUint32: REDUCE_AS(u32, AS_IS, AS_IS); break;
	case ncclInt64: REDUCE_AS(i64, AS_IS, AS_IS); break;
	case ncclUint64: REDUCE_AS(u64, AS_IS, AS_IS); break;
	case ncclFloat16: REDUCE_AS(h16, TO_FLOAT, TO_HALF); break;
	case ncclFloat32: REDUCE_AS(f32, AS_IS, AS_IS); break;
	case ncclFloat64: REDUCE_AS(f64, AS_IS, AS_IS); break;
	case ncclBfloat16: REDUCE_AS(b16, bf16_to_float, float_to_bf16); break;
	default: break;
	}
}

/* ---- communicators ---- */

static int valid_comm(const struct ncclComm *c) { return c && c->magic == COMM_MAGIC; }

static char *slot(struct ncclComm *c, int r) { return c->slots + (size_t)r * c->slot_bytes; }

static struct channel *chan(struct ncclComm *c, int src, int dst)
{
	size_t stride = sizeof(struct channel) + c->chan_bytes;
	return (struct channel *)(c->chans + ((size_t)src * (size_t)c->nranks + (size_t)dst) * stride);
}

/* Arrives at the next barrier episode and returns the arrival count that completes it.
 * Every rank arrives once per episode, so episode k is complete exactly when all ranks'
 * k-th arrivals are in: arrivals >= k * nranks. */
static uint64_t arrive(struct ncclComm *c)
{
	atomic_fetch_add(&c->shm->arrivals, 1);
	bump(c->shm);
	return ++c->episodes * (uint64_t)c->nranks;
}

static int arrived(struct ncclComm *c, uint64_t target) { return atomic_load(&c->shm->arrivals) >= target; }

/* Async mode: the communicators of this process, so that a dep handed to libcudart names
 * one (dep = (index + 1) << DEP_SEQ_BITS | sequence). A communicator leaves the table
 * only after all its collectives are resolved, so libcudart never holds a stale dep. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *local_comms[MAX_LOCAL_COMMS];

static ncclResult_t register_comm(struct ncclComm *c)
{
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&c->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	if (!(c->pending = calloc(c->depth, sizeof(*c->pending))))
		return ncclSystemError;
	pthread_mutex_lock(&table_lock);
	for (int i = 0; i < MAX_LOCAL_COMMS && c->local_index < 0; i++)
		if (!local_comms[i])
			local_comms[c->local_index = i] = c;
	pthread_mutex_unlock(&table_lock);
	if (c->local_index < 0) {
		fprintf(stderr, "fakenccl: more than %d communicators in one process\n", MAX_LOCAL_COMMS);
		free(c->pending);
		c->pending = NULL;
		return ncclSystemError;
	}
	return ncclSuccess;
}

/* After this, no resolver runs on c: one that found it in the table holds its lock. */
static void unregister_comm(struct ncclComm *c)
{
	if (c->local_index < 0)
		return;
	pthread_mutex_lock(&table_lock);
	local_comms[c->local_index] = NULL;
	pthread_mutex_unlock(&table_lock);
	pthread_mutex_lock(&c->lock);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_destroy(&c->lock);
	c->local_index = -1;
}

/* Attaches to (creating if first) the shared region of a communicator and arrives at the
 * join barrier; comm_join waits for that barrier. Split in two so ncclCommInitAll can
 * attach all of its ranks from one thread. */
static ncclResult_t comm_attach(struct ncclComm **out, int nranks, const ncclUniqueId *id, int rank)
{
	pthread_once(&mode_once, load_mode);
	if (mode_bad)
		return ncclInvalidArgument;
	if (!out || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	if (memcmp(id->internal, ID_MAGIC, 8) != 0)
		return ncclInvalidUsage;
	struct ncclComm *c = calloc(1, sizeof(*c));
	if (!c)
		return ncclSystemError;
	c->magic = COMM_MAGIC;
	c->nranks = nranks;
	c->rank = rank;
	c->id = *id;
	const char *env_dev = getenv("LOCAL_RANK");
	c->device = env_dev ? atoi(env_dev) : rank;
	snprintf(c->shm_name, sizeof(c->shm_name), "/fakenccl-");
	for (int i = 8; i < 36; i++)
		snprintf(c->shm_name + strlen(c->shm_name), 3, "%02x", (unsigned char)id->internal[i]);

	/* Shared memory is sized from nranks and the mode alone, so every rank computes the
	 * same size; it is sparse until touched. Channel buffers shrink as the pair count grows.
	 * Layout: header, per-rank lines, ring metadata, blocking-mode slots, ring slots, channels. */
	uint64_t slot_bytes = env_u64("FAKENCCL_SLOT_KB", 1024) << 10;
	uint64_t chan_bytes = (16ull << 20) / ((uint64_t)nranks * (uint64_t)nranks);
	chan_bytes = chan_bytes > (256u << 10) ? (256u << 10) : chan_bytes < 4096 ? 4096 : chan_bytes & ~63ull;
	if (slot_bytes < 4096)
		slot_bytes = 4096;
	size_t header = 4096;
	size_t depth = async_mode ? queue_depth : 0;
	size_t lines = (size_t)nranks * sizeof(struct rank_line);
	size_t meta = depth * (size_t)nranks * sizeof(struct ring_meta);
	size_t bytes = header + lines + meta + (size_t)nranks * slot_bytes + depth * (size_t)nranks * slot_bytes +
	               (size_t)nranks * (size_t)nranks * (sizeof(struct channel) + chan_bytes);

	/* Grow only: a rank whose settings differ must fail the mode check below, not shrink
	 * the region under its peers. */
	int fd = shm_open(c->shm_name, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || ((size_t)st.st_size < bytes && ftruncate(fd, (off_t)bytes) != 0)) {
		if (fd >= 0)
			close(fd);
		free(c);
		return ncclSystemError;
	}
	void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		free(c);
		return ncclSystemError;
	}
	c->shm = map;
	c->map_bytes = bytes;
	c->lines = (struct rank_line *)((char *)map + header);
	c->meta = (struct ring_meta *)((char *)c->lines + lines);
	c->slots = (char *)c->meta + meta;
	c->ring = c->slots + (size_t)nranks * slot_bytes;
	c->chans = c->ring + depth * (size_t)nranks * slot_bytes;
	c->slot_bytes = slot_bytes;
	c->chan_bytes = chan_bytes;
	c->async = async_mode;
	c->depth = (unsigned int)depth;
	c->local_index = -1;

	uint32_t expected = 0;
	if (!atomic_compare_exchange_strong(&c->shm->nranks, &expected, (uint32_t)nranks) &&
	    expected != (uint32_t)nranks) {
		munmap(map, bytes);
		free(c);
		return ncclInvalidUsage;
	}
	expected = 0;
	if (!atomic_compare_exchange_strong(&c->shm->mode, &expected, mode_word()) && expected != mode_word()) {
		fprintf(stderr, "fakenccl: rank %d: FAKENCCL_MODE or FAKENCCL_QUEUE_DEPTH differs from its peers'\n", rank);
		munmap(map, bytes);
		free(c);
		return ncclInvalidUsage;
	}
	if (c->async && register_comm(c) != ncclSuccess) {
		munmap(map, bytes);
		free(c);
		return ncclSystemError;
	}
	*out = c;
	return ncclSuccess;
}

static ncclResult_t wait_barrier(struct ncclComm *c, uint64_t target, uint64_t deadline)
{
	for (;;) {
		uint32_t seen = atomic_load(&c->shm->progress);
		if (atomic_load(&c->shm->aborted))
			return c->async_error = ncclRemoteError;
		if (arrived(c, target))
			return ncclSuccess;
		if (now_ns() > deadline)
			return c->async_error = ncclSystemError;
		sleep_on(c->shm, seen, 100000000L);
	}
}

static uint64_t deadline_from_now(void)
{
	return now_ns() + env_u64("FAKENCCL_TIMEOUT_MS", 120000) * 1000000ull;
}

static void comm_free(struct ncclComm *c)
{
	if (c->async)
		unregister_comm(c);
	c->magic = 0;
	munmap(c->shm, c->map_bytes);
	free(c->pending);
	free(c);
}

/* The name is removed once everybody is attached, so nothing lingers in /dev/shm. */
static ncclResult_t comm_join(struct ncclComm *c, uint64_t target)
{
	ncclResult_t rc = wait_barrier(c, target, deadline_from_now());
	if (rc != ncclSuccess || c->rank == 0)
		shm_unlink(c->shm_name);
	return rc;
}

static ncclResult_t comm_init(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank)
{
	struct ncclComm *c;
	ncclResult_t rc = comm_attach(&c, nranks, id, rank);
	if (rc != ncclSuccess)
		return rc;
	if ((rc = comm_join(c, arrive(c))) != ncclSuccess) {
		comm_free(c);
		return rc;
	}
	*out = c;
	return ncclSuccess;
}

FAKEGPU_API ncclResult_t ncclGetVersion(int *version)
{
	enter();
	if (!version)
		return ncclInvalidArgument;
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

FAKEGPU_API const char *ncclGetErrorString(ncclResult_t result)
{
	enter();
	switch (result) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error";
	case ncclSystemError: return "unhandled system error (or timeout waiting for peers)";
	case ncclInternalError: return "internal error";
	case ncclInvalidArgument: return "invalid argument";
	case ncclInvalidUsage: return "invalid usage";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

/* Layout: "fakenccl", 16 random bytes (the shared-memory name), the creator's pid. */
FAKEGPU_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	enter();
	if (!uniqueId)
		return ncclInvalidArgument;
	memset(uniqueId, 0, sizeof(*uniqueId));
	memcpy(uniqueId->internal, ID_MAGIC, 8);
	if (getrandom(uniqueId->internal + 8, 16, 0) != 16)
		return ncclSystemError;
	uint32_t pid = (uint32_t)getpid();
	memcpy(uniqueId->internal + 24, &pid, sizeof(pid));
	return ncclSuccess;
}

FAKEGPU_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	enter();
	return comm_init(comm, nranks, &commId, rank);
}

FAKEGPU_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                                ncclConfig_t *config)
{
	(void)config;
	enter();
	return comm_init(comm, nranks, &commId, rank);
}

FAKEGPU_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	enter();
	if (!comms || ndev < 1 || ndev > MAX_RANKS)
		return ncclInvalidArgument;
	ncclUniqueId id;
	memset(&id, 0, sizeof(id));
	memcpy(id.internal, ID_MAGIC, 8);
	if (getrandom(id.internal + 8, 16, 0) != 16)
		return ncclSystemError;
	uint64_t targets[MAX_RANKS];
	ncclResult_t rc = ncclSuccess;
	int attached = 0;
	for (; attached < ndev && rc == ncclSuccess; attached++) {
		rc = comm_attach(&comms[attached], ndev, &id, attached);
		if (rc == ncclSuccess) {
			comms[attached]->device = devlist ? devlist[attached] : attached;
			targets[attached] = arrive(comms[attached]);
		}
	}
	if (rc != ncclSuccess)
		attached--;
	for (int i = 0; i < attached; i++) {
		ncclResult_t r = rc == ncclSuccess ? comm_join(comms[i], targets[i]) : ncclSuccess;
		if (rc == ncclSuccess)
			rc = r;
	}
	if (rc != ncclSuccess) {
		shm_unlink(comms[0]->shm_name);
		for (int i = 0; i < attached; i++)
			comm_free(comms[i]);
	}
	return rc;
}

FAKEGPU_API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	enter();
	if (!comm)
		return ncclSuccess;
	if (!valid_comm(comm))
		return ncclInvalidArgument;
	/* Its collectives finish before the communicator goes, so no stream waits on one
	 * that nobody can resolve any more. */
	if (comm->async)
		drain(comm);
	comm_free(comm);
	return ncclSuccess;
}

/* Peers blocked in this communicator see the abort and fail with ncclRemoteError. */
FAKEGPU_API ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	enter();
	if (!comm)
		return ncclSuccess;
	if (!valid_comm(comm))
		return ncclInvalidArgument;
	atomic_store(&comm->shm->aborted, 1);
	bump(comm->shm);
	if (comm->async)
		drain(comm); /* no waiting now: what is in flight completes at once */
	comm_free(comm);
	return ncclSuccess;
}

FAKEGPU_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	enter();
	if (!valid_comm(comm) || !count)
		return ncclInvalidArgument;
	*count = comm->nranks;
	return ncclSuccess;
}

FAKEGPU_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	enter();
	if (!valid_comm(comm) || !rank)
		return ncclInvalidArgument;
	*rank = comm->rank;
	return ncclSuccess;
}

FAKEGPU_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	enter();
	if (!valid_comm(comm) || !device)
		return ncclInvalidArgument;
	*device = comm->device;
	return ncclSuccess;
}

FAKEGPU_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	enter();
	if (!valid_comm(comm) || !asyncError)
		return ncclInvalidArgument;
	*asyncError = atomic_load(&comm->shm->aborted) ? ncclRemoteError : comm->async_error;
	return ncclSuccess;
}

/* ---- operations: every collective and p2p call becomes a small state machine, so a
 * group can advance many of them from one thread without deadlocking ---- */

static __thread struct op *group_ops;
static __thread int group_len, group_cap, group_depth;
static __thread ncclResult_t group_error;

static size_t chunk_elems(const struct op *o)
{
	size_t per = o->comm->slot_bytes / o->esize;
	if (o->kind == OP_REDUCESCATTER)
		per /= (size_t)o->comm->nranks;
	return per ? per : 1;
}

/* Where rank r's part of a collective is: the blocking mode's slot, or the ring entry of
 * the collective with sequence seq. */
typedef char *(*slot_fn)(struct ncclComm *c, int r, uint64_t seq);

static char *blocking_slot(struct ncclComm *c, int r, uint64_t seq)
{
	(void)seq;
	return slot(c, r);
}

static char *ring_slot(struct ncclComm *c, int r, uint64_t seq)
{
	return c->ring + ((size_t)(seq % c->depth) * (size_t)c->nranks + (size_t)r) * c->slot_bytes;
}

/* Copies this rank's part of the current chunk (o->chunk elements from o->done) in. */
static void deposit(struct op *o, char *mine)
{
	struct ncclComm *c = o->comm;
	size_t n = o->chunk, es = o->esize, off = o->done;
	switch (o->kind) {
	case OP_ALLREDUCE:
	case OP_REDUCE:
	case OP_ALLGATHER:
		memcpy(mine, o->send + off * es, n * es);
		break;
	case OP_BROADCAST:
		if (c->rank == o->root)
			memcpy(mine, o->send + off * es, n * es);
		break;
	case OP_REDUCESCATTER:
		for (int j = 0; j < c->nranks; j++)
			memcpy(mine + (size_t)j * n * es, o->send + ((size_t)j * o->count + off) * es, n * es);
		break;
	default:
		break;
	}
}

/* Produces this rank's result of the current chunk from every rank's part. */
static void collect(struct op *o, slot_fn slot, uint64_t seq)
{
	struct ncclComm *c = o->comm;
	size_t n = o->chunk, es = o->esize, off = o->done;
	const void *src[MAX_RANKS];
	switch (o->kind) {
	case OP_ALLREDUCE:
	case OP_REDUCE:
		if (o->kind == OP_REDUCE && c->rank != o->root)
			break;
		for (int r = 0; r < c->nranks; r++)
			src[r] = slot(c, r, seq);
		reduce(o->recv + off * es, src, c->nranks, n, o->type, o->redop);
		break;
	case OP_REDUCESCATTER:
		for (int r = 0; r < c->nranks; r++)
			src[r] = slot(c, r, seq) + (size_t)c->rank * n * es;
		reduce(o->recv + off * es, src, c->nranks, n, o->type, o->redop);
		break;
	case OP_BROADCAST:
		memcpy(o->recv + off * es, slot(c, o->root, seq), n * es);
		break;
	case OP_ALLGATHER:
		for (int r = 0; r < c->nranks; r++)
			memcpy(o->recv + ((size_t)r * o->count + off) * es, slot(c, r, seq), n * es);
		break;
	default:
		break;
	}
}

static int is_p2p(const struct op *o) { return o->kind == OP_SEND || o->kind == OP_RECV; }

/* Operations sharing a resource run in call order. Messages between one pair flow in
 * order, so only the oldest unfinished send (or recv) towards a peer may use the pair's
 * channel; collectives of one communicator share its slots and barrier, so only the
 * oldest unfinished one may run. */
static int may_run(const struct op *ops, int idx)
{
	const struct op *o = &ops[idx];
	for (int i = 0; i < idx; i++) {
		const struct op *p = &ops[i];
		if (p->finished || p->comm != o->comm)
			continue;
		if (is_p2p(o) ? p->kind == o->kind && p->root == o->root : !is_p2p(p))
			return 0;
	}
	return 1;
}

/* Advances one operation as far as it can without waiting; returns 1 on any progress. */
static int advance(struct op *ops, int idx)
{
	struct op *o = &ops[idx];
	struct ncclComm *c = o->comm;
	size_t total = o->count * o->esize;
	if (!may_run(ops, idx))
		return 0;
	if (is_p2p(o)) {
		int sending = o->kind == OP_SEND;
		struct channel *ch = sending ? chan(c, c->rank, o->root) : chan(c, o->root, c->rank);
		char *data = (char *)(ch + 1);
		uint64_t sent = atomic_load_explicit(&ch->sent, memory_order_acquire);
		uint64_t taken = atomic_load_explicit(&ch->taken, memory_order_acquire);
		if (sending && sent == taken) {
			size_t n = total - o->done < c->chan_bytes ? total - o->done : c->chan_bytes;
			memcpy(data, o->send + o->done, n);
			ch->len = n;
			atomic_store_explicit(&ch->sent, sent + 1, memory_order_release);
			o->done += n;
		} else if (!sending && sent > taken) {
			size_t n = ch->len < total - o->done ? ch->len : total - o->done;
			memcpy(o->recv + o->done, data, n);
			atomic_store_explicit(&ch->taken, taken + 1, memory_order_release);
			o->done += ch->len ? ch->len : 1;
		} else {
			return 0;
		}
		/* a zero-byte message still travels once, so its recv completes */
		o->finished = o->done >= total;
		bump(c->shm);
		return 1;
	}
	switch (o->phase) {
	case 0:
		o->chunk = o->count - o->done < chunk_elems(o) ? o->count - o->done : chunk_elems(o);
		deposit(o, slot(c, c->rank));
		o->target = arrive(c);
		o->phase = 1;
		return 1;
	case 1:
		if (!arrived(c, o->target))
			return 0;
		collect(o, blocking_slot, 0);
		o->target = arrive(c);
		o->phase = 2;
		return 1;
	default:
		if (!arrived(c, o->target))
			return 0;
		o->done += o->chunk;
		o->phase = 0;
		o->finished = o->done >= o->count;
		return 1;
	}
}

static uint64_t bus_bytes(const struct op *o)
{
	uint64_t n = (uint64_t)o->comm->nranks, bytes = o->count * o->esize;
	switch (o->kind) {
	case OP_ALLREDUCE: return 2 * (n - 1) * bytes / n;
	case OP_ALLGATHER:
	case OP_REDUCESCATTER: return (n - 1) * bytes;
	default: return bytes;
	}
}

/* Runs operations to completion, sleeping on a futex whenever none can move. */
static ncclResult_t execute(struct op *ops, int n)
{
	uint64_t deadline = deadline_from_now();
	uint64_t bus = 0;
	int left = 0;
	for (int i = 0; i < n; i++) {
		ops[i].finished = !is_p2p(&ops[i]) && ops[i].count == 0;
		left += !ops[i].finished;
		bus += bus_bytes(&ops[i]);
	}
	while (left) {
		struct ncclComm *waiting = NULL;
		uint32_t seen = 0;
		int moved = 0;
		for (int i = 0; i < n; i++) {
			if (ops[i].finished)
				continue;
			if (!waiting) {
				waiting = ops[i].comm;
				seen = atomic_load(&waiting->shm->progress);
			}
			if (atomic_load(&ops[i].comm->shm->aborted))
				return ops[i].comm->async_error = ncclRemoteError;
			while (!ops[i].finished && advance(ops, i))
				moved = 1;
			left -= ops[i].finished;
		}
		if (!left || moved)
			continue;
		if (now_ns() > deadline)
			return waiting->async_error = ncclSystemError;
		/* with several communicators in play a wake may come on another one */
		sleep_on(waiting->shm, seen, n > 1 ? 1000000L : 100000000L);
	}
	double gbps = bus_gbps();
	if (gbps > 0 && bus) {
		uint64_t ns = (uint64_t)((double)bus / gbps);
		struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
		nanosleep(&ts, NULL);
	}
	return ncclSuccess;
}

/* ---- async mode: collectives in flight on the device timeline ---- */

static uint64_t dep_of(const struct ncclComm *c, uint64_t seq)
{
	return (uint64_t)(c->local_index + 1) << DEP_SEQ_BITS | (seq & ((1ull << DEP_SEQ_BITS) - 1));
}

static struct ring_meta *ring_meta(struct ncclComm *c, int r, uint64_t seq)
{
	return &c->meta[(seq % c->depth) * (size_t)c->nranks + (size_t)r];
}

static int all_published(struct ncclComm *c, uint64_t seq)
{
	for (int r = 0; r < c->nranks; r++)
		if (atomic_load_explicit(&ring_meta(c, r, seq)->published, memory_order_acquire) != seq + 1)
			return 0;
	return 1;
}

static int all_resolved(struct ncclComm *c, uint64_t n)
{
	for (int r = 0; r < c->nranks; r++)
		if (atomic_load_explicit(&c->lines[r].resolved, memory_order_acquire) < n)
			return 0;
	return 1;
}

/* Waits until ready(c, arg); an abort or FAKENCCL_TIMEOUT_MS without it ends the wait
 * with an error, kept for ncclCommGetAsyncError. */
static ncclResult_t wait_until_ready(struct ncclComm *c, int (*ready)(struct ncclComm *, uint64_t), uint64_t arg)
{
	uint64_t deadline = deadline_from_now();
	for (;;) {
		uint32_t seen = atomic_load(&c->shm->progress);
		if (ready(c, arg))
			return ncclSuccess;
		if (atomic_load(&c->shm->aborted))
			return c->async_error = ncclRemoteError;
		if (now_ns() > deadline)
			return c->async_error = ncclSystemError;
		sleep_on(c->shm, seen, 100000000L);
	}
}

/* Resolves this rank's oldest unresolved collective: waits for every rank to publish it,
 * computes its completion (the model in the header comment), writes this rank's result,
 * releases the rank's hold on the ring entry and tells libcudart. A collective cut short
 * by an abort or a timeout completes now, with no result. Caller holds c->lock. */
static void resolve_next(struct ncclComm *c)
{
	uint64_t k = c->resolved, complete = 0;
	struct pending *p = &c->pending[k % c->depth];
	if (wait_until_ready(c, all_published, k) == ncclSuccess) {
		for (int r = 0; r < c->nranks; r++) {
			const struct ring_meta *m = ring_meta(c, r, k);
			uint64_t arrival = m->after_prev ? m->b > c->last_complete + m->a ? m->b : c->last_complete + m->a
			                                 : m->b;
			complete = arrival > complete ? arrival : complete;
		}
		complete += p->bus_ns;
		p->op.done = 0;
		p->op.chunk = p->op.count;
		collect(&p->op, ring_slot, k);
	} else {
		complete = now_ns();
	}
	c->last_complete = complete;
	c->resolved = k + 1;
	atomic_store_explicit(&c->lines[c->rank].resolved, k + 1, memory_order_release);
	bump(c->shm);
	fakegpu_collective_complete(dep_of(c, k), complete);
}

static void resolve_through(struct ncclComm *c, uint64_t seq)
{
	while (c->resolved <= seq && c->resolved < c->enqueued)
		resolve_next(c);
}

/* libcudart's resolver (fake_hooks.h), called by a host thread that must wait. */
static int resolve_dep(uint64_t dep)
{
	uint64_t index = (dep >> DEP_SEQ_BITS) - 1;
	pthread_mutex_lock(&table_lock);
	struct ncclComm *c = index < MAX_LOCAL_COMMS ? local_comms[index] : NULL;
	if (c)
		pthread_mutex_lock(&c->lock);
	pthread_mutex_unlock(&table_lock);
	if (!c)
		return -1;
	resolve_through(c, dep & ((1ull << DEP_SEQ_BITS) - 1));
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static uint64_t bus_ns(const struct op *o)
{
	double gbps = bus_gbps();
	return gbps > 0 ? (uint64_t)((double)bus_bytes(o) / gbps) : 0;
}

static ncclResult_t enqueue_locked(struct op *o)
{
	struct ncclComm *c = o->comm;
	if (atomic_load(&c->shm->aborted))
		return c->async_error = ncclRemoteError;
	uint64_t k = c->enqueued;
	if (k >= c->depth) {
		/* Entry k reuses is free once every rank has resolved k - depth: a rank that runs
		 * a whole queue ahead of a peer's host blocks here, as on a full launch queue. */
		resolve_through(c, k - c->depth);
		ncclResult_t rc = wait_until_ready(c, all_resolved, k - c->depth + 1);
		if (rc != ncclSuccess)
			return rc;
	}
	uint64_t prev = c->resolved < k ? dep_of(c, k - 1) : 0;
	struct fakegpu_arrival arrival;
	int err = fakegpu_stream_collective(o->stream, dep_of(c, k), prev, &arrival);
	if (err)
		return err == cudaErrorStreamCaptureUnsupported ? ncclInvalidUsage : ncclUnhandledCudaError;
	o->done = 0;
	o->chunk = o->count;
	deposit(o, ring_slot(c, c->rank, k));
	struct ring_meta *m = ring_meta(c, c->rank, k);
	m->a = arrival.dep_ns;
	m->b = arrival.at;
	m->after_prev = (uint32_t)arrival.after_prev;
	atomic_store_explicit(&m->published, k + 1, memory_order_release);
	bump(c->shm);
	c->pending[k % c->depth] = (struct pending){.op = *o, .bus_ns = bus_ns(o)};
	c->enqueued = k + 1;
	return ncclSuccess;
}

/* Enqueues a collective on its stream; the call returns without waiting for peers. */
static ncclResult_t enqueue(struct op *o)
{
	struct ncclComm *c = o->comm;
	size_t bytes = o->count * o->esize * (o->kind == OP_REDUCESCATTER ? (size_t)c->nranks : 1);
	if (bytes > c->slot_bytes) {
		fprintf(stderr, "fakenccl: a collective of %zu bytes per rank exceeds FAKENCCL_SLOT_KB (%zu KiB) in async mode; "
		        "raise it or set FAKENCCL_MODE=blocking\n", bytes, c->slot_bytes >> 10);
		return ncclInvalidArgument;
	}
	if (o->count == 0)
		return ncclSuccess;
	pthread_mutex_lock(&c->lock);
	ncclResult_t rc = enqueue_locked(o);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Resolves every collective this rank has in flight: the host waits for them. */
static void drain(struct ncclComm *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->enqueued)
		resolve_through(c, c->enqueued - 1);
	pthread_mutex_unlock(&c->lock);
}

static ncclResult_t submit(struct op o)
{
	if (!valid_comm(o.comm))
		return ncclInvalidArgument;
	if (!(o.esize = type_size(o.type)) || (unsigned)o.redop >= ncclNumOps)
		return ncclInvalidArgument;
	int ranked = o.kind == OP_BROADCAST || o.kind == OP_REDUCE || o.kind == OP_SEND || o.kind == OP_RECV;
	if (ranked && (o.root < 0 || o.root >= o.comm->nranks))
		return ncclInvalidArgument;
	if (o.count && ((!o.send && o.kind != OP_RECV) || (!o.recv && o.kind != OP_SEND)))
		return ncclInvalidArgument;
	if (group_depth == 0)
		return o.comm->async && !is_p2p(&o) ? enqueue(&o) : execute(&o, 1);
	if (group_len == MAX_GROUP_OPS) {
		group_error = ncclInvalidUsage;
		return ncclInvalidUsage;
	}
	if (group_len == group_cap) {
		int cap = group_cap ? group_cap * 2 : 16;
		struct op *grown = realloc(group_ops, (size_t)cap * sizeof(*grown));
		if (!grown)
			return ncclSystemError;
		group_ops = grown;
		group_cap = cap;
	}
	group_ops[group_len++] = o;
	return ncclSuccess;
}

FAKEGPU_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
	enter();
	return submit((struct op){.stream = stream, .kind = OP_ALLREDUCE, .comm = comm, .send = sendbuff, .recv = recvbuff,
	                          .count = count, .type = datatype, .redop = op});
}

FAKEGPU_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	enter();
	return submit((struct op){.stream = stream, .kind = OP_ALLGATHER, .comm = comm, .send = sendbuff, .recv = recvbuff,
	                          .count = sendcount, .type = datatype});
}

FAKEGPU_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream)
{
	enter();
	return submit((struct op){.stream = stream, .kind = OP_REDUCESCATTER, .comm = comm, .send = sendbuff, .recv = recvbuff,
	                          .count = recvcount, .type = datatype, .redop = op});
}

FAKEGPU_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
	enter();
	return submit((struct op){.stream = stream, .kind = OP_BROADCAST, .comm = comm, .send = sendbuff, .recv = recvbuff,
	                          .count = count, .type = datatype, .root = root});
}

/* In-place broadcast: non-root ranks only read, so the buffer serves as both sides. */
FAKEGPU_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream)
{
	enter();
	return submit((struct op){.stream = stream, .kind = OP_BROADCAST, .comm = comm, .send = buff, .recv = buff,
	                          .count = count, .type = datatype, .root = root});
}

FAKEGPU_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
	enter();
	if (valid_comm(comm) && comm->rank != root)
		recvbuff = recvbuff ? recvbuff : (void *)sendbuff; /* only the root's recvbuff is used */
	return submit((struct op){.stream = stream, .kind = OP_REDUCE, .comm = comm, .send = sendbuff, .recv = recvbuff,
	                          .count = count, .type = datatype, .redop = op, .root = root});
}

FAKEGPU_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream)
{
	enter();
	return submit((struct op){.stream = stream, .kind = OP_SEND, .comm = comm, .send = sendbuff, .count = count,
	                          .type = datatype, .root = peer});
}

FAKEGPU_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream)
{
	enter();
	return submit((struct op){.stream = stream, .kind = OP_RECV, .comm = comm, .recv = recvbuff, .count = count,
	                          .type = datatype, .root = peer});
}

FAKEGPU_API ncclResult_t ncclGroupStart(void)
{
	enter();
	if (group_depth++ == 0) {
		group_len = 0;
		group_error = ncclSuccess;
	}
	return ncclSuccess;
}

/* Operations queued since the outermost ncclGroupStart run together here: sends and
 * receives of a ring all make progress, whatever order each rank queued them in. */
FAKEGPU_API ncclResult_t ncclGroupEnd(void)
{
	enter();
	if (group_depth == 0)
		return ncclInvalidUsage;
	if (--group_depth > 0)
		return ncclSuccess;
	ncclResult_t rc = group_error;
	/* In async mode the group's collectives are enqueued, in call order, and only its
	 * sends and receives run here. */
	int p2p = 0;
	for (int i = 0; rc == ncclSuccess && i < group_len; i++) {
		if (group_ops[i].comm->async && !is_p2p(&group_ops[i]))
			rc = enqueue(&group_ops[i]);
		else
			group_ops[p2p++] = group_ops[i];
	}
	if (rc == ncclSuccess && p2p)
		rc = execute(group_ops, p2p);
	group_len = 0;
	return rc;
}

/* Collective over the parent: ranks exchange (color, key) with an allgather through the
 * parent's slots, then each color forms a communicator ordered by (key, parent rank),
 * named from the parent id, a split sequence number and the color. */
FAKEGPU_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config)
{
	(void)config;
	enter();
	if (!valid_comm(comm) || !newcomm || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
		return ncclInvalidArgument;
	int mine[2] = {color, key};
	int *all = malloc(sizeof(mine) * (size_t)comm->nranks);
	if (!all)
		return ncclSystemError;
	struct op gather = {.kind = OP_ALLGATHER, .comm = comm, .send = (const char *)mine, .recv = (char *)all,
	                    .count = 2, .esize = sizeof(int), .type = ncclInt32};
	ncclResult_t rc = execute(&gather, 1);
	unsigned int seq = comm->splits++;
	if (rc != ncclSuccess || color == NCCL_SPLIT_NOCOLOR) {
		free(all);
		*newcomm = NULL;
		return rc;
	}
	int nranks = 0, rank = 0;
	for (int r = 0; r < comm->nranks; r++) {
		if (all[2 * r] != color)
			continue;
		nranks++;
		int k = all[2 * r + 1];
		if (k < key || (k == key && r < comm->rank))
			rank++;
	}
	free(all);
	ncclUniqueId id = comm->id;
	memcpy(id.internal + 28, &seq, sizeof(seq));
	memcpy(id.internal + 32, &color, sizeof(color));
	return comm_init(newcomm, nranks, &id, rank);
}
