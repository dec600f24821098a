// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* CUDA runtime (libcudart) and driver (libcuda) API calls: one entry program per
 * argument layout and one return program for all, told apart by the attach cookie
 * (= enum cuda_api). The loader attaches past a leading endbr64 so the kernel can
 * emulate the probed `push %rbp` instead of single-stepping. At entry %rsp points at the
 * return address, so the first stack-passed argument is at 8(%rsp).
 *
 * Every call is counted in call_stats (calls, errors, bytes, a duration histogram); only
 * notable calls become ring records: failed ones, and those at least as long as the
 * API's threshold in notable_ns, which the receiver derives from its log policy and the
 * running median (0 records every call, ~0 none). */
#include "common.h"
#include "traced.h"
#include "pystack.h"

/* A record of a Python process's call: the call, then its Python frames. */
struct cuda_call_py_event {
	struct cuda_call_event call;  /* call.hdr.kind is EVENT_CUDA_CALL_PY */
	struct py_stack stack;
};

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader: trace every process that calls CUDA (true), or only processes
 * already in traced_pids / traced_cgroups (false). */
const volatile bool trace_all_cuda = true;

/* Set by the loader: duration_bounds[b] is the inclusive upper bound, in ns, of
 * call_stats bucket b; entries from DURATION_BUCKETS - 1 on are ~0, so the last bucket
 * takes everything longer. */
const volatile __u64 duration_bounds[DURATION_BOUNDS];

/* Set by the loader: bit N is set when API N blocks the host until the device has done
 * the work queued before it (syncs, blocking copies, frees); probes.DeviceWaitAPIs. */
const volatile __u64 device_wait_apis;

/* Set by the loader: every this-many calls of a thread, one becomes a record whether
 * notable or not (0: none), so that stacks are known of the calls that are not. */
const volatile __u32 sample_every = 0;

/* Set by the loader: whether records carry the calling thread's native user stack. */
const volatile bool native_stacks = true;

/* Set by the loader: how many of the PROC_SLOTS slots are used (tests use fewer). */
const volatile __u32 proc_slots_used = PROC_SLOTS;

/* Force the generator to emit Go types for the shared event structs and enums. */
const struct cuda_call_event *unused_cuda_call_event __attribute__((unused));
const struct cuda_call_py_event *unused_cuda_call_py_event __attribute__((unused));
const struct py_proc *unused_py_proc __attribute__((unused));
const enum cuda_api *unused_cuda_api __attribute__((unused));
const enum memcpy_kind *unused_memcpy_kind __attribute__((unused));
const enum event_kind *unused_event_kind __attribute__((unused));
const enum drop_reason *unused_drop_reason __attribute__((unused));
const struct call_stats *unused_call_stats __attribute__((unused));

const struct process_identity_event *unused_process_identity_event __attribute__((unused));

/* Call statistics, PROC_SLOTS x API_COUNT, indexed by slot * API_COUNT + api. An array
 * and not a hash keyed by process: the lookup is inlined, which is most of what the
 * statistics cost per call. Userspace reads it through mmap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, PROC_SLOTS * API_COUNT);
	__type(key, __u32);
	__type(value, struct call_stats);
} call_stats_table SEC(".maps");

/* What a stopping collector last read of each slot's call statistics, with the slot's
 * owner then: the next collector on the same kernel state counts each process from
 * there, so the calls made while no collector ran (the probes stay attached) are its
 * first, not lost. Only userspace reads and writes it; entries exist only between a
 * collector's stop and the next one's start. */
struct call_stats_handoff {
	__u64 owner;
	struct call_stats api[API_COUNT];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PROC_SLOTS);
	__type(key, __u32);
	__type(value, struct call_stats_handoff);
} handoff_stats SEC(".maps");

/* Per API: a call lasting at least this many ns becomes a record (written by userspace). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, API_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} notable_ns SEC(".maps");

/* The device each process last selected with a successful cudaSetDevice (by any of
 * its threads), as the ordinal it passed: userspace maps it through the process's
 * CUDA_VISIBLE_DEVICES to a GPU, for processes NVML does not list. Userspace deletes a
 * process's entry when it releases its statistics slot; LRU past that. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tgid */
	__type(value, __s32); /* device ordinal */
} selected_devices SEC(".maps");

/* proc_slot finds the statistics slot of process tgid, claiming a free one if it has
 * none; once per thread. */
static __always_inline __u32 proc_slot(__u32 tgid)
{
	__u32 used = proc_slots_used;
	if (used == 0 || used > PROC_SLOTS)
		used = PROC_SLOTS;
	for (__u32 i = 0; i < PROC_SLOTS && i < used; i++) {
		__u32 s = (tgid + i) % used;
		__u64 *owner = bpf_map_lookup_elem(&proc_slots, &s);
		if (!owner)
			break;
		if (*owner == tgid)
			return s;
		if (*owner == 0) {
			/* Another thread of the same process may claim it first: that is a find too. */
			__u64 prev = __sync_val_compare_and_swap(owner, 0, (__u64)tgid);
			if (prev == 0 || prev == tgid)
				return s;
		}
	}
	return NO_PROC_SLOT;
}

/* begin claims this thread's slot for API api and stamps the entry time, or returns
 * NULL when the process is not traced. */
static __always_inline struct call_entry *begin_api(struct pt_regs *ctx, __u64 api)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_calls *tc = bpf_task_storage_get(&thread_calls, task, 0, 0);
	if (!tc) {
		/* A thread's first call: decide once whether its process is traced. */
		if (!process_traced(bpf_get_current_pid_tgid() >> 32, trace_all_cuda))
			return NULL;
		tc = bpf_task_storage_get(&thread_calls, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!tc) {
			count_drop(DROP_TRACED_SET_FULL);
			return NULL;
		}
		tc->proc_slot = proc_slot(bpf_get_current_pid_tgid() >> 32);
		/* Userspace learns which threads drive the GPU from this, not from every call. */
		struct event_header *ev = reserve_event(sizeof(*ev));
		if (ev) {
			fill_header(ev, EVENT_CUDA_THREAD, bpf_ktime_get_ns());
			submit_event(ev);
		}
	}
	if (api >= API_COUNT)
		return NULL;
	struct call_entry *e = &tc->calls[api & (API_SLOTS - 1)];
	e->ts = bpf_ktime_get_ns();
	e->sp = PT_REGS_SP(ctx);
	e->config = 0;
	e->bytes = 0;
	e->stream = 0;
	e->handle = 0;
	e->kind = MEMCPY_NONE;
	return e;
}

/* begin is begin_api for a program that serves several APIs: the attach cookie says
 * which. A program for one API names it instead, saving a helper call per launch. */
static __always_inline struct call_entry *begin(struct pt_regs *ctx)
{
	return begin_api(ctx, bpf_get_attach_cookie(ctx));
}

/* cudaLaunchKernel(func, dim3 grid, dim3 block, args, sharedMem, stream): a 12-byte
 * dim3 by value takes two registers (x|y<<32, then z); sharedMem and stream go on the
 * stack, read at return and only for a call that becomes a record (read_launch_args).
 * hipLaunchKernel has the same layout, and hipExtLaunchKernel the same first six
 * arguments (its start and stop events and flags follow on the stack). */
SEC("uprobe")
int BPF_KPROBE(enter_cuda_launch_kernel)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	__u64 gxy = PT_REGS_PARM2(ctx), bxy = PT_REGS_PARM4(ctx);
	e->grid[0] = (__u32)gxy;
	e->grid[1] = gxy >> 32;
	e->grid[2] = (__u32)PT_REGS_PARM3(ctx);
	e->block[0] = (__u32)bxy;
	e->block[1] = bxy >> 32;
	e->block[2] = (__u32)PT_REGS_PARM5(ctx);
	return 0;
}

/* cudaLaunchKernelExC(const cudaLaunchConfig_t *config, func, args): the config starts
 * with dim3 gridDim, dim3 blockDim, size_t dynamicSmemBytes, cudaStream_t stream. */
struct cuda_launch_config {
	__u32 grid[3];
	__u32 block[3];
	__u64 smem;
	__u64 stream;
};

SEC("uprobe")
int BPF_KPROBE(enter_cuda_launch_kernel_exc)
{
	struct call_entry *e = begin_api(ctx, API_CUDA_LAUNCH_KERNEL_EXC);
	if (!e)
		return 0;
	e->config = PT_REGS_PARM1(ctx); /* read at return, for records only */
	return 0;
}

/* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sharedMem, hStream, params, extra),
 * hipModuleLaunchKernel (the same) and cuLaunchKernel_ptsz: six in registers, blockDimZ at 8(%rsp), hStream at 24(%rsp), both
 * read at return for records only (read_launch_args). */
SEC("uprobe")
int BPF_KPROBE(enter_cu_launch_kernel)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	e->grid[0] = (__u32)PT_REGS_PARM2(ctx);
	e->grid[1] = (__u32)PT_REGS_PARM3(ctx);
	e->grid[2] = (__u32)PT_REGS_PARM4(ctx);
	e->block[0] = (__u32)PT_REGS_PARM5(ctx);
	e->block[1] = (__u32)ctx->r9; /* the sixth argument; libbpf 1.1 has no PT_REGS_PARM6 */
	return 0;
}

/* cuLaunchKernelEx(const CUlaunchConfig *config, f, params, extra): seven unsigned ints
 * (grid, block, sharedMemBytes), padding, then CUstream hStream at offset 32. */
struct cu_launch_config {
	__u32 grid[3];
	__u32 block[3];
	__u32 smem;
	__u32 _pad;
	__u64 stream;
};

_Static_assert(__builtin_offsetof(struct cu_launch_config, block) == __builtin_offsetof(struct cuda_launch_config, block) &&
		       __builtin_offsetof(struct cu_launch_config, stream) == __builtin_offsetof(struct cuda_launch_config, stream) &&
		       sizeof(struct cu_launch_config) == sizeof(struct cuda_launch_config),
	       "read_launch_args reads both launch configs through struct cuda_launch_config");

SEC("uprobe")
int BPF_KPROBE(enter_cu_launch_kernel_ex)
{
	struct call_entry *e = begin_api(ctx, API_CU_LAUNCH_KERNEL_EX);
	if (!e)
		return 0;
	e->config = PT_REGS_PARM1(ctx); /* read at return, for records only */
	return 0;
}

/* cudaMemcpy(dst, src, count, kind) and cudaMemcpyAsync(dst, src, count, kind, stream). */
SEC("uprobe")
int BPF_KPROBE(enter_cuda_memcpy)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	e->bytes = PT_REGS_PARM3(ctx);
	e->kind = (__u8)PT_REGS_PARM4(ctx);
	__u64 api = bpf_get_attach_cookie(ctx);
	if (api == API_CUDA_MEMCPY_ASYNC || api == API_HIP_MEMCPY_ASYNC)
		e->stream = PT_REGS_PARM5(ctx);
	return 0;
}

/* The driver's copies carry their direction in the symbol name: cuMemcpyHtoD_v2(dst,
 * src, bytes) and the *Async_v2 forms with the stream fourth; cuMemcpy/cuMemcpyAsync
 * (unified addressing) have no direction. hipMemcpyHtoD and hipMemcpyDtoH are HIP's. */
SEC("uprobe")
int BPF_KPROBE(enter_cu_memcpy)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	__u64 api = bpf_get_attach_cookie(ctx);
	e->bytes = PT_REGS_PARM3(ctx);
	switch (api) {
	case API_CU_MEMCPY_HTOD:
	case API_CU_MEMCPY_HTOD_ASYNC:
	case API_HIP_MEMCPY_HTOD:
		e->kind = MEMCPY_HOST_TO_DEVICE;
		break;
	case API_CU_MEMCPY_DTOH:
	case API_CU_MEMCPY_DTOH_ASYNC:
	case API_HIP_MEMCPY_DTOH:
		e->kind = MEMCPY_DEVICE_TO_HOST;
		break;
	case API_CU_MEMCPY_DTOD:
	case API_CU_MEMCPY_DTOD_ASYNC:
		e->kind = MEMCPY_DEVICE_TO_DEVICE;
		break;
	default:
		e->kind = MEMCPY_DEFAULT;
	}
	if (api == API_CU_MEMCPY_ASYNC || api == API_CU_MEMCPY_HTOD_ASYNC ||
	    api == API_CU_MEMCPY_DTOH_ASYNC || api == API_CU_MEMCPY_DTOD_ASYNC)
		e->stream = PT_REGS_PARM4(ctx);
	return 0;
}

/* cudaMalloc(void **devPtr, size), cudaMallocAsync(devPtr, size, stream),
 * cuMemAlloc_v2(CUdeviceptr *dptr, size): the out-pointer is read back at return. */
SEC("uprobe")
int BPF_KPROBE(enter_alloc)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	e->handle = PT_REGS_PARM1(ctx);
	e->bytes = PT_REGS_PARM2(ctx);
	__u64 api = bpf_get_attach_cookie(ctx);
	if (api == API_CUDA_MALLOC_ASYNC || api == API_HIP_MALLOC_ASYNC)
		e->stream = PT_REGS_PARM3(ctx);
	return 0;
}

/* One handle, then optionally a stream: cudaFree(ptr), cudaFreeAsync(ptr, stream),
 * cuMemFree_v2(dptr), cudaEventSynchronize(event), cudaGraphLaunch(exec, stream),
 * cuGraphLaunch(exec, stream), cudaGraphInstantiate(pExec, graph, flags),
 * cudaSetDevice(device) (the ordinal as the handle). */
SEC("uprobe")
int BPF_KPROBE(enter_handle_stream)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	__u64 api = bpf_get_attach_cookie(ctx);
	e->handle = PT_REGS_PARM1(ctx);
	if (api == API_CUDA_FREE_ASYNC || api == API_CUDA_GRAPH_LAUNCH || api == API_CU_GRAPH_LAUNCH ||
	    api == API_HIP_FREE_ASYNC || api == API_HIP_GRAPH_LAUNCH)
		e->stream = PT_REGS_PARM2(ctx);
	return 0;
}

/* A stream first, then optionally a handle: cudaStreamSynchronize(stream),
 * cuStreamSynchronize(stream), cudaStreamWaitEvent(stream, event, flags),
 * cudaStreamBeginCapture(stream, mode), cudaStreamEndCapture(stream, cudaGraph_t *). */
SEC("uprobe")
int BPF_KPROBE(enter_stream_handle)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	__u64 api = bpf_get_attach_cookie(ctx);
	e->stream = PT_REGS_PARM1(ctx);
	if (api == API_CUDA_STREAM_WAIT_EVENT || api == API_CUDA_STREAM_END_CAPTURE || api == API_HIP_STREAM_WAIT_EVENT)
		e->handle = PT_REGS_PARM2(ctx);
	return 0;
}

/* cudaDeviceSynchronize(void), cuCtxSynchronize(void). */
SEC("uprobe")
int BPF_KPROBE(enter_no_args)
{
	struct call_entry *e = begin(ctx);
	if (!e)
		return 0;
	return 0;
}

static __always_inline bool returns_handle_through_pointer(__u32 api)
{
	return api == API_CUDA_MALLOC || api == API_CUDA_MALLOC_ASYNC || api == API_CU_MEM_ALLOC ||
	       api == API_CUDA_STREAM_END_CAPTURE || api == API_CUDA_GRAPH_INSTANTIATE ||
	       api == API_HIP_MALLOC || api == API_HIP_MALLOC_ASYNC;
}

/* duration_bucket finds the first bucket whose upper bound holds ns: a binary search
 * of the loader's table, nine steps for 320 buckets. */
static __always_inline __u32 duration_bucket(__u64 ns)
{
	__u32 lo = 0, hi = DURATION_BUCKETS - 1;
#pragma unroll
	for (int i = 0; i < 9; i++) {
		__u32 mid = (lo + hi) / 2;
		if (ns <= duration_bounds[mid & (DURATION_BOUNDS - 1)])
			hi = mid;
		else
			lo = mid + 1;
	}
	return hi;
}

/* count_call adds the call to its process's statistics; false when the process has
 * none (the caller then sends the call as a record so userspace counts it). */
static __always_inline bool count_call(struct thread_calls *tc, __u32 api, struct call_entry *e, __u64 ns, __s32 ret)
{
	if (tc->proc_slot >= PROC_SLOTS) {
		count_drop(DROP_CALL_STATS_FULL);
		return false;
	}
	__u32 idx = tc->proc_slot * API_COUNT + api;
	struct call_stats *s = bpf_map_lookup_elem(&call_stats_table, &idx);
	if (!s)
		return false;
	__u32 kind = e->kind < COPY_KINDS - 1 ? e->kind : COPY_KINDS - 1;
	/* Atomic: the threads of one process share the slot and run on several CPUs. */
	__sync_fetch_and_add(&s->calls[kind], 1);
	__sync_fetch_and_add(&s->duration_ns, ns);
	__sync_fetch_and_add(&s->buckets[duration_bucket(ns)], 1);
	if (e->bytes)
		__sync_fetch_and_add(&s->bytes[kind], e->bytes);
	if (ret)
		__sync_fetch_and_add(&s->errors, 1);
	return true;
}

/* read_launch_args fills in what the launch APIs pass in memory: on the stack (from the
 * stack pointer saved at entry) or in a launch config (through the pointer saved at
 * entry). Both belong to the caller, whose frame is still live at return; neither the
 * fake libraries nor, as far as known (docs/gpuebpf.md), the CUDA libraries write to
 * them. Reading them here, for records only, keeps a user-memory read off every launch. */
static __always_inline void read_launch_args(__u32 api, struct call_entry *e, struct cuda_call_event *ev)
{
	if (api == API_CUDA_LAUNCH_KERNEL_EXC || api == API_CU_LAUNCH_KERNEL_EX) {
		/* The two configs differ only in how sharedMem is typed, not in where grid,
		 * block and stream sit (asserted below), so one read serves both. */
		struct cuda_launch_config cfg = {};
		bpf_probe_read_user(&cfg, sizeof(cfg), (void *)e->config);
		__builtin_memcpy(ev->grid, cfg.grid, sizeof(ev->grid));
		__builtin_memcpy(ev->block, cfg.block, sizeof(ev->block));
		ev->stream = cfg.stream;
	} else if (api == API_CUDA_LAUNCH_KERNEL || api == API_HIP_LAUNCH_KERNEL || api == API_HIP_EXT_LAUNCH_KERNEL) {
		bpf_probe_read_user(&ev->stream, sizeof(ev->stream), (void *)(e->sp + 16));
	} else if (api == API_CU_LAUNCH_KERNEL || api == API_CU_LAUNCH_KERNEL_PTSZ || api == API_HIP_MODULE_LAUNCH_KERNEL) {
		/* blockDimZ, sharedMemBytes, hStream */
		__u64 stack[3] = {};
		bpf_probe_read_user(stack, sizeof(stack), (void *)(e->sp + 8));
		ev->block[2] = (__u32)stack[0];
		ev->stream = stack[2];
	}
}

/* Every failing call is counted (call_stats' errors); it becomes a record, with its
 * stack, when the API fails on the thread with another return code than its last
 * failure that became one, or ERROR_RECORD_GAP_NS after it. A thread that calls on
 * after its device is gone, or retries failing calls in a loop, fails at the rate it
 * calls: a record and a user-stack walk per call cost it ~2 µs each and would fill the
 * ring with one error. Per API, so that calls failing in turn do not record each other. */
#define ERROR_RECORD_GAP_NS (100ull * 1000 * 1000)

static __always_inline bool error_record(struct call_entry *e, __s32 ret, __u64 now)
{
	if (!ret)
		return false;
	if (ret == e->error_ret && e->error_record_ns && now - e->error_record_ns < ERROR_RECORD_GAP_NS)
		return false;
	e->error_ret = ret;
	e->error_record_ns = now;
	return true;
}

SEC("uretprobe")
int BPF_KRETPROBE(leave_call)
{
	struct thread_calls *tc = bpf_task_storage_get(&thread_calls, bpf_get_current_task_btf(), 0, 0);
	if (!tc)
		return 0; /* not a traced thread */
	__u32 api = (__u32)bpf_get_attach_cookie(ctx);
	if (api >= API_COUNT)
		return 0;
	struct call_entry *e = &tc->calls[api & (API_SLOTS - 1)];
	if (!e->ts) {
		count_drop(DROP_ENTRY_MISSING); /* attached while the call was in flight */
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u64 ns = now - e->ts;
	__s32 ret = (__s32)PT_REGS_RC(ctx);
	if (device_wait_apis & (1ull << (api & 63))) {
		__u32 slot = tc->proc_slot;
		__u64 *last = slot < PROC_SLOTS ? bpf_map_lookup_elem(&slot_waits, &slot) : NULL;
		if (last) {
			*last = now;
		} else {
			/* No slot: by tgid, in place when the process has its entry (an LRU
			 * hash update takes the map's locks and a free-list node). */
			__u32 tgid = bpf_get_current_pid_tgid() >> 32;
			last = bpf_map_lookup_elem(&process_waits, &tgid);
			if (last)
				*last = now;
			else
				bpf_map_update_elem(&process_waits, &tgid, &now, BPF_ANY);
		}
	}
	if ((api == API_CUDA_SET_DEVICE || api == API_HIP_SET_DEVICE) && ret == 0) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		__s32 device = (__s32)e->handle;
		bpf_map_update_elem(&selected_devices, &tgid, &device, BPF_ANY);
	}
	bool counted = count_call(tc, api, e, ns, ret);
	__u64 *threshold = bpf_map_lookup_elem(&notable_ns, &api);
	bool sampled = false;
	if (sample_every && ++tc->since_sample >= sample_every) {
		tc->since_sample = 0;
		sampled = true;
	}
	if (!counted || error_record(e, ret, now) || (threshold && ns >= *threshold) || sampled) {
		/* A Python process's record carries the thread's Python frames: where in the
		 * program the call was made. */
		__u64 id = bpf_get_current_pid_tgid();
		bool python = bpf_map_lookup_elem(&py_procs, &(__u32){id >> 32}) != NULL;
		struct cuda_call_event *ev = reserve_event(python ? sizeof(struct cuda_call_py_event) : sizeof(*ev));
		if (ev) {
			fill_header(&ev->hdr, python ? EVENT_CUDA_CALL_PY : EVENT_CUDA_CALL, e->ts);
			if (python) {
				struct py_stack *stack = &((struct cuda_call_py_event *)ev)->stack;
				struct py_stack *read = read_py_stack(id >> 32, (__u32)id);
				if (read) {
					__builtin_memcpy(stack, read, sizeof(*stack));
				} else {
					stack->frames = 0; /* the process was forgotten meanwhile */
					stack->status = PY_STACK_NO_THREAD;
				}
			}
			ev->duration_ns = ns;
			ev->bytes = e->bytes;
			ev->stream = e->stream;
			ev->handle = e->handle;
			__builtin_memcpy(ev->grid, e->grid, sizeof(ev->grid));
			__builtin_memcpy(ev->block, e->block, sizeof(ev->block));
			ev->api = api;
			ev->ret = ret;
			ev->memcpy_kind = e->kind;
			ev->counted = counted;
			ev->sampled = sampled;
			ev->native_frames = 0;
			if (native_stacks) {
				long n = bpf_get_stack(ctx, ev->native, sizeof(ev->native), BPF_F_USER_STACK);
				if (n > 0)
					ev->native_frames = n / sizeof(ev->native[0]);
			}
			read_launch_args(api, e, ev);
			if (returns_handle_through_pointer(api) && e->handle) {
				__u64 out = 0;
				bpf_probe_read_user(&out, sizeof(out), (void *)e->handle);
				ev->handle = out;
			}
			submit_event(ev);
		}
	}
	e->ts = 0;
	return 0;
}

/* Baseline for benchmarks: the cost of a uprobe and a uretprobe that do nothing, on
 * the same attach points as the real programs. Probe overhead is reported against it. */
SEC("uprobe")
int empty_entry(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int empty_return(struct pt_regs *ctx)
{
	return 0;
}
