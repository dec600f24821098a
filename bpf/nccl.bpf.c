// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* NCCL calls (libnccl.so.2): communicator setup and teardown, collectives, point-to-point
 * and groups. As for CUDA, one entry program per argument layout and one return program
 * for all, told apart by the attach cookie (= enum nccl_api); the loader attaches past a
 * leading endbr64, so at entry %rsp points at the return address and the first
 * stack-passed argument is at 8(%rsp).
 *
 * A communicator is known from the ncclCommInit* call that made it: the comm pointer the
 * call wrote back is the key of its state (communicator hash, rank, nranks, sequence
 * counter). The hash is FNV-1a 64 of the 128-byte ncclUniqueId, which every rank of the
 * communicator passes, so it is the same on every rank and every node. */
#include "traced.h"
#include "pystack.h"

/* A Python process's NCCL call: the call, then its Python frames (py_procs and the
 * walk are the CUDA family's, shared by the loader). */
struct nccl_call_py_event {
	struct nccl_call_event call;  /* call.hdr.kind is EVENT_NCCL_CALL_PY */
	struct py_stack stack;
};

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader, as trace_all_cuda in cuda.bpf.c. */
const volatile bool trace_all = true;

/* Set by the loader, as in cuda.bpf.c: whether records carry the native user stack. */
const volatile bool native_stacks = true;

const struct nccl_call_event *unused_nccl_call_event __attribute__((unused));
const struct nccl_call_py_event *unused_nccl_call_py_event __attribute__((unused));
const enum nccl_api *unused_nccl_api __attribute__((unused));

#define NCCL_SLOTS 32 /* ≥ NCCL_API_COUNT, a power of two */
#define NCCL_ID_BYTES 128
#define NCCL_INIT_ALL_MAX 64
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_IN_PROGRESS 7 /* non-blocking init: the comm pointer is valid, setup goes on */

#define FNV_OFFSET 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL

struct nccl_entry {
	__u64 ts;     /* entry time; 0 = no call of this API in flight */
	__u64 comm;   /* ncclComm_t; for calls that make communicators, the out-parameter */
	__u64 count;
	__u64 stream;
	__u64 hash;   /* init: hash of the unique id; split: hash of the new communicator */
	__s32 peer;
	__s32 rank;
	__s32 nranks;
	__u32 group_depth;
	__u8 datatype;
	__u8 redop;
	__u8 _pad[6];
	__u64 host_lead; /* entry minus the thread's last return from a device wait, 0 = none */
};

struct nccl_thread {
	struct nccl_entry calls[NCCL_SLOTS];
	__u32 group_depth; /* ncclGroupStart calls not yet closed by ncclGroupEnd */
	__u32 _pad;
};

/* In-flight NCCL calls per thread; freed by the kernel with the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nccl_thread);
} nccl_threads SEC(".maps");

struct comm_key {
	__u64 comm; /* the ncclComm_t pointer: unique within a process */
	__u32 tgid;
	__u32 _pad;
};

struct comm_state {
	__u64 hash;
	__u64 seq;    /* collectives issued on this communicator by this rank */
	__u64 splits; /* ncclCommSplit calls on this communicator (all ranks make them in order) */
	__s32 rank;
	__s32 nranks;
};

/* LRU: a process that dies without ncclCommDestroy orphans its communicators. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct comm_key);
	__type(value, struct comm_state);
} nccl_comms SEC(".maps");

/* Send and receive are matched by NCCL per pair and in order: the k-th send from A to B
 * pairs with the k-th receive on B from A. So their sequence counts per (comm, peer,
 * direction), and sender and receiver agree on it without seeing each other. */
struct p2p_key {
	__u64 comm;
	__u32 tgid;
	__s32 peer;
	__u32 send; /* 1: ncclSend, 0: ncclRecv */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct p2p_key);
	__type(value, __u64);
} nccl_p2p_seq SEC(".maps");

static __always_inline __u64 fnv1a(__u64 h, const __u8 *p, int n)
{
	for (int i = 0; i < n; i++) {
		h ^= p[i];
		h *= FNV_PRIME;
	}
	return h;
}

static __always_inline __u64 stack_arg(struct pt_regs *ctx, int n)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 * n));
	return v;
}

/* begin claims this thread's slot for the API being entered, or returns NULL when the
 * process is not traced. */
static __always_inline struct nccl_entry *begin(struct pt_regs *ctx, struct nccl_thread **thread)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct nccl_thread *t = bpf_task_storage_get(&nccl_threads, task, 0, 0);
	if (!t) {
		if (!process_traced(bpf_get_current_pid_tgid() >> 32, trace_all))
			return NULL;
		t = bpf_task_storage_get(&nccl_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!t) {
			count_drop(DROP_TRACED_SET_FULL);
			return NULL;
		}
	}
	__u64 api = bpf_get_attach_cookie(ctx);
	if (api >= NCCL_API_COUNT)
		return NULL;
	struct nccl_entry *e = &t->calls[api & (NCCL_SLOTS - 1)];
	e->ts = bpf_ktime_get_ns();
	/* The CUDA probes keep when a thread of this process last came back from waiting
	 * for the device (slot_waits, process_waits, shared): the time since is the host's
	 * lead into this call, whichever thread makes it. The thread's CUDA slot, when it
	 * has called CUDA, saves looking the process's slot up. */
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct thread_calls *tc = bpf_task_storage_get(&thread_calls, task, 0, 0);
	__u64 last_wait = last_device_wait(tgid, tc ? tc->proc_slot : NO_PROC_SLOT);
	e->host_lead = last_wait && last_wait < e->ts ? e->ts - last_wait : 0;
	e->comm = 0;
	e->count = 0;
	e->stream = 0;
	e->hash = 0;
	e->peer = NCCL_NO_PEER;
	e->rank = -1;
	e->nranks = -1;
	e->group_depth = t->group_depth;
	e->datatype = NCCL_NO_VALUE;
	e->redop = NCCL_NO_VALUE;
	if (thread)
		*thread = t;
	return e;
}

/* ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) and
 * ncclCommInitRankConfig(comm, nranks, commId, rank, config): the 128-byte unique id is a
 * struct passed by value, which x86-64 SysV classifies MEMORY: the caller copies it onto
 * the stack (8(%rsp) at entry) and it takes no register, so rank is the THIRD integer
 * argument (%edx), not the fourth. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_init_rank)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	__u8 id[NCCL_ID_BYTES];
	if (bpf_probe_read_user(id, sizeof(id), (void *)(PT_REGS_SP(ctx) + 8)) == 0)
		e->hash = fnv1a(FNV_OFFSET, id, NCCL_ID_BYTES);
	e->comm = PT_REGS_PARM1(ctx);
	e->nranks = (__s32)PT_REGS_PARM2(ctx);
	e->rank = (__s32)PT_REGS_PARM3(ctx);
	return 0;
}

/* ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist): all ranks in this one
 * process, with a unique id NCCL makes internally. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_init_all)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->comm = PT_REGS_PARM1(ctx);
	e->nranks = (__s32)PT_REGS_PARM2(ctx);
	return 0;
}

/* ncclCommSplit(comm, color, key, ncclComm_t *newcomm, config): a collective over the
 * parent. The new communicator's unique id never crosses the API, but every rank of the
 * parent makes the same splits in the same order, so (parent hash, split number, color)
 * names the new communicator identically on all of its ranks. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_split)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	struct comm_key key = {.comm = PT_REGS_PARM1(ctx), .tgid = bpf_get_current_pid_tgid() >> 32};
	__s32 color = (__s32)PT_REGS_PARM2(ctx);
	e->comm = PT_REGS_PARM4(ctx);
	e->peer = color;
	struct comm_state *parent = bpf_map_lookup_elem(&nccl_comms, &key);
	if (parent && color != NCCL_SPLIT_NOCOLOR) {
		__u64 mix[3] = {parent->hash, parent->splits, (__u64)(__u32)color};
		e->hash = fnv1a(FNV_OFFSET, (const __u8 *)mix, sizeof(mix));
	}
	if (parent)
		__sync_fetch_and_add(&parent->splits, 1);
	return 0;
}

/* ncclCommDestroy(comm), ncclCommAbort(comm). */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_comm)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->comm = PT_REGS_PARM1(ctx);
	return 0;
}

/* ncclAllReduce(send, recv, count, datatype, op, comm, stream) and
 * ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream): the seventh
 * argument, the stream, is on the stack. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_reduce_all)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->count = PT_REGS_PARM3(ctx);
	e->datatype = (__u8)PT_REGS_PARM4(ctx);
	e->redop = (__u8)PT_REGS_PARM5(ctx);
	e->comm = ctx->r9; /* the sixth argument */
	e->stream = stack_arg(ctx, 1);
	return 0;
}

/* ncclAllGather(send, recv, sendcount, datatype, comm, stream): all in registers. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_all_gather)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->count = PT_REGS_PARM3(ctx);
	e->datatype = (__u8)PT_REGS_PARM4(ctx);
	e->comm = PT_REGS_PARM5(ctx);
	e->stream = ctx->r9;
	return 0;
}

/* ncclBroadcast(send, recv, count, datatype, root, comm, stream): stream on the stack. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_broadcast)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->count = PT_REGS_PARM3(ctx);
	e->datatype = (__u8)PT_REGS_PARM4(ctx);
	e->peer = (__s32)PT_REGS_PARM5(ctx);
	e->comm = ctx->r9;
	e->stream = stack_arg(ctx, 1);
	return 0;
}

/* ncclReduce(send, recv, count, datatype, op, root, comm, stream): comm and stream are
 * the seventh and eighth arguments, at 8(%rsp) and 16(%rsp). */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_reduce)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->count = PT_REGS_PARM3(ctx);
	e->datatype = (__u8)PT_REGS_PARM4(ctx);
	e->redop = (__u8)PT_REGS_PARM5(ctx);
	e->peer = (__s32)ctx->r9;
	__u64 stack[2] = {};
	bpf_probe_read_user(stack, sizeof(stack), (void *)(PT_REGS_SP(ctx) + 8));
	e->comm = stack[0];
	e->stream = stack[1];
	return 0;
}

/* ncclBcast(buff, count, datatype, root, comm, stream), ncclSend(send, count, datatype,
 * peer, comm, stream), ncclRecv(recv, count, datatype, peer, comm, stream): one layout. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_peer)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->count = PT_REGS_PARM2(ctx);
	e->datatype = (__u8)PT_REGS_PARM3(ctx);
	e->peer = (__s32)PT_REGS_PARM4(ctx);
	e->comm = PT_REGS_PARM5(ctx);
	e->stream = ctx->r9;
	return 0;
}

/* ncclCommCount(comm, int *count), ncclCommUserRank(comm, int *rank): the out-pointer
 * is kept in count and read back at return. */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_comm_query)
{
	struct nccl_entry *e = begin(ctx, NULL);
	if (!e)
		return 0;
	e->comm = PT_REGS_PARM1(ctx);
	e->count = PT_REGS_PARM2(ctx);
	return 0;
}

/* A communicator made by ncclCommSplit has no known rank or size until the program asks
 * NCCL for them (PyTorch and most frameworks do, right after the split). */
static __always_inline void learn_from_query(__u32 api, __u32 tgid, struct nccl_entry *e)
{
	struct comm_key key = {.comm = e->comm, .tgid = tgid};
	struct comm_state *st = bpf_map_lookup_elem(&nccl_comms, &key);
	__s32 v = -1;
	if (!st || !e->count || bpf_probe_read_user(&v, sizeof(v), (void *)e->count) || v < 0)
		return;
	if (api == NCCL_COMM_USER_RANK && st->rank < 0)
		st->rank = v;
	else if (api == NCCL_COMM_COUNT && st->nranks < 0)
		st->nranks = v;
}

/* ncclGroupStart(void), ncclGroupEnd(void). */
SEC("uprobe")
int BPF_KPROBE(enter_nccl_group)
{
	begin(ctx, NULL);
	return 0;
}

static __always_inline __u64 type_size(__u8 datatype)
{
	switch (datatype) {
	case 0: /* ncclInt8 */
	case 1: /* ncclUint8 */
	case 10: /* ncclFloat8e4m3 (NCCL 2.24+) */
	case 11: /* ncclFloat8e5m2 */
		return 1;
	case 6: /* ncclFloat16 */
	case 9: /* ncclBfloat16 */
		return 2;
	case 2: /* ncclInt32 */
	case 3: /* ncclUint32 */
	case 7: /* ncclFloat32 */
		return 4;
	case 4: /* ncclInt64 */
	case 5: /* ncclUint64 */
	case 8: /* ncclFloat64 */
		return 8;
	}
	return 0;
}

static __always_inline bool makes_comm(__u32 api)
{
	return api == NCCL_COMM_INIT_RANK || api == NCCL_COMM_INIT_RANK_CONFIG || api == NCCL_COMM_SPLIT;
}

/* At the return of a call that made communicators, record them under the pointers the
 * call wrote back. */
static __always_inline void remember_comms(__u32 api, __u32 tgid, struct nccl_entry *e, struct nccl_call_event *ev)
{
	if (api == NCCL_COMM_INIT_ALL) {
		__u64 first = 0;
		if (bpf_probe_read_user(&first, sizeof(first), (void *)e->comm) || !first)
			return;
		/* All ranks live here: the first comm pointer and the pid name them together. */
		__u64 mix[2] = {tgid, first};
		__u64 hash = fnv1a(FNV_OFFSET, (const __u8 *)mix, sizeof(mix));
		ev->comm = first;
		ev->comm_hash = hash;
		ev->nranks = e->nranks;
		for (int i = 0; i < NCCL_INIT_ALL_MAX && i < e->nranks; i++) {
			__u64 comm = 0;
			if (bpf_probe_read_user(&comm, sizeof(comm), (void *)(e->comm + 8 * i)) || !comm)
				break;
			struct comm_key key = {.comm = comm, .tgid = tgid};
			struct comm_state st = {.hash = hash, .rank = i, .nranks = e->nranks};
			bpf_map_update_elem(&nccl_comms, &key, &st, BPF_ANY);
		}
		return;
	}
	__u64 comm = 0;
	if (!e->hash || bpf_probe_read_user(&comm, sizeof(comm), (void *)e->comm) || !comm)
		return;
	struct comm_key key = {.comm = comm, .tgid = tgid};
	struct comm_state st = {.hash = e->hash, .rank = e->rank, .nranks = e->nranks};
	bpf_map_update_elem(&nccl_comms, &key, &st, BPF_ANY);
	ev->comm = comm;
	ev->comm_hash = e->hash;
	ev->rank = e->rank;
	ev->nranks = e->nranks;
}

SEC("uretprobe")
int BPF_KRETPROBE(leave_nccl)
{
	struct nccl_thread *t = bpf_task_storage_get(&nccl_threads, bpf_get_current_task_btf(), 0, 0);
	if (!t)
		return 0; /* not a traced thread */
	__u32 api = (__u32)bpf_get_attach_cookie(ctx);
	if (api >= NCCL_API_COUNT)
		return 0;
	struct nccl_entry *e = &t->calls[api & (NCCL_SLOTS - 1)];
	if (!e->ts) {
		count_drop(DROP_ENTRY_MISSING);
		return 0;
	}
	__s32 ret = (__s32)PT_REGS_RC(ctx);
	if (api == NCCL_GROUP_START && ret == 0)
		t->group_depth++;
	else if (api == NCCL_GROUP_END && t->group_depth > 0)
		t->group_depth--; /* NCCL closes the group even when it reports an error */

	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (api == NCCL_COMM_COUNT || api == NCCL_COMM_USER_RANK) {
		if (ret == 0)
			learn_from_query(api, tgid, e);
		e->ts = 0;
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	/* Every NCCL call is a record (there are few, each costs micro- to milliseconds),
	 * so each carries where it was issued from: the native stack, and a Python
	 * process's frames. */
	__u64 id = bpf_get_current_pid_tgid();
	bool python = bpf_map_lookup_elem(&py_procs, &tgid) != NULL;
	struct nccl_call_event *ev = reserve_event(python ? sizeof(struct nccl_call_py_event) : sizeof(*ev));
	if (!ev) {
		/* The communicator must still be remembered, or all its later calls go unnamed. */
		if ((ret == 0 || ret == NCCL_IN_PROGRESS) && (makes_comm(api) || api == NCCL_COMM_INIT_ALL)) {
			struct nccl_call_event scratch = {};
			remember_comms(api, tgid, e, &scratch);
		}
		e->ts = 0;
		return 0;
	}
	fill_header(&ev->hdr, python ? EVENT_NCCL_CALL_PY : EVENT_NCCL_CALL, e->ts);
	if (python) {
		struct py_stack *stack = &((struct nccl_call_py_event *)ev)->stack;
		struct py_stack *read = read_py_stack(tgid, (__u32)id);
		if (read) {
			__builtin_memcpy(stack, read, sizeof(*stack));
		} else {
			stack->frames = 0;
			stack->status = PY_STACK_NO_THREAD;
		}
	}
	ev->native_frames = 0;
	if (native_stacks) {
		long n = bpf_get_stack(ctx, ev->native, sizeof(ev->native), BPF_F_USER_STACK);
		if (n > 0)
			ev->native_frames = n / sizeof(ev->native[0]);
	}
	ev->duration_ns = now - e->ts;
	ev->comm = 0;
	ev->comm_hash = 0;
	ev->count = e->count;
	ev->bytes = e->count * type_size(e->datatype);
	ev->stream = e->stream;
	ev->seq = 0;
	ev->host_lead_ns = e->host_lead;
	ev->rank = -1;
	ev->nranks = -1;
	ev->peer = e->peer;
	ev->ret = ret;
	ev->api = api;
	ev->group_depth = e->group_depth;
	ev->datatype = e->datatype;
	ev->redop = e->redop;
	ev->has_seq = 0;
	__builtin_memset(ev->_pad, 0, sizeof(ev->_pad));

	if (makes_comm(api) || api == NCCL_COMM_INIT_ALL) {
		if (api == NCCL_COMM_SPLIT)
			ev->peer = NCCL_NO_PEER; /* the color was only kept for the hash */
		if (ret == 0 || ret == NCCL_IN_PROGRESS)
			remember_comms(api, tgid, e, ev);
	} else if (e->comm) {
		struct comm_key key = {.comm = e->comm, .tgid = tgid};
		struct comm_state *st = bpf_map_lookup_elem(&nccl_comms, &key);
		ev->comm = e->comm;
		if (st) {
			ev->comm_hash = st->hash;
			ev->rank = st->rank;
			ev->nranks = st->nranks;
			if (api == NCCL_SEND || api == NCCL_RECV) {
				struct p2p_key pk = {.comm = e->comm, .tgid = tgid, .peer = e->peer, .send = api == NCCL_SEND};
				__u64 *next = bpf_map_lookup_elem(&nccl_p2p_seq, &pk);
				if (next) {
					ev->seq = __sync_fetch_and_add(next, 1);
				} else {
					__u64 one = 1;
					bpf_map_update_elem(&nccl_p2p_seq, &pk, &one, BPF_NOEXIST);
				}
				ev->has_seq = 1;
			} else if (api != NCCL_COMM_DESTROY && api != NCCL_COMM_ABORT) {
				ev->seq = __sync_fetch_and_add(&st->seq, 1);
				ev->has_seq = 1;
			}
			if (api == NCCL_COMM_DESTROY || api == NCCL_COMM_ABORT)
				bpf_map_delete_elem(&nccl_comms, &key);
		}
	}
	submit_event(ev);
	e->ts = 0;
	return 0;
}
