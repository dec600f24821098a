/*
 * NCCL 2.x API declarations, as the fake libnccl.so.2 exports them, ABI-identical to
 * nccl.h on x86-64 System V.
 *
 * ABI notes for the probes: ncclUniqueId is a 128-byte struct passed BY VALUE, which SysV
 * classifies MEMORY: it is copied onto the caller's stack (at 8(%rsp) on entry) and takes
 * no register, so in ncclCommInitRank(comm, nranks, commId, rank) the rank is the third
 * integer argument (%edx), not the fourth. Collectives pass their 7th+ argument on the
 * stack: ncclAllReduce's stream is at 8(%rsp) on entry, ncclReduce's comm and stream at
 * 8(%rsp) and 16(%rsp).
 *
 * Semantics, not only ABI: as in NCCL, a collective is enqueued on the cudaStream_t it is
 * given (a stream of the fake libcudart.so.12, which libnccl links) and returns at once;
 * the host meets a late peer in its next synchronizing CUDA call. FAKENCCL_MODE=blocking
 * makes collectives wait for every rank inside the call instead (nccl.c says how).
 */
#ifndef FAKEGPU_FAKE_NCCL_H
#define FAKEGPU_FAKE_NCCL_H

#include <stddef.h>

#include "fake_cuda.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 5
#define NCCL_VERSION_CODE (NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH)
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclComm *ncclComm_t;

typedef struct {
	char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclNumResults = 8
} ncclResult_t;

typedef enum {
	ncclInt8 = 0, ncclChar = 0,
	ncclUint8 = 1,
	ncclInt32 = 2, ncclInt = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6, ncclHalf = 6,
	ncclFloat32 = 7, ncclFloat = 7,
	ncclFloat64 = 8, ncclDouble = 8,
	ncclBfloat16 = 9,
	ncclNumTypes = 10
} ncclDataType_t;

typedef enum {
	ncclSum = 0,
	ncclProd = 1,
	ncclMax = 2,
	ncclMin = 3,
	ncclAvg = 4,
	ncclNumOps = 5,
	ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

/* NCCL 2.18+ layout; the fake reads nothing from it but accepts it. */
typedef struct ncclConfig_v21700 {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
} ncclConfig_t;

FAKEGPU_API ncclResult_t ncclGetVersion(int *version);
FAKEGPU_API const char *ncclGetErrorString(ncclResult_t result);
FAKEGPU_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
FAKEGPU_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
FAKEGPU_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                                ncclConfig_t *config);
FAKEGPU_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
FAKEGPU_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config);
FAKEGPU_API ncclResult_t ncclCommDestroy(ncclComm_t comm);
FAKEGPU_API ncclResult_t ncclCommAbort(ncclComm_t comm);
FAKEGPU_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
FAKEGPU_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
FAKEGPU_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
FAKEGPU_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

FAKEGPU_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream);
FAKEGPU_API ncclResult_t ncclGroupStart(void);
FAKEGPU_API ncclResult_t ncclGroupEnd(void);

_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes, passed in memory");

#endif
