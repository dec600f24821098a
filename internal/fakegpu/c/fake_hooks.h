/*
 * Hooks between the fake libraries. These are not CUDA or NCCL API: libcudart.so.12
 * exports them (with a fakegpu_ prefix, which no NVIDIA library uses) so that the fake
 * libnccl.so.2, which links against it as the real one links the CUDA runtime, can put
 * collectives on a stream's device timeline. No probe attaches to them, and no exported
 * CUDA function calls them, so every API call is still counted once.
 *
 * A collective's completion time depends on every rank, so it is unknown when the
 * collective is enqueued. libnccl names each collective in flight by a non-zero 64-bit
 * handle (a "dep"); libcudart keeps device times that wait on one symbolically, as
 * max(completion(dep) + dep_ns, at), and asks libnccl's resolver for the completion only
 * when a host thread must wait for it (a synchronizing call) or when two different
 * collectives meet in one time.
 */
#ifndef FAKEGPU_FAKE_HOOKS_H
#define FAKEGPU_FAKE_HOOKS_H

#include <stdint.h>

#include "fake_cuda.h"

/* Where this rank's stream reaches a newly enqueued collective: at
 * max(completion(prev) + dep_ns, at) when after_prev, else at `at` (CLOCK_MONOTONIC ns). */
struct fakegpu_arrival {
	int after_prev;
	uint64_t dep_ns;
	uint64_t at;
};

/*
 * Blocks until the completion of `dep` is known, then reports it (and that of every
 * collective of the same communicator enqueued before it) through
 * fakegpu_collective_complete before returning 0. Non-zero: unknown dep; libcudart then
 * treats it as complete now.
 */
typedef int (*fakegpu_resolver)(uint64_t dep);

FAKEGPU_API void fakegpu_set_resolver(fakegpu_resolver resolve);

/*
 * Enqueues collective `dep` on `stream`: costs the CPU time of a launch, returns where
 * the stream reaches it, and makes later work on the stream wait for its completion.
 * `prev` is the communicator's previous collective if still unresolved (0 if none): a
 * stream waiting on it is reported symbolically (after_prev); a stream waiting on any
 * other unresolved collective is resolved first. Returns a cudaError_t.
 */
FAKEGPU_API int fakegpu_stream_collective(cudaStream_t stream, uint64_t dep, uint64_t prev,
                                          struct fakegpu_arrival *out);

/* The device completes collective `dep` at `complete_at`. */
FAKEGPU_API void fakegpu_collective_complete(uint64_t dep, uint64_t complete_at);

#endif
