// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
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
	HIST_RUNQ_OTHER = 0,   /* run-queue latency of threads outside traced processes (and a
	                        * traced thread's waits before its first switch-out as one) */
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
const enum sched_wait *unused_sched_wait __attribute__((unused));
const enum sched_waker *unused_sched_waker __attribute__((unused));
const struct process_event *unused_process_event __attribute__((unused));
const struct block_io_event *unused_block_io_event __attribute__((unused));
const struct tcp_retransmit_event *unused_tcp_retransmit_event __attribute__((unused));

/* A thread's scheduling state, in task storage: the kernel frees it with the thread, so
 * nothing is left behind and nothing is evicted, and a lookup takes no hashing or
 * lock, which matters on tracepoints that fire on every context switch of the node. */
struct thread_sched {
	__u64 runnable_since; /* woken, or preempted while running; 0 = not waiting */
	__u64 off_cpu_since;  /* switched out, threads of traced processes only; 0 = none */
	/* A traced thread switched out while runnable: the task that took its CPU (next),
	 * its tgid and its comm as two words. Set only on that path. */
	__u64 preemptor_comm[2];
	__u32 preemptor_pid;
	__u8 preempted;       /* it was still runnable when switched out */
	/* A traced thread switched out blocked: the first task (or interrupt) that woke it,
	 * enum sched_waker, set by sched_waking; cleared at each switch-out. */
	__u8 waker_kind;
	__u8 _pad[2];
	__u32 waker_pid;
	__u32 waker_tid;
	__u64 waker_comm[2];
};

/* x86 keeps preempt_count per CPU, not in the task: it tells a wakeup from interrupt
 * context (whose current task is whoever was interrupted) from a task's. A typed ksym
 * (bpf_this_cpu_ptr(&__preempt_count)) would need the variable in kallsyms, which lists
 * no data symbols without CONFIG_KALLSYMS_ALL, as on this kernel. So it is found from
 * another per-CPU variable of this CPU that a pointer leads to, the run queue of the
 * current task (current->se.cfs_rq->rq, checked by its cpu): both lie in the per-CPU
 * section, so their distance is the distance of their offsets there, which the loader
 * reads from vmlinux BTF (internal/probes/percpu.go). 0: not known, no interrupt is
 * told apart. */
volatile const __s64 preempt_count_from_rq = 0;

#define PREEMPT_HARDIRQ_MASK 0x000f0000 /* HARDIRQ_MASK: bits 16-19 */
#define PREEMPT_NMI_MASK 0x00f00000     /* NMI_MASK: bits 20-23 */
#define PREEMPT_SOFTIRQ_OFFSET 0x100    /* serving a softirq (not merely bh disabled) */
#define X86_ENOSYS 38

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_sched);
} thread_scheds SEC(".maps");

/* A block request issued by a thread of a traced process: who issued it, for the
 * per-process record at completion. Requests of other processes leave no entry. */
struct block_start {
	__u64 ts;    /* issue time, when the request carries no start_time_ns */
	__u64 bytes; /* the request's size at issue */
	__u32 pid;
	__u32 tid;
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

/* The task that takes a preempted traced thread's CPU. next is a trusted BTF pointer
 * here, so its comm is read as two 8-byte loads, within the array as the verifier
 * demands, instead of a helper call; this runs only when a traced thread is preempted. */
static __always_inline void note_preemptor(struct thread_sched *s, struct task_struct *next)
{
	const __u64 *comm = (const __u64 *)next->comm;
	s->preemptor_pid = next->tgid; /* 0 for the idle task */
	s->preemptor_comm[0] = comm[0];
	s->preemptor_comm[1] = comm[1];
}

/* Who woke a blocked traced thread, and in which system call it blocked: copied into its
 * switch-in event. The syscall is read at switch-in, where the event is built: the
 * thread is still inside the call then, and its user entry frame holds the number in
 * orig_ax, with ax still -ENOSYS (a page fault's frame holds its error code in orig_ax
 * instead, and the user's ax). */
static __always_inline void note_wait_cause(struct sched_event *ev, struct thread_sched *s, struct task_struct *next)
{
	__u64 *comm = (__u64 *)ev->waker_comm;
	ev->syscall_nr = -1;
	if (s->preempted || s->waker_kind != SCHED_WAKER_TASK) {
		ev->waker_kind = s->preempted ? SCHED_WAKER_NONE : s->waker_kind;
		ev->waker_pid = 0;
		ev->waker_tid = 0;
		comm[0] = 0;
		comm[1] = 0;
	} else {
		ev->waker_kind = SCHED_WAKER_TASK;
		ev->waker_pid = s->waker_pid;
		ev->waker_tid = s->waker_tid;
		comm[0] = s->waker_comm[0];
		comm[1] = s->waker_comm[1];
	}
	if (s->preempted)
		return;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(next);
	if (regs && regs->ax == (unsigned long)-X86_ENOSYS)
		ev->syscall_nr = (__s32)regs->orig_ax;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	bool still_runnable = prev_state == TASK_RUNNING;

	if (prev->pid) {
		/* A preempted thread waits in the run queue from now, with no wakeup to mark
		 * it; a thread of a traced process is off CPU from now. Others leave no state. */
		bool traced = pid_traced(prev->tgid);
		if (still_runnable || traced) {
			struct thread_sched *s = bpf_task_storage_get(&thread_scheds, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (s) {
				if (still_runnable)
					s->runnable_since = now;
				if (traced) {
					s->off_cpu_since = now;
					s->preempted = still_runnable;
					s->waker_kind = SCHED_WAKER_NONE;
					if (still_runnable)
						note_preemptor(s, next);
				}
			}
		}
	}
	if (!next->pid)
		return 0; /* the idle task */
	struct thread_sched *s = bpf_task_storage_get(&thread_scheds, next, 0, 0);
	if (!s)
		return 0; /* never woken nor preempted since the programs were attached */
	__u64 runq = s->runnable_since ? now - s->runnable_since : 0;
	s->runnable_since = 0;
	if (!s->off_cpu_since) {
		/* Not switched out as a thread of a traced process: the node's histogram. A
		 * traced thread's first wait (after its fork, or after its process became
		 * traced while it was off CPU) lands here too; a lookup of the traced set on
		 * every switch would cost more than that is worth. */
		if (runq)
			hist_add(HIST_RUNQ_OTHER, runq);
		return 0;
	}
	struct sched_event *ev = reserve_event(sizeof(*ev));
	if (ev) {
		/* The current task is prev: the event is about next. */
		fill_header_of(&ev->hdr, EVENT_SCHED, now, next->tgid, next->pid);
		ev->off_cpu_ns = now - s->off_cpu_since;
		ev->runq_ns = runq;
		ev->preempted = s->preempted;
		note_wait_cause(ev, s, next);
		__u64 *comm = (__u64 *)ev->preemptor_comm;
		if (s->preempted) {
			ev->wait_kind = SCHED_WAIT_PREEMPTED;
			ev->preemptor_pid = s->preemptor_pid;
			comm[0] = s->preemptor_comm[0];
			comm[1] = s->preemptor_comm[1];
		} else if (runq && prev->pid) {
			/* Woken, then waited in the run queue while prev held the CPU: that is
			 * whom it waited behind. prev is a trusted BTF pointer like next. */
			const __u64 *prev_comm = (const __u64 *)prev->comm;
			ev->wait_kind = SCHED_WAIT_WOKEN;
			ev->preemptor_pid = prev->tgid;
			comm[0] = prev_comm[0];
			comm[1] = prev_comm[1];
		} else {
			/* Blocked with no wakeup seen, or woken onto an idle CPU: nobody to name. */
			ev->wait_kind = runq ? SCHED_WAIT_WOKEN : SCHED_WAIT_NONE;
			ev->preemptor_pid = 0;
			comm[0] = 0;
			comm[1] = 0;
		}
		submit_event(ev);
	}
	s->off_cpu_since = 0;
	return 0;
}

static __always_inline int mark_runnable(struct task_struct *p)
{
	struct thread_sched *s = bpf_task_storage_get(&thread_scheds, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (s)
		s->runnable_since = bpf_ktime_get_ns();
	return 0;
}

/* Whether this CPU runs in hardirq, NMI or softirq context, from its preempt count
 * (see preempt_count_from_rq). Only the wakeups of traced threads blocked voluntarily
 * pay for it: four reads. */
static __always_inline bool in_interrupt(struct task_struct *current_task)
{
	if (!preempt_count_from_rq)
		return false;
	struct rq *rq = BPF_CORE_READ(current_task, se.cfs_rq, rq);
	int cpu = -1, count = 0;
	if (!rq || bpf_probe_read_kernel(&cpu, sizeof(cpu), &rq->cpu) || cpu != (int)bpf_get_smp_processor_id())
		return false;
	if (bpf_probe_read_kernel(&count, sizeof(count), (void *)((__u64)rq + preempt_count_from_rq)))
		return false;
	return count & (PREEMPT_HARDIRQ_MASK | PREEMPT_NMI_MASK | PREEMPT_SOFTIRQ_OFFSET);
}

/* The first wakeup of a traced thread blocked voluntarily names its waker. sched_waking
 * runs in the waker's context (sched_wakeup may run on the woken task's CPU, from an
 * IPI, where current is arbitrary). Every wakeup of the node comes here: an untraced
 * task costs what marking it runnable did, one task-storage get, and a traced thread
 * that is not blocked one more test. */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_sched_waking, struct task_struct *p)
{
	struct thread_sched *s = bpf_task_storage_get(&thread_scheds, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s)
		return 0;
	s->runnable_since = bpf_ktime_get_ns();
	if (!s->off_cpu_since || s->preempted || s->waker_kind != SCHED_WAKER_NONE)
		return 0;
	struct task_struct *waker = bpf_get_current_task_btf();
	if (in_interrupt(waker)) {
		s->waker_kind = SCHED_WAKER_INTERRUPT;
		return 0;
	}
	const __u64 *comm = (const __u64 *)waker->comm;
	s->waker_pid = waker->tgid;
	s->waker_tid = waker->pid;
	s->waker_comm[0] = comm[0];
	s->waker_comm[1] = comm[1];
	s->waker_kind = SCHED_WAKER_TASK;
	return 0;
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
	__u32 tgid = p->tgid;
	if (!pid_traced(tgid))
		return 0;
	/* Its scheduling state and in-flight calls live in task storage, which the kernel
	 * frees with the task. */
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
	/* Most allocations on a node are not a traced process's: one lookup decides. */
	if (!pid_traced(tgid)) {
		counter_add(COUNT_PAGES_OTHER, pages);
		return 0;
	}
	__u64 *n = bpf_map_lookup_elem(&page_allocs, &tgid);
	if (n)
		__sync_fetch_and_add(n, pages);
	else if (bpf_map_update_elem(&page_allocs, &tgid, &pages, BPF_NOEXIST) != 0 &&
		 (n = bpf_map_lookup_elem(&page_allocs, &tgid)))
		__sync_fetch_and_add(n, pages); /* another CPU added it first */
	return 0;
}

/* Block I/O fires for every request of the node: only a traced process's request is
 * remembered at issue. Latency comes from the request itself, from start_time_ns (set
 * when the request is allocated, as the disk statistics count it) to completion. */
SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_block_rq_issue, struct request *rq)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!pid_traced(id >> 32))
		return 0;
	__u64 key = (__u64)rq;
	struct block_start s = {.ts = bpf_ktime_get_ns(), .bytes = BPF_CORE_READ(rq, __data_len), .pid = id >> 32, .tid = (__u32)id};
	bpf_map_update_elem(&block_starts, &key, &s, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 now = bpf_ktime_get_ns();
	bool write = (BPF_CORE_READ(rq, cmd_flags) & REQ_OP_BITS_MASK) == REQ_OP_WRITE;
	counter_add(write ? COUNT_BLOCK_BYTES_WRITE : COUNT_BLOCK_BYTES_READ, nr_bytes);
	/* A request can complete in parts, one call each, before its remaining length
	 * (__data_len) shrinks: it is done when this part covers what remains. */
	if (nr_bytes < BPF_CORE_READ(rq, __data_len))
		return 0;
	__u64 start = BPF_CORE_READ(rq, start_time_ns);
	/* 0 when the queue keeps no time stamps (iostats off and no I/O scheduler timing):
	 * the node's histogram then goes without, and a traced request uses its issue. */
	if (start && start <= now)
		hist_add(write ? HIST_BLOCK_WRITE : HIST_BLOCK_READ, now - start);

	__u64 key = (__u64)rq;
	struct block_start *s = bpf_map_lookup_elem(&block_starts, &key);
	if (!s)
		return 0;
	if (!start || start > now)
		start = s->ts;
	struct block_io_event *ev = reserve_event(sizeof(*ev));
	if (ev) {
		fill_header_of(&ev->hdr, EVENT_BLOCK_IO, now, s->pid, s->tid);
		ev->duration_ns = now - start;
		ev->bytes = s->bytes;
		ev->dev = BPF_CORE_READ(rq, part, bd_dev);
		ev->write = write;
		submit_event(ev);
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
	ev->sock_ino = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
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
