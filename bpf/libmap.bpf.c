// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Attach on first use: the moment a process maps a GPU library's code, tell userspace,
 * so the library's uprobes go in within milliseconds instead of at the next rescan.
 *
 * The kernel here has no kprobes, and its BPF LSM and fentry programs are refused, so
 * the hooks are the mmap system call's own tracepoints. The dynamic linker maps a
 * library's text segment with PROT_EXEC from the file's descriptor, after relocations
 * are planned and before any of its code runs. Entry names the file (only the
 * caller's descriptor table knows it then); exit, once the mapping exists and can be
 * found in /proc/PID/maps, sends the record. Everything else (anonymous memory, data
 * segments, files that are not probed libraries) returns after a few compares. */
#include "traced.h"

#define PROT_EXEC 0x4
#define SIGSTOP 19
#define MAP_ANONYMOUS 0x20

/* How much of the file name the matcher reads: the longest name it looks for is
 * "libtorch_global_deps.so" (23). */
#define LIB_NAME_MAX 32

/* The libraries attach on first use looks for; values are stable, Go maps them to
 * probes.Library. */
enum mapped_library {
	MAPPED_NONE = 0,
	MAPPED_CUDART = 1,
	MAPPED_CUDA = 2,
	MAPPED_NCCL = 3,
	MAPPED_IBVERBS = 4,
	MAPPED_HIP = 5,
};

struct library_mapped_event {
	struct event_header hdr;  /* the mapping process; ts_ns: the mmap call's return */
	__u64 ino;                /* the file's inode: userspace waits for this mapping in /proc/PID/maps */
	__u32 dev;                /* the file's superblock device, kernel encoding (major << 20 | minor) */
	__u8 library;             /* enum mapped_library */
	__u8 held;                /* 1: the process was stopped (SIGSTOP) until userspace attaches and continues it */
	__u8 _pad[2];
	char name[LIB_NAME_MAX];  /* the file's base name, NUL-terminated */
};

/* Referenced so that bpf2go finds the types in the object's BTF (-type). */
const struct library_mapped_event *unused_library_mapped_event __attribute__((unused));
const enum mapped_library *unused_mapped_library __attribute__((unused));

/* Set by the loader: whether a traced process that maps a probed library file no probe
 * is attached to yet is stopped until userspace has attached (discovery.first_load_hold),
 * and whether every process is traced (as trace_all_cuda in cuda.bpf.c). */
const volatile bool hold_first_load = false;
const volatile bool trace_all = true;

/* Library files whose probes are attached ({dev, ino} -> 1), written by userspace after
 * each attach: a process mapping one of them needs no hold. Not state to adopt: a new
 * collector attaches afresh, so the loader empties it. */
struct file_key {
	__u64 ino;
	__u32 dev;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct file_key);
	__type(value, __u8);
} probed_files SEC(".maps");

/* Processes stopped for an attach (tgid -> the mmap's return, ns). Pinned with the rest
 * of the kernel state: a collector that dies while holding one leaves it here, and the
 * next collector continues it at start. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} held_pids SEC(".maps");

/* A library mmap between entry and exit, per thread. LRU and small: an entry whose
 * exit never came (the thread was killed in the call) must not pin a slot. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct library_mapped_event);
} pending_maps SEC(".maps");

static __always_inline bool has_prefix(const char *s, const char *prefix, int n)
{
	for (int i = 0; i < n; i++)
		if (s[i] != prefix[i])
			return false;
	return true;
}

/* A versioned or hash-suffixed name follows the stem with '.' or '-'
 * (libcudart.so.12, libcudart-d0da41ae.so.11.0, libnccl.so.2). */
static __always_inline bool stem_ends(char c)
{
	return c == '.' || c == '-';
}

static __always_inline __u8 match_library(const char *name)
{
	if (!has_prefix(name, "lib", 3))
		return MAPPED_NONE;
	if (has_prefix(name, "libcudart", 9) && stem_ends(name[9]))
		return MAPPED_CUDART;
	if (has_prefix(name, "libcuda.so", 10))
		return MAPPED_CUDA;
	if (has_prefix(name, "libnccl", 7) && stem_ends(name[7]))
		return MAPPED_NCCL;
	/* PyTorch's libraries that may carry NCCL linked in (see discovery's patterns). */
	if (has_prefix(name, "libtorch_cuda.so", 16) || has_prefix(name, "libtorch_global_deps.so", 23))
		return MAPPED_NCCL;
	/* RCCL, AMD's NCCL, exports NCCL's API under its own name. */
	if (has_prefix(name, "librccl.so", 10))
		return MAPPED_NCCL;
	if (has_prefix(name, "libibverbs.so", 13))
		return MAPPED_IBVERBS;
	if (has_prefix(name, "libamdhip64.so", 14))
		return MAPPED_HIP;
	return MAPPED_NONE;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int on_sys_enter_mmap(struct trace_event_raw_sys_enter *ctx)
{
	unsigned long prot = ctx->args[2], flags = ctx->args[3];
	int fd = (int)ctx->args[4];
	if (!(prot & PROT_EXEC) || (flags & MAP_ANONYMOUS) || fd < 0)
		return 0;

	/* The file behind the descriptor, from the caller's own descriptor table: the
	 * mapping does not exist yet, so this is the only place the file can be named. */
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = NULL;
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return 0;

	struct library_mapped_event pending = {};
	const unsigned char *dname = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (bpf_probe_read_kernel_str(pending.name, sizeof(pending.name), dname) < 0)
		return 0;
	pending.library = match_library(pending.name);
	if (pending.library == MAPPED_NONE)
		return 0;
	pending.ino = BPF_CORE_READ(file, f_inode, i_ino);
	pending.dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	bpf_map_update_elem(&pending_maps, &tid, &pending, BPF_ANY);
	return 0;
}

/* may_hold says whether the mapping process may be stopped while its probes attach: a
 * traced process, mapping a file no probe is on yet, with no controlling terminal (a
 * shell with job control would report the stop and put the job in the background) and
 * no tracer (a debugger would take the stop as its own). */
static __always_inline bool may_hold(struct library_mapped_event *e)
{
	if (!hold_first_load)
		return false;
	struct file_key key = {.ino = e->ino, .dev = e->dev};
	if (bpf_map_lookup_elem(&probed_files, &key))
		return false;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!trace_all && !pid_traced(tgid) && !in_traced_cgroup())
		return false;
	struct task_struct *task = bpf_get_current_task_btf();
	if (BPF_CORE_READ(task, signal, tty) || BPF_CORE_READ(task, ptrace))
		return false;
	return true;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int on_sys_exit_mmap(struct trace_event_raw_sys_exit *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct library_mapped_event *pending = bpf_map_lookup_elem(&pending_maps, &tid);
	if (!pending)
		return 0;
	/* A failed mmap returns -errno (-4095..-1) and mapped nothing. */
	long ret = ctx->ret;
	if (ret < 0 && ret >= -4095) {
		bpf_map_delete_elem(&pending_maps, &tid);
		return 0;
	}
	struct library_mapped_event *e = reserve_event(sizeof(*e));
	if (e) {
		__builtin_memcpy(e, pending, sizeof(*e));
		__u64 now = bpf_ktime_get_ns();
		fill_header(&e->hdr, EVENT_LIBRARY_MAPPED, now);
		/* Stopped only with its record on the ring: userspace continues what it was
		 * told about. The stop lands as the mmap returns, before the library's code
		 * (relocated, then constructors, then the first call) runs. */
		e->held = 0;
		if (may_hold(e) && bpf_map_update_elem(&held_pids, &e->hdr.pid, &now, BPF_ANY) == 0) {
			if (bpf_send_signal(SIGSTOP) == 0)
				e->held = 1;
			else
				bpf_map_delete_elem(&held_pids, &e->hdr.pid);
		}
		/* The one record that wakes the reader at once: every millisecond it waits
		 * is a millisecond of the new process's calls that no probe sees. */
		bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	}
	bpf_map_delete_elem(&pending_maps, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
