/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Definitions shared by every Fathom probe family. Event structs are turned into Go
 * types by bpf2go (-type), so they are written once, here. Each family is its own BPF
 * object; the maps marked "shared" are created once by the loader and handed to every
 * object (MapReplacements), so all families see the same traced set and ring buffer. */
#pragma once

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define TASK_RUNNING 0

enum event_kind {
	EVENT_CUDA_CALL = 1,
	EVENT_SCHED = 2,      /* a traced thread switched back in: off-CPU and run-queue time */
	EVENT_PROC_FORK = 3,
	EVENT_PROC_EXEC = 4,
	EVENT_PROC_EXIT = 5,
	EVENT_BLOCK_IO = 6,
	EVENT_TCP_RETRANSMIT = 7,
	EVENT_PROC_IDENTITY = 8,  /* a process's first traced call: its environment and comm */
	EVENT_NCCL_CALL = 9,      /* one NCCL call: communicator, rank, op, bytes, sequence */
	EVENT_RDMA_ASYNC = 10,    /* one verbs asynchronous event (port error, QP fatal ...) */
	EVENT_CUDA_THREAD = 11,   /* a thread's first traced CUDA call: it drives a GPU */
	EVENT_LIBRARY_MAPPED = 12, /* a process mapped a probed library's code (libmap.bpf.c) */
	EVENT_RDMA_QP = 13,       /* a process created a verbs queue pair: the NIC it sends over */
	EVENT_CUDA_CALL_PY = 14,  /* a CUDA call record of a Python process, with its Python frames (pystack.h) */
	EVENT_NCCL_CALL_PY = 15,  /* an NCCL call of a Python process, with its Python frames */
};

/* Why an event or a kernel-side sample was lost. Counted per CPU, read by userspace. */
enum drop_reason {
	DROP_RINGBUF_FULL = 0,      /* bpf_ringbuf_reserve failed: the reader fell behind */
	DROP_ENTRY_MISSING = 1,     /* a return without its entry (evicted from the LRU, or attached mid-call) */
	DROP_TRACED_SET_FULL = 2,   /* no room to add a process to the traced set */
	DROP_CALL_STATS_FULL = 3,   /* a call of a process without call statistics (all PROC_SLOTS taken): it went out as a record */
	DROP_REASON_COUNT = 4,
};

/* Where a process in the traced set came from. */
enum traced_source {
	TRACED_BY_CONFIG = 1,  /* named by PID or discovered by userspace */
	TRACED_BY_PROBE = 2,   /* made a CUDA call while tracing every CUDA process */
	TRACED_BY_FORK = 3,    /* child of a traced process (DataLoader workers) */
	TRACED_IDENTITY_SENT = 0x80, /* flag: the process's identity record went out */
};

/* Every API the uprobes decode. Values are stable: Go tables index them. */
enum cuda_api {
	API_UNKNOWN = 0,
	/* runtime API, libcudart */
	API_CUDA_LAUNCH_KERNEL = 1,
	API_CUDA_LAUNCH_KERNEL_EXC = 2,
	API_CUDA_MEMCPY = 3,
	API_CUDA_MEMCPY_ASYNC = 4,
	API_CUDA_MALLOC = 5,
	API_CUDA_FREE = 6,
	API_CUDA_MALLOC_ASYNC = 7,
	API_CUDA_FREE_ASYNC = 8,
	API_CUDA_STREAM_SYNCHRONIZE = 9,
	API_CUDA_DEVICE_SYNCHRONIZE = 10,
	API_CUDA_EVENT_SYNCHRONIZE = 11,
	API_CUDA_STREAM_WAIT_EVENT = 12,
	API_CUDA_STREAM_BEGIN_CAPTURE = 13,
	API_CUDA_STREAM_END_CAPTURE = 14,
	API_CUDA_GRAPH_INSTANTIATE = 15,
	API_CUDA_GRAPH_LAUNCH = 16,
	/* driver API, libcuda */
	API_CU_LAUNCH_KERNEL = 17,
	API_CU_LAUNCH_KERNEL_PTSZ = 18,
	API_CU_LAUNCH_KERNEL_EX = 19,
	API_CU_MEM_ALLOC = 20,
	API_CU_MEM_FREE = 21,
	API_CU_MEMCPY = 22,
	API_CU_MEMCPY_ASYNC = 23,
	API_CU_MEMCPY_HTOD = 24,
	API_CU_MEMCPY_DTOH = 25,
	API_CU_MEMCPY_DTOD = 26,
	API_CU_MEMCPY_HTOD_ASYNC = 27,
	API_CU_MEMCPY_DTOH_ASYNC = 28,
	API_CU_MEMCPY_DTOD_ASYNC = 29,
	API_CU_CTX_SYNCHRONIZE = 30,
	API_CU_STREAM_SYNCHRONIZE = 31,
	API_CU_GRAPH_LAUNCH = 32,
	/* runtime again: the device the calling thread selects */
	API_CUDA_SET_DEVICE = 33,
	/* AMD's HIP runtime, libamdhip64: the CUDA runtime's API under other names, with the
	 * same argument layouts (hip_runtime_api.h), so the same entry programs decode them */
	API_HIP_LAUNCH_KERNEL = 34,
	API_HIP_MODULE_LAUNCH_KERNEL = 35,
	API_HIP_EXT_LAUNCH_KERNEL = 36,
	API_HIP_GRAPH_LAUNCH = 37,
	API_HIP_MEMCPY = 38,
	API_HIP_MEMCPY_ASYNC = 39,
	API_HIP_MEMCPY_HTOD = 40,
	API_HIP_MEMCPY_DTOH = 41,
	API_HIP_MALLOC = 42,
	API_HIP_FREE = 43,
	API_HIP_MALLOC_ASYNC = 44,
	API_HIP_FREE_ASYNC = 45,
	API_HIP_STREAM_SYNCHRONIZE = 46,
	API_HIP_DEVICE_SYNCHRONIZE = 47,
	API_HIP_EVENT_SYNCHRONIZE = 48,
	API_HIP_STREAM_WAIT_EVENT = 49,
	API_HIP_SET_DEVICE = 50,
	API_COUNT = 51, /* < 64: device_wait_apis is a bit per API */
};

/* cudaMemcpyKind values; the driver's directional copies are mapped onto them. */
enum memcpy_kind {
	MEMCPY_HOST_TO_HOST = 0,
	MEMCPY_HOST_TO_DEVICE = 1,
	MEMCPY_DEVICE_TO_HOST = 2,
	MEMCPY_DEVICE_TO_DEVICE = 3,
	MEMCPY_DEFAULT = 4,
	MEMCPY_NONE = 255,
};

struct event_header {
	__u64 ts_ns;     /* CLOCK_MONOTONIC (bpf_ktime_get_ns); userspace adds the wall offset */
	__u32 pid;       /* tgid */
	__u32 tid;
	__u64 cgroup_id; /* on identity and lifecycle events; 0 on per-call events */
	__u8 kind;       /* enum event_kind */
	__u8 _pad[7];
};

#define NATIVE_FRAMES_MAX 16

struct cuda_call_event {
	struct event_header hdr;  /* ts_ns is the call's entry time */
	__u64 duration_ns;
	__u64 bytes;       /* copy or allocation size; 0 when the API moves no bytes */
	__u64 stream;      /* cudaStream_t / CUstream handle, 0 = legacy default stream */
	__u64 handle;      /* graph, graph exec, event or device pointer the call is about */
	__u32 grid[3];
	__u32 block[3];
	__u32 api;         /* enum cuda_api */
	__s32 ret;         /* cudaError_t / CUresult */
	__u8 memcpy_kind;  /* enum memcpy_kind */
	__u8 counted;      /* 1: already in call_stats; 0: userspace must count it (the map was full) */
	__u8 native_frames; /* return addresses in native[], innermost first */
	__u8 sampled;      /* 1: recorded as the thread's one call in sample_every, not as notable */
	__u8 _pad[4];
	/* The calling thread's user stack as the kernel's frame-pointer unwinder reads it
	 * (bpf_get_stack): the return address into the caller first. A library built
	 * without frame pointers ends it early or with addresses that are not frames. */
	__u64 native[NATIVE_FRAMES_MAX];
};

/* Call statistics kept in the kernel, per (process, API): a call only becomes a ring
 * record when it is notable, so the common case costs an array lookup and a few atomic
 * adds instead of a ring reservation. Durations are bucketed on OTLP's exponential
 * scale; the loader writes the bucket bounds (duration_bounds), so the kernel and
 * userspace agree on them exactly. */
#define DURATION_BUCKETS 320
#define DURATION_BOUNDS 512 /* the bounds table, padded to a power of two for the search */
#define COPY_KINDS 6        /* calls and bytes by enum memcpy_kind 0..4, then "no copy" */
#define PROC_SLOTS 64       /* processes with call statistics at once */
#define NO_PROC_SLOT 0xffffffff

struct call_stats {
	__u64 calls[COPY_KINDS];
	__u64 bytes[COPY_KINDS];
	__u64 errors;
	__u64 duration_ns;                  /* sum */
	__u32 buckets[DURATION_BUCKETS];    /* wrap at 2^32: userspace reads deltas every second */
};

/* What a traced thread waited for a CPU after, at its switch-in (sched_event.wait_kind). */
enum sched_wait {
	SCHED_WAIT_NONE = 0,      /* switched out blocked, and no wakeup seen: no wait known */
	SCHED_WAIT_PREEMPTED = 1, /* switched out still runnable: off CPU waiting from then */
	SCHED_WAIT_WOKEN = 2,     /* switched out blocked, woken, then waited in the run queue */
};

/* Who ended a traced thread's voluntary wait (sched_event.waker_kind). */
enum sched_waker {
	SCHED_WAKER_NONE = 0,      /* preempted, or blocked with no wakeup seen */
	SCHED_WAKER_TASK = 1,      /* a task woke it: waker_pid, waker_tid, waker_comm */
	SCHED_WAKER_INTERRUPT = 2, /* woken from hardirq, NMI or softirq context (a timer, a device) */
};

struct sched_event {
	struct event_header hdr;  /* ts_ns is the switch-in time */
	__u64 off_cpu_ns;         /* switch-out to switch-in */
	__u64 runq_ns;            /* runnable (woken or preempted) to switch-in; 0 if unknown */
	__u8 preempted;           /* switched out while still runnable (prev_state == TASK_RUNNING) */
	__u8 wait_kind;           /* enum sched_wait */
	__u8 waker_kind;          /* enum sched_waker; NONE when preempted */
	__u8 _pad;
	/* The task the thread waited behind for a CPU: when preempted, the task that took the
	 * CPU at the switch-out (next in that sched_switch); when woken, the task that held
	 * the CPU until this switch-in (prev in this one). Its tgid, 0 = the idle task or
	 * none (no wait known), and its thread name (comm, NUL-padded, not always
	 * terminated; empty with pid 0 when woken, swapper/N when preempted). */
	__u32 preemptor_pid;
	char preemptor_comm[16];
	/* A voluntary wait's first waker (waker_kind TASK): its tgid, tid and comm, as
	 * sched_waking saw them in the waker's own context. Zero otherwise. */
	__u32 waker_pid;
	__u32 waker_tid;
	char waker_comm[16];
	/* The system call a voluntary wait blocked in (x86-64 number, from the thread's
	 * user entry frame); -1 when it blocked outside one (a page fault) or was preempted.
	 * Userspace names what it waited on from it. */
	__s32 syscall_nr;
	__u32 _pad2;
};

struct process_event {
	struct event_header hdr;  /* pid/tid: the process concerned */
	__u32 parent_pid;         /* fork: the parent tgid */
	__u32 exit_code;
	char comm[16];
};

struct block_io_event {
	struct event_header hdr;  /* pid/tid: the issuing task, ts_ns: completion */
	__u64 duration_ns;        /* request start (start_time_ns, else issue) to completion */
	__u64 bytes;
	__u32 dev;
	__u8 write;
	__u8 _pad[3];
};

struct tcp_retransmit_event {
	struct event_header hdr;
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u16 family;  /* AF_INET or AF_INET6 */
	__u8 state;
	__u8 _pad[1];
	/* The socket's inode number, as /proc/PID/fd shows it (socket:[N]): which process
	 * owns the socket. Retransmits mostly fire from a timer, where the current task is
	 * whoever was running. 0 for a socket no file holds (closed, kernel-owned). */
	__u64 sock_ino;
};

/* Rank, world size and job live in the environment; a short-lived process may be gone
 * from /proc before userspace reads it, so its first traced call copies them here. */
#define IDENTITY_ENV_MAX 4096

#define IDENTITY_EXE_MAX 64

struct process_identity_event {
	struct event_header hdr;
	__u32 env_len;        /* bytes of env used; the block may be truncated */
	char comm[16];
	char exe[IDENTITY_EXE_MAX];  /* base name of the executable (mm->exe_file), NUL-terminated */
	char env[IDENTITY_ENV_MAX];  /* NUL-separated KEY=VALUE, as in /proc/PID/environ */
};

/* ---- shared maps ---- */

/* Every event goes through this ring, submitted without a wakeup: the reader polls on a
 * short timer instead, which keeps the cost of a wakeup out of the traced call. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

/* Processes whose threads are traced (tgid -> enum traced_source). LRU: a process that
 * exits without its exit being seen must not pin a slot forever. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} traced_pids SEC(".maps");

/* Cgroups named in the config (cgroup id -> 1); the processes of their subtrees are traced. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} traced_cgroups SEC(".maps");

struct call_entry {
	__u64 ts;          /* entry time; 0 = no call of this API in flight */
	__u64 sp;          /* stack pointer at entry: stack-passed arguments are read from it, for records only */
	__u64 config;      /* launch config pointer (the *Ex launches), read through for records only */
	__u64 bytes;
	__u64 stream;
	__u64 handle;
	__u32 grid[3];
	__u32 block[3];
	__u8 kind;
	__u8 _pad[3];
	/* This API's last failure on the thread that became a record: its return code and
	 * when (ERROR_RECORD_GAP_NS in cuda.bpf.c). Kept across calls. */
	__s32 error_ret;
	__u64 error_record_ns;
};

/* The calls a thread has in flight, one slot per API (nested calls of different APIs,
 * e.g. a runtime call entering the driver, each keep their own). Task storage, not a
 * hash map: no hashing on the hot path, and the kernel frees it with the thread, so a
 * thread killed mid-call leaves nothing behind. */
#define API_SLOTS 64 /* ≥ API_COUNT, a power of two: a masked index is provably in bounds */

struct thread_calls {
	__u32 proc_slot;  /* the process's call statistics (cuda.bpf.c), NO_PROC_SLOT if none */
	__u32 since_sample; /* calls since the thread's last sampled record (sample_every) */
	struct call_entry calls[API_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_calls);
} thread_calls SEC(".maps");

/* Which process owns each call-statistics slot (tgid, 0 = free). The first thread of a
 * process to call CUDA claims one (cuda.bpf.c); userspace frees it once the process is
 * gone and its last counts are read, after zeroing what the slot holds. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, PROC_SLOTS);
	__type(key, __u32);
	__type(value, __u64); /* array elements are 8-byte aligned anyway; 64-bit CAS everywhere */
} proc_slots SEC(".maps");

/* When a call that waits for the device last returned on any thread of a process, in
 * ns (0 = never), by the process's statistics slot. A collective's host lead is measured
 * from it, not from its own thread's last wait: frameworks issue collectives from
 * another thread than the one that syncs (PyTorch's DDP all-reduces come from the
 * autograd engine's device thread, its loss.item() sync from the main thread), and that
 * thread may never wait itself. By slot in an array, written in place: the sync path
 * pays an inlined lookup, where a hash keyed by tgid cost ~100 ns a sync (issue 31's
 * probe-cost goal). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PROC_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} slot_waits SEC(".maps");

/* The same for a process that has no slot (all PROC_SLOTS taken), by tgid. LRU: an
 * exited process's entry is recycled. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} process_waits SEC(".maps");

/* find_proc_slot finds the slot process tgid owns, NO_PROC_SLOT if none, claiming
 * nothing: for probes off the CUDA path (NCCL), once per call. */
static __always_inline __u32 find_proc_slot(__u32 tgid)
{
	for (__u32 s = 0; s < PROC_SLOTS; s++) {
		__u64 *owner = bpf_map_lookup_elem(&proc_slots, &s);
		if (owner && *owner == tgid)
			return s;
	}
	return NO_PROC_SLOT;
}

/* last_device_wait is when a thread of process tgid, whose slot is slot (NO_PROC_SLOT
 * if the caller does not know it), last returned from waiting for the device; 0 if
 * never. Both maps are read: a process's threads that claimed their slot while all were
 * taken keep their waits by tgid. */
static __always_inline __u64 last_device_wait(__u32 tgid, __u32 slot)
{
	__u64 last = 0;
	if (slot >= PROC_SLOTS)
		slot = find_proc_slot(tgid);
	if (slot < PROC_SLOTS) {
		__u64 *v = bpf_map_lookup_elem(&slot_waits, &slot);
		if (v)
			last = *v;
	}
	__u64 *v = bpf_map_lookup_elem(&process_waits, &tgid);
	if (v && *v > last)
		last = *v;
	return last;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_REASON_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

static __always_inline void count_drop(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &reason);
	if (n)
		*n += 1;
}

static __always_inline bool pid_traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced_pids, &tgid) != NULL;
}

/* fill_header_of fills the header of an event about task pid/tid, which need not be
 * the current one (the task switched in, a request's issuer); it carries no cgroup. */
static __always_inline void fill_header_of(struct event_header *h, __u8 kind, __u64 ts, __u32 pid, __u32 tid)
{
	h->ts_ns = ts;
	h->pid = pid;
	h->tid = tid;
	h->cgroup_id = 0;
	h->kind = kind;
}

/* fill_header fills the header of an event about the current task. */
static __always_inline void fill_header(struct event_header *h, __u8 kind, __u64 ts)
{
	__u64 id = bpf_get_current_pid_tgid();
	fill_header_of(h, kind, ts, id >> 32, (__u32)id);
	/* Per-call events skip the cgroup lookup: a process's cgroup comes with its identity. */
	if (kind != EVENT_CUDA_CALL && kind != EVENT_NCCL_CALL)
		h->cgroup_id = bpf_get_current_cgroup_id();
}

/* Reserve a record, or count the drop. */
static __always_inline void *reserve_event(__u64 size)
{
	void *e = bpf_ringbuf_reserve(&events, size, 0);
	if (!e)
		count_drop(DROP_RINGBUF_FULL);
	return e;
}

static __always_inline void submit_event(void *e)
{
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* ---- NCCL and RDMA (bpf/nccl.bpf.c, bpf/rdma.bpf.c) ---- */

/* Every NCCL function the uprobes decode; the attach cookie. Values are stable. */
enum nccl_api {
	NCCL_API_UNKNOWN = 0,
	NCCL_COMM_INIT_RANK = 1,
	NCCL_COMM_INIT_RANK_CONFIG = 2,
	NCCL_COMM_INIT_ALL = 3,
	NCCL_COMM_SPLIT = 4,
	NCCL_COMM_DESTROY = 5,
	NCCL_COMM_ABORT = 6,
	NCCL_ALL_REDUCE = 7,
	NCCL_ALL_GATHER = 8,
	NCCL_REDUCE_SCATTER = 9,
	NCCL_BROADCAST = 10,
	NCCL_BCAST = 11,
	NCCL_REDUCE = 12,
	NCCL_SEND = 13,
	NCCL_RECV = 14,
	NCCL_GROUP_START = 15,
	NCCL_GROUP_END = 16,
	NCCL_COMM_COUNT = 17,     /* queries: only fill in what a split left unknown; no event */
	NCCL_COMM_USER_RANK = 18,
	NCCL_API_COUNT = 19,
};

#define NCCL_NO_PEER -1
#define NCCL_NO_VALUE 0xff

struct nccl_call_event {
	struct event_header hdr;  /* ts_ns is the call's entry time */
	__u64 duration_ns;        /* entry to return */
	__u64 comm;               /* ncclComm_t: process-local, tells communicators of one process apart */
	__u64 comm_hash;          /* FNV-1a 64 of the 128-byte ncclUniqueId: the same on every rank; 0 = unknown */
	__u64 count;              /* element count argument */
	__u64 bytes;              /* count x element size */
	__u64 stream;             /* cudaStream_t */
	__u64 seq;                /* collectives: per (comm, rank); send/recv: per (comm, peer, direction) */
	__u64 host_lead_ns;       /* entry minus the thread's last return from a device wait; 0 = none seen */
	__s32 rank;               /* in the communicator; -1 = unknown */
	__s32 nranks;             /* -1 = unknown */
	__s32 peer;               /* send/recv peer, broadcast/reduce root; -1 otherwise */
	__s32 ret;                /* ncclResult_t */
	__u32 api;                /* enum nccl_api */
	__u32 group_depth;        /* ncclGroupStart nesting at entry; > 0: the call only queued work */
	__u8 datatype;            /* ncclDataType_t; NCCL_NO_VALUE when the call has none */
	__u8 redop;               /* ncclRedOp_t; NCCL_NO_VALUE when the call has none */
	__u8 has_seq;             /* seq is meaningful (a call on a known communicator) */
	__u8 native_frames;       /* return addresses in native[], innermost first */
	__u8 _pad[4];
	/* The calling thread's user stack, as on cuda_call_event: where in the program the
	 * collective was issued (the autograd thread's DDP hook, the user's loop). */
	__u64 native[NATIVE_FRAMES_MAX];
};

#define RDMA_DEVICE_NAME_MAX 64

struct rdma_qp_event {
	struct event_header hdr;  /* ts_ns: when ibv_create_qp returned */
	__u32 qp_num;
	__u32 qp_type;            /* enum ibv_qp_type: 2 RC, 3 UC, 4 UD ... */
	char device[RDMA_DEVICE_NAME_MAX]; /* qp->context->device->name, e.g. mlx5_3 */
};

struct rdma_async_event {
	struct event_header hdr;  /* ts_ns: when ibv_get_async_event returned the event */
	__u32 event_type;         /* enum ibv_event_type */
	__s32 port;               /* element.port_num for port events, -1 otherwise */
	char device[RDMA_DEVICE_NAME_MAX]; /* context->device->name, e.g. mlx5_0 */
};
