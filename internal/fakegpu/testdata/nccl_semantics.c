/*
 * nccl-semantics: where a late rank's peers wait, for each way a host meets a collective.
 * Forks RANKS rank processes; rank LATE sleeps DELAY_MS before each phase. Each phase
 * issues collectives, then one synchronizing call, and records the time spent in the NCCL
 * calls and in the synchronizing call, and whether the results are right:
 *
 *   allreduce_event      ncclAllReduce, cudaEventRecord, cudaEventSynchronize
 *   allgather_device     ncclAllGather, cudaDeviceSynchronize
 *   reducescatter_copy   ncclReduceScatter, cudaMemcpy device-to-host of the result
 *   group_bcast_reduce   ncclGroupStart, ncclBroadcast, ncclReduce, ncclGroupEnd,
 *                        cudaStreamSynchronize
 *   kernel_after         ncclAllReduce, a KERNEL_MS kernel, cudaStreamSynchronize
 *
 * Then the late rank aborts its communicator instead of entering an all-reduce, and the
 * others report what their all-reduce, their stream sync and ncclCommGetAsyncError
 * returned. One JSON line per rank.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "fake_nccl.h"

#define RANKS 3
#define LATE 2
#define DELAY_MS 50
#define KERNEL_MS 20
#define N 1024

static int rank;
static char out[4096];
static size_t out_len;

#define emit(...) (out_len += (size_t)snprintf(out + out_len, sizeof(out) - out_len, __VA_ARGS__))
#define check(call)                                                                                 \
	do {                                                                                        \
		int rc_ = (int)(call);                                                              \
		if (rc_) {                                                                          \
			fprintf(stderr, "rank %d: %s failed: %d\n", rank, #call, rc_);              \
			exit(1);                                                                    \
		}                                                                                   \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double ms_since(uint64_t t0) { return (double)(now_ns() - t0) / 1e6; }

static void late(void)
{
	if (rank == LATE) {
		struct timespec d = {0, DELAY_MS * 1000000L};
		nanosleep(&d, NULL);
	}
}

static void phase(const char *name, double call_ms, double wait_ms, int ok)
{
	emit("%s\"%s\":{\"call_ms\":%.3f,\"wait_ms\":%.3f,\"ok\":%s}", out_len > 1 ? "," : "", name, call_ms,
	     wait_ms, ok ? "true" : "false");
}

static void fake_kernel(void) {}

static int run(const ncclUniqueId *id)
{
	ncclComm_t comm;
	cudaStream_t stream;
	cudaEvent_t ev;
	float *fsend, *frecv, host[N * RANKS];
	int32_t *isend, *irecv;
	check(cudaSetDevice(0));
	check(cudaStreamCreate(&stream));
	check(cudaEventCreate(&ev));
	check(cudaMalloc((void **)&fsend, sizeof(float) * N * RANKS));
	check(cudaMalloc((void **)&frecv, sizeof(float) * N * RANKS));
	check(cudaMalloc((void **)&isend, sizeof(int32_t) * N));
	check(cudaMalloc((void **)&irecv, sizeof(int32_t) * N * RANKS));
	check(ncclCommInitRank(&comm, RANKS, *id, rank));
	emit("{");
	uint64_t t0, t1;
	int ok;

	late();
	for (int i = 0; i < N; i++)
		fsend[i] = (float)(rank + 1);
	t0 = now_ns();
	check(ncclAllReduce(fsend, frecv, N, ncclFloat32, ncclSum, comm, stream));
	double call = ms_since(t0);
	check(cudaEventRecord(ev, stream));
	t1 = now_ns();
	check(cudaEventSynchronize(ev));
	ok = 1;
	for (int i = 0; i < N; i++)
		ok &= frecv[i] == 6.0f;
	phase("allreduce_event", call, ms_since(t1), ok);

	late();
	for (int i = 0; i < N; i++)
		isend[i] = rank * 100000 + i;
	t0 = now_ns();
	check(ncclAllGather(isend, irecv, N, ncclInt32, comm, stream));
	call = ms_since(t0);
	t1 = now_ns();
	check(cudaDeviceSynchronize());
	ok = 1;
	for (int r = 0; r < RANKS; r++)
		for (int i = 0; i < N; i++)
			ok &= irecv[r * N + i] == r * 100000 + i;
	phase("allgather_device", call, ms_since(t1), ok);

	late();
	for (int j = 0; j < RANKS; j++)
		for (int i = 0; i < N; i++)
			fsend[j * N + i] = (float)((rank + 1) * (j + 1));
	t0 = now_ns();
	check(ncclReduceScatter(fsend, frecv, N, ncclFloat32, ncclSum, comm, stream));
	call = ms_since(t0);
	t1 = now_ns();
	check(cudaMemcpy(host, frecv, sizeof(float) * N, cudaMemcpyDeviceToHost));
	ok = 1;
	for (int i = 0; i < N; i++)
		ok &= host[i] == (float)(6 * (rank + 1));
	phase("reducescatter_copy", call, ms_since(t1), ok);

	late();
	for (int i = 0; i < N; i++) {
		isend[i] = rank == 0 ? 42 : -1;
		fsend[i] = (float)(rank + 1);
	}
	t0 = now_ns();
	check(ncclGroupStart());
	check(ncclBroadcast(isend, irecv, N, ncclInt32, 0, comm, stream));
	check(ncclReduce(fsend, frecv, N, ncclFloat32, ncclSum, 1, comm, stream));
	check(ncclGroupEnd());
	call = ms_since(t0);
	t1 = now_ns();
	check(cudaStreamSynchronize(stream));
	ok = 1;
	for (int i = 0; i < N; i++)
		ok &= irecv[i] == 42 && (rank != 1 || frecv[i] == 6.0f);
	phase("group_bcast_reduce", call, ms_since(t1), ok);

	/* A kernel queued after the collective starts only when the collective completes. */
	late();
	t0 = now_ns();
	check(ncclAllReduce(fsend, frecv, N, ncclFloat32, ncclSum, comm, stream));
	call = ms_since(t0);
	dim3 grid = {132u * (KERNEL_MS * 1000 / 20), 1, 1}, block = {256, 1, 1}; /* 20 us waves */
	check(cudaLaunchKernel((const void *)fake_kernel, grid, block, NULL, 0, stream));
	t1 = now_ns();
	check(cudaStreamSynchronize(stream));
	ok = 1;
	for (int i = 0; i < N; i++)
		ok &= frecv[i] == 6.0f;
	phase("kernel_after", call, ms_since(t1), ok);
	emit("}");

	/* The late rank aborts instead of joining; nobody may wait for it forever. */
	late();
	if (rank == LATE) {
		check(ncclCommAbort(comm));
		emit(",\"abort\":{}");
	} else {
		t0 = now_ns();
		int call_rc = (int)ncclAllReduce(fsend, frecv, N, ncclFloat32, ncclSum, comm, stream);
		int sync_rc = (int)cudaStreamSynchronize(stream);
		double wait = ms_since(t0);
		ncclResult_t async_error = ncclSuccess;
		check(ncclCommGetAsyncError(comm, &async_error));
		emit(",\"abort\":{\"call_rc\":%d,\"sync_rc\":%d,\"async_error\":%d,\"wait_ms\":%.3f}", call_rc, sync_rc,
		     (int)async_error, wait);
		check(ncclCommDestroy(comm));
	}
	printf("{\"rank\":%d,\"phases\":%s}\n", rank, out);
	fflush(stdout);
	return 0;
}

int main(void)
{
	ncclUniqueId id;
	check(ncclGetUniqueId(&id));
	fflush(stdout);
	pid_t pids[RANKS];
	for (int r = 0; r < RANKS; r++) {
		if ((pids[r] = fork()) == 0) {
			rank = r;
			return run(&id);
		}
	}
	int failed = 0;
	for (int r = 0; r < RANKS; r++) {
		int status;
		waitpid(pids[r], &status, 0);
		failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	return failed;
}
