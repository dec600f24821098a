// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Host-side causes of GPU stalls, from tracepoints (tp_btf; kprobes are not used):
 * scheduling of the threads that drive the GPU, process lifecycle, page allocation,
 * block I/O latency and TCP retransmits. These fire system-wide, so every program
 * filters in the kernel first: per-event records only for threads of traced
 * processes, in-kernel histograms and counters for everything else. */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define HIST_BUCKETS 64 /* log2(ns): bucket i holds [2^i, 2^(i+1)) ns */
#define REQ_OP_BITS_MASK 0xff

/* Host-wide aggregates, read by userspace each interval. */
enum host_hist {
	HIST_RUNQ_OTHER = 0,   /* run-queue latency of threads outside traced processes */
	HIST_BLOCK_READ = 1,
	HIST_BLOCK_WRITE = 2,
	HIST_COUNT = 3,
};

enum host_counter {
	COUNT_PAGES_OTHER = 0,       /* pages allocated by untraced processes */
	COUNT_RETRANSMIT_IPV4 = 1,
	COUNT_RETRANSMIT_IPV6 = 2,
	COUNT_BLOCK_BYTES_READ = 3,
	COUNT_BLOCK_BYTES_WRITE = 4,
	COUNTER_COUNT = 5,
};

const enum host_hist *unused_host_hist __attribute__((unused));
const enum host_counter *unused_host_counter __attribute__((unused));
const struct sched_event *unused_sched_event __attribute__((unused));
const struct process_event *unused_process_event __attribute__((unused));
const struct block_io_event *unused_block_io_event __attribute__((unused));
const struct tcp_retransmit_event *unused_tcp_retransmit_event __attribute__((unused));

struct off_cpu_start {
	__u64 ts;
	__u8 preempted;
	__u8 _pad[7];
};

/* tid -> when a traced thread was switched out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct off_cpu_start);
} off_cpu_starts SEC(".maps");

/* tid -> when the thread became runnable (woken, or preempted while running). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
} runnable_since SEC(".maps");

struct block_start {
	__u64 ts;
	__u64 bytes;
	__u32 pid;
	__u32 tid;
	__u32 dev;
	__u8 write;
	__u8 _pad[3];
};

/* struct request * -> issue. LRU: a request whose completion is never seen must not leak. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct block_start);
} block_starts SEC(".maps");

/* tgid -> pages allocated (sum of 2^order) by traced processes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} page_allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HIST_COUNT * HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} host_hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} host_counters SEC(".maps");

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;
	shift = (v > 0xFFFFFFFFULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline void hist_add(__u32 hist, __u64 ns)
{
	__u32 idx = hist * HIST_BUCKETS + (log2_u64(ns) & (HIST_BUCKETS - 1));
	__u64 *n = bpf_map_lookup_elem(&host_hists, &idx);
	if (n)
		*n += 1;
}

static __always_inline void counter_add(__u32 counter, __u64 v)
{
	__u64 *n = bpf_map_lookup_elem(&host_counters, &counter);
	if (n)
		*n += v;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 prev_tid = prev->pid, next_tid = next->pid, next_tgid = next->tgid;
	bool still_runnable = prev_state == TASK_RUNNING;

	if (prev_tid) {
		if (pid_traced(prev->tgid)) {
			struct off_cpu_start s = {.ts = now, .preempted = still_runnable};
			bpf_map_update_elem(&off_cpu_starts, &prev_tid, &s, BPF_ANY);
		}
		/* Preempted: it waits in the run queue from now, with no wakeup to mark it. */
		if (still_runnable)
			bpf_map_update_elem(&runnable_since, &prev_tid, &now, BPF_ANY);
	}
	if (!next_tid)
		return 0; /* the idle task */

	__u64 runq = 0;
	__u64 *since = bpf_map_lookup_elem(&runnable_since, &next_tid);
	if (since) {
		runq = now - *since;
		bpf_map_delete_elem(&runnable_since, &next_tid);
	}
	if (!pid_traced(next_tgid)) {
		if (runq)
			hist_add(HIST_RUNQ_OTHER, runq);
		return 0;
	}
	struct off_cpu_start *s = bpf_map_lookup_elem(&off_cpu_starts, &next_tid);
	if (!s)
		return 0; /* switched out before the process was traced */
	struct sched_event *ev = reserve_event(sizeof(*ev));
	if (ev) {
		/* The current task is prev, so the header is filled for next by hand. */
		ev->hdr.ts_ns = now;
		ev->hdr.pid = next_tgid;
		ev->hdr.tid = next_tid;
		ev->hdr.cgroup_id = 0;
		ev->hdr.kind = EVENT_SCHED;
		ev->off_cpu_ns = now - s->ts;
		ev->runq_ns = runq;
		ev->preempted = s->preempted;
		submit_event(ev);
	}
	bpf_map_delete_elem(&off_cpu_starts, &next_tid);
	return 0;
}

static __always_inline int mark_runnable(struct task_struct *p)
{
	__u32 tid = p->pid;
	__u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&runnable_since, &tid, &now, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_sched_wakeup, struct task_struct *p)
{
	return mark_runnable(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_sched_wakeup_new, struct task_struct *p)
{
	return mark_runnable(p);
}

static __always_inline void emit_process_event(__u8 kind, struct task_struct *p, __u32 parent, __u32 exit_code)
{
	struct process_event *ev = reserve_event(sizeof(*ev));
	if (!ev)
		return;
	fill_header(&ev->hdr, kind, bpf_ktime_get_ns());
	ev->hdr.pid = p->tgid;
	ev->hdr.tid = p->pid;
	ev->parent_pid = parent;
	ev->exit_code = exit_code;
	bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), p->comm);
	submit_event(ev);
}

/* Children of traced processes (DataLoader workers, fork storms) are traced too. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tgid = parent->tgid, child_tgid = child->tgid;
	if (child_tgid == parent_tgid || !pid_traced(parent_tgid))
		return 0; /* a new thread, or an untraced parent */
	__u8 source = TRACED_BY_FORK;
	if (bpf_map_update_elem(&traced_pids, &child_tgid, &source, BPF_ANY))
		count_drop(DROP_TRACED_SET_FULL);
	emit_process_event(EVENT_PROC_FORK, child, parent_tgid, 0);
	return 0;
}

/* Every exec is reported: it is when a new CUDA process may appear, so discovery
 * rescans that process's mappings instead of waiting for its periodic scan. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_sched_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	emit_process_event(EVENT_PROC_EXEC, p, 0, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_sched_process_exit, struct task_struct *p, bool group_dead)
{
	__u32 tgid = p->tgid, tid = p->pid;
	if (!pid_traced(tgid))
		return 0;
	/* Its scheduling state goes with it now rather than at LRU eviction; its in-flight
	 * calls live in task storage, which the kernel frees with the task. */
	bpf_map_delete_elem(&off_cpu_starts, &tid);
	bpf_map_delete_elem(&runnable_since, &tid);
	if (group_dead) {
		emit_process_event(EVENT_PROC_EXIT, p, 0, (__u32)p->exit_code);
		bpf_map_delete_elem(&traced_pids, &tgid);
	}
	return 0;
}

/* Aggregated in the kernel: one counter add per allocation, no events. */
SEC("tp_btf/mm_page_alloc")
int BPF_PROG(on_mm_page_alloc, struct page *page, unsigned int order)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 pages = 1ULL << (order & 31);
	__u64 *n = bpf_map_lookup_elem(&page_allocs, &tgid);
	if (n) {
		__sync_fetch_and_add(n, pages);
		return 0;
	}
	if (pid_traced(tgid)) {
		bpf_map_update_elem(&page_allocs, &tgid, &pages, BPF_NOEXIST);
		return 0;
	}
	counter_add(COUNT_PAGES_OTHER, pages);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_block_rq_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	__u64 id = bpf_get_current_pid_tgid();
	struct block_start s = {
		.ts = bpf_ktime_get_ns(),
		.bytes = BPF_CORE_READ(rq, __data_len),
		.pid = id >> 32,
		.tid = (__u32)id,
		.dev = BPF_CORE_READ(rq, part, bd_dev),
		.write = (BPF_CORE_READ(rq, cmd_flags) & REQ_OP_BITS_MASK) == REQ_OP_WRITE,
	};
	bpf_map_update_elem(&block_starts, &key, &s, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct block_start *s = bpf_map_lookup_elem(&block_starts, &key);
	if (!s)
		return 0;
	__u64 now = bpf_ktime_get_ns(), lat = now - s->ts;
	hist_add(s->write ? HIST_BLOCK_WRITE : HIST_BLOCK_READ, lat);
	counter_add(s->write ? COUNT_BLOCK_BYTES_WRITE : COUNT_BLOCK_BYTES_READ, s->bytes);
	if (pid_traced(s->pid)) {
		struct block_io_event *ev = reserve_event(sizeof(*ev));
		if (ev) {
			ev->hdr.ts_ns = now;
			ev->hdr.pid = s->pid;
			ev->hdr.tid = s->tid;
			ev->hdr.cgroup_id = 0;
			ev->hdr.kind = EVENT_BLOCK_IO;
			ev->duration_ns = lat;
			ev->bytes = s->bytes;
			ev->dev = s->dev;
			ev->write = s->write;
			submit_event(ev);
		}
	}
	bpf_map_delete_elem(&block_starts, &key);
	return 0;
}

/* Rare, and a sign of fabric or network trouble on the hosts that share a job: every
 * retransmit is reported, IPv4 and IPv6. */
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(on_tcp_retransmit_skb, const struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	counter_add(family == 10 ? COUNT_RETRANSMIT_IPV6 : COUNT_RETRANSMIT_IPV4, 1);
	struct tcp_retransmit_event *ev = reserve_event(sizeof(*ev));
	if (!ev)
		return 0;
	fill_header(&ev->hdr, EVENT_TCP_RETRANSMIT, bpf_ktime_get_ns());
	ev->family = family;
	ev->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	ev->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	ev->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (family == 10) {
		BPF_CORE_READ_INTO(&ev->saddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&ev->daddr, sk, __sk_common.skc_v6_daddr);
	} else {
		BPF_CORE_READ_INTO((__u32 *)ev->saddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)ev->daddr, sk, __sk_common.skc_daddr);
	}
	submit_event(ev);
	return 0;
}
