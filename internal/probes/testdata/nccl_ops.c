/*
 * nccl-ops: calls every probed NCCL function once (single-rank communicators, so nothing
 * waits for a peer) with distinctive arguments, so a test can check that each entry
 * program reads each argument from where x86-64 SysV puts it. Prints the communicator
 * pointers it got, as JSON, for the test to compare with what the probes saw.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fake_nccl.h"

#define CHECK(call)                                                               \
	do {                                                                      \
		ncclResult_t rc_ = (call);                                        \
		if (rc_ != ncclSuccess) {                                         \
			fprintf(stderr, "%s failed: %d\n", #call, (int)rc_);      \
			return 1;                                                 \
		}                                                                 \
	} while (0)

static char buf_a[1 << 16], buf_b[1 << 16];

int main(void)
{
	ncclUniqueId id;
	ncclComm_t comm, cfg_comm, split, all[2];
	ncclConfig_t config;
	memset(&config, 0, sizeof(config));
	CHECK(ncclGetUniqueId(&id));
	CHECK(ncclCommInitRank(&comm, 1, id, 0));
	cudaStream_t s = (cudaStream_t)(uintptr_t)0x5000;
	/* count, datatype, op and stream differ per call so a misplaced read shows */
	CHECK(ncclAllReduce(buf_a, buf_b, 11, ncclFloat32, ncclMax, comm, (cudaStream_t)((uintptr_t)s + 1)));
	CHECK(ncclAllGather(buf_a, buf_b, 12, ncclInt64, comm, (cudaStream_t)((uintptr_t)s + 2)));
	CHECK(ncclReduceScatter(buf_a, buf_b, 13, ncclFloat16, ncclMin, comm, (cudaStream_t)((uintptr_t)s + 3)));
	CHECK(ncclBroadcast(buf_a, buf_b, 14, ncclBfloat16, 0, comm, (cudaStream_t)((uintptr_t)s + 4)));
	CHECK(ncclBcast(buf_a, 15, ncclUint8, 0, comm, (cudaStream_t)((uintptr_t)s + 5)));
	CHECK(ncclReduce(buf_a, buf_b, 16, ncclFloat64, ncclProd, 0, comm, (cudaStream_t)((uintptr_t)s + 6)));
	CHECK(ncclGroupStart());
	CHECK(ncclSend(buf_a, 17, ncclInt32, 0, comm, (cudaStream_t)((uintptr_t)s + 7)));
	CHECK(ncclRecv(buf_b, 17, ncclInt32, 0, comm, (cudaStream_t)((uintptr_t)s + 8)));
	CHECK(ncclGroupEnd());
	CHECK(ncclCommSplit(comm, 3, 0, &split, NULL));
	int split_rank = -1, split_size = -1;
	CHECK(ncclCommUserRank(split, &split_rank));
	CHECK(ncclCommCount(split, &split_size));
	CHECK(ncclAllReduce(buf_a, buf_b, 18, ncclFloat32, ncclSum, split, (cudaStream_t)((uintptr_t)s + 9)));
	CHECK(ncclCommDestroy(split));
	ncclUniqueId id2;
	CHECK(ncclGetUniqueId(&id2));
	CHECK(ncclCommInitRankConfig(&cfg_comm, 1, id2, 0, &config));
	CHECK(ncclCommAbort(cfg_comm));
	CHECK(ncclCommInitAll(all, 2, NULL));
	printf("{\"comm\":%llu,\"split\":%llu,\"config_comm\":%llu,\"all\":[%llu,%llu],\"unique_id\":\"",
	       (unsigned long long)(uintptr_t)comm, (unsigned long long)(uintptr_t)split,
	       (unsigned long long)(uintptr_t)cfg_comm, (unsigned long long)(uintptr_t)all[0],
	       (unsigned long long)(uintptr_t)all[1]);
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
		printf("%02x", (unsigned char)id.internal[i]);
	printf("\",\"config_unique_id\":\"");
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
		printf("%02x", (unsigned char)id2.internal[i]);
	printf("\"}\n");
	CHECK(ncclCommDestroy(all[0]));
	CHECK(ncclCommDestroy(all[1]));
	CHECK(ncclCommDestroy(comm));
	return 0;
}
