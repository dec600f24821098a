// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Baseline for benchmarks: programs that do nothing, on the same tracepoints as
 * host.bpf.c. What a host program costs per event is reported against these. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define EMPTY(tp)                          \
	SEC("tp_btf/" #tp)                 \
	int BPF_PROG(empty_##tp)           \
	{                                  \
		return 0;                  \
	}

EMPTY(sched_switch)
EMPTY(sched_waking)
EMPTY(sched_wakeup_new)
EMPTY(sched_process_fork)
EMPTY(sched_process_exec)
EMPTY(sched_process_exit)
EMPTY(mm_page_alloc)
EMPTY(block_rq_issue)
EMPTY(block_rq_complete)
EMPTY(tcp_retransmit_skb)
