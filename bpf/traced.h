/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Whether the calling process is traced, for every uprobe family (CUDA, NCCL): the traced
 * set, configured cgroups, or every caller; and the identity record at a process's first
 * traced call. Each object that includes this has its own `trace_all` constant, set by
 * the loader. */
#pragma once

#include "common.h"

static __always_inline void emit_process_identity(void)
{
	struct process_identity_event *ev = reserve_event(sizeof(*ev));
	if (!ev)
		return;
	fill_header(&ev->hdr, EVENT_PROC_IDENTITY, bpf_ktime_get_ns());
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	struct task_struct *task = bpf_get_current_task_btf();
	/* comm is cut to 15 bytes; a process gone before userspace reads /proc/PID/exe
	 * keeps its executable's whole name from here. */
	ev->exe[0] = 0;
	const unsigned char *exe = BPF_CORE_READ(task, mm, exe_file, f_path.dentry, d_name.name);
	if (exe)
		bpf_probe_read_kernel_str(ev->exe, sizeof(ev->exe), exe);
	__u64 start = BPF_CORE_READ(task, mm, env_start), end = BPF_CORE_READ(task, mm, env_end);
	__u64 len = end > start ? end - start : 0;
	if (len > IDENTITY_ENV_MAX)
		len = IDENTITY_ENV_MAX;
	ev->env_len = 0;
	if (len > 0 && bpf_probe_read_user(ev->env, len, (void *)start) == 0)
		ev->env_len = len;
	submit_event(ev);
}

/* How many cgroup levels below the root are searched for a named cgroup. Kubernetes
 * puts a container at level 4 (kubepods.slice/<qos>.slice/<pod>.slice/<ctr>.scope) and
 * Slurm a task at about 6; 32 leaves room for nested runtimes while keeping the walk,
 * done once per thread, bounded for the verifier. A named cgroup deeper than this
 * still matches its own processes, through the exact-id check. */
#define TRACED_CGROUP_MAX_DEPTH 32

/* in_traced_cgroup says whether the caller's cgroup, or any cgroup above it, is named:
 * a named cgroup stands for its whole subtree (a QoS slice, a pod, a Slurm job). */
static __always_inline bool in_traced_cgroup(void)
{
	__u64 cg = bpf_get_current_cgroup_id();
	if (bpf_map_lookup_elem(&traced_cgroups, &cg))
		return true;
	for (int level = 0; level < TRACED_CGROUP_MAX_DEPTH; level++) {
		/* 0 once level is past the caller's own cgroup */
		__u64 ancestor = bpf_get_current_ancestor_cgroup_id(level);
		if (ancestor == 0)
			return false;
		if (bpf_map_lookup_elem(&traced_cgroups, &ancestor))
			return true;
	}
	return false;
}

/* process_traced decides for a thread's first call; trace_all is the object's constant.
 * The process's first traced call also sends its identity, however it entered the
 * traced set: userspace's discovery and the fork handler add processes before they
 * call anything. Two threads racing may both send it; userspace takes either. */
static __always_inline bool process_traced(__u32 tgid, bool trace_all)
{
	__u8 *source = bpf_map_lookup_elem(&traced_pids, &tgid);
	if (source) {
		if (!(*source & TRACED_IDENTITY_SENT)) {
			*source |= TRACED_IDENTITY_SENT;
			emit_process_identity();
		}
		return true;
	}
	__u8 added = TRACED_BY_PROBE | TRACED_IDENTITY_SENT;
	if (!trace_all) {
		if (!in_traced_cgroup())
			return false;
		added = TRACED_BY_CONFIG | TRACED_IDENTITY_SENT;
	}
	if (bpf_map_update_elem(&traced_pids, &tgid, &added, BPF_NOEXIST) == 0)
		emit_process_identity();
	else if (!pid_traced(tgid))
		count_drop(DROP_TRACED_SET_FULL);
	return true;
}
